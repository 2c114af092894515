"""Trace records read straight into analysis rows: rmq._core.TraceRows against its
reference rmq.fallback.trace.TraceRows, and rmq.trace.segments.segment_rows (the compiled
reader, handing over to rmq.trace.rows' reading at a record it leaves to it). The row layout
is rmq.trace.rows' for both."""

import mmap
import struct

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

import rmq
from rmq.trace import segments as trace
from rmq.errors import TraceError
from rmq.trace.rows import TRACE_ROW_FIELDS
from rmq.trace.segments import IN, OUT, SegmentWriter
from support import VECTORS, command_kwargs, vector_bytes

FILE = "file:/traces/t.rmqtrace"
T0 = 1_700_000_000_000_000_000
MAX = (1 << 31) - 1
F = {name: i for i, name in enumerate(TRACE_ROW_FIELDS)}


def header_bytes():
    return msgpack.packb({"rmq-trace": 1, "created_ns": T0, "host": "h", "pid": 1})


def segment(records):
    """A segment's bytes: the header, then each record packed as the writer packs it."""
    packer = msgpack.Packer(use_bin_type=True)
    return header_bytes() + b"".join(packer.pack(r) for r in records)


def request(code=105, opaque=1, **ext):
    return rmq.encode_frame(rmq.RemotingCommand.request(code, ext or {"topic": "T"},
                                                        opaque=opaque))


def rows(impl, data, start=None, **kw):
    r = impl.TraceRows(data, len(header_bytes()) if start is None else start, FILE, 7, **kw)
    return list(r), r


#: Frames that do not decode, each a row with decode_error set.
BAD_FRAMES = [
    b"", b"\x00\x00\x00\x04abcd"[:6],
    struct.pack(">ii", 100, 4) + b"{}",                    # length does not match
    struct.pack(">ii", 4 + 8, 8) + b'{"code":',            # cut JSON header
    struct.pack(">ii", 6, (5 << 24) | 2) + b"{}",          # unknown serialize type
    struct.pack(">ii", 6, 100) + b"{}",                    # header longer than the frame
    struct.pack(">ii", -5, 0),                             # negative length
    struct.pack(">ii", 4 + 2, 2) + b"[]",                  # header not an object
]


def vector_frames():
    return [vector_bytes(v["file"]) for v in VECTORS]


# ---------------------------------------------------------------- rows and their fields

def test_a_row_holds_the_record_and_the_decoded_header(impl):
    req = rmq.RemotingCommand.request(105, {"topic": "TopicA", "brokerName": "b"}, opaque=42)
    answer = req.response(17, remark="No topic route info", body=b"x" * 300)
    data = segment([(T0, 3, "10.0.0.9:5000", IN, rmq.encode_frame(req)),
                    (T0 + 1000, 3, "10.0.0.9:5000", OUT, rmq.encode_frame(answer))])
    out, r = rows(impl, data, conn_base=5 << 32)
    assert len(out) == 2 and all(len(row) == len(TRACE_ROW_FIELDS) for row in out)
    first = dict(zip(TRACE_ROW_FIELDS, out[0]))
    assert first == {"file": FILE, "file_index": 7, "record": 0, "time_ns": T0,
                     "conn": (5 << 32) + 3, "peer": "10.0.0.9:5000", "direction": IN,
                     "code": 105, "flag": 0, "opaque": 42, "language": "JAVA",
                     "version": req.version, "remark": None,
                     "ext": {"topic": "TopicA", "brokerName": "b"}, "body_len": 0,
                     "frame_len": len(rmq.encode_frame(req)), "decode_error": None}
    second = dict(zip(TRACE_ROW_FIELDS, out[1]))
    assert (second["record"], second["direction"], second["code"], second["flag"]) == (1, OUT, 17, 1)
    assert second["remark"] == "No topic route info" and second["body_len"] == 300
    assert (r.stopped, r.offset, r.records) == ("end", len(data), 2)


def test_every_vector_frame_gives_the_row_decode_frame_gives(impl):
    frames = vector_frames()
    data = segment([(T0 + i, i % 5, f"10.0.0.{i % 5}:1", i % 2, f) for i, f in enumerate(frames)])
    out, r = rows(impl, data)
    assert r.stopped == "end" and len(out) == len(frames)
    for row, frame in zip(out, frames):
        c = impl.decode_frame(frame, MAX)
        assert row[F["code"]:F["body_len"]] == (c.code, c.flag, c.opaque, c.language, c.version,
                                               c.remark, c.ext_fields)
        assert (row[F["body_len"]], row[F["frame_len"]], row[F["decode_error"]]) == \
            (len(c.body), len(frame), None)


def test_an_undecodable_frame_is_a_row_with_the_error(impl):
    data = segment([(T0 + i, 1, "p", IN, f) for i, f in enumerate(BAD_FRAMES)]
                   + [(T0 + 99, 1, "p", IN, request())])
    out, r = rows(impl, data)
    assert len(out) == len(BAD_FRAMES) + 1 and r.stopped == "end"
    for row, frame in zip(out, BAD_FRAMES):
        assert row[F["code"]] is None and row[F["ext"]] is None
        assert row[F["frame_len"]] == len(frame)
        with pytest.raises(Exception) as e:
            impl.decode_frame(frame, MAX)
        assert row[F["decode_error"]] == f"{type(e.value).__name__}: {e.value}"
    assert out[-1][F["code"]] == 105 and out[-1][F["decode_error"]] is None


def test_the_frame_size_limit_applies(impl):
    data = segment([(T0, 1, "p", IN, request())])
    (row,), _ = rows(impl, data, max_frame_length=16)
    assert row[F["decode_error"]].startswith("FrameTooLarge:")


def test_a_nil_peer_and_a_peer_that_changes_on_one_connection(impl):
    data = segment([(T0, 1, "a:1", IN, request()), (T0, 1, None, IN, request()),
                    (T0, 1, "b:2", IN, request()), (T0, 1, "b:2", IN, request()),
                    (T0, 2, "b:2", IN, request()), (T0, 1, "a:1", IN, request())])
    out, _ = rows(impl, data)
    assert [r[F["peer"]] for r in out] == ["a:1", None, "b:2", "b:2", "b:2", "a:1"]


def test_start_and_first_record(impl):
    data = segment([(T0 + i, 1, "p", IN, request(opaque=i)) for i in range(3)])
    one = len(header_bytes()) + len(msgpack.packb((T0, 1, "p", IN, request(opaque=0)),
                                                  use_bin_type=True))
    out, r = rows(impl, data, start=one, first_record=10)
    assert [row[F["record"]] for row in out] == [10, 11] and r.records == 12
    assert [row[F["opaque"]] for row in out] == [1, 2]
    with pytest.raises(ValueError, match="start"):
        impl.TraceRows(data, len(data) + 1, FILE, 0)


def test_an_empty_remainder_ends_at_once(impl):
    data = segment([])
    out, r = rows(impl, data)
    assert out == [] and (r.stopped, r.offset, r.records) == ("end", len(data), 0)


# ---------------------------------------------------------------- cut segments

def test_a_cut_last_record_ends_the_rows_at_every_byte(impl):
    records = [(T0, 1, "10.0.0.1:1", IN, request(opaque=1)),
               (T0 + 5, 1, "10.0.0.1:1", OUT, request(opaque=2) + b"")]
    data = segment(records)
    first_end = len(segment(records[:1]))
    whole = list(rows(impl, data)[0])
    for cut in range(len(header_bytes()), len(data)):
        out, r = rows(impl, data[:cut])
        n = 1 if cut >= first_end else 0
        assert out == whole[:n], cut
        assert r.stopped == ("end" if cut in (len(header_bytes()), first_end) else "cut"), cut
        assert r.offset == (first_end if n else len(header_bytes())) and r.records == n


# ---------------------------------------------------------------- compiled = reference

def same(rows):
    """Rows as both implementations must agree on them: an error's type, not its
    wording (the two codecs word some errors differently, as their own tests allow)."""
    e = F["decode_error"]
    return [r[:e] + (r[e] and r[e].split(":")[0],) for r in rows]


def test_compiled_rows_equal_the_reference_on_the_vectors(compiled, fallback):
    frames = vector_frames() + BAD_FRAMES
    data = segment([(T0 + 7 * i, i % 9, f"[::1]:{i % 9}", i % 2, f) for i, f in enumerate(frames)])
    assert same(rows(compiled, data, conn_base=3 << 32)[0]) == \
        same(rows(fallback, data, conn_base=3 << 32)[0])


def test_the_compiled_rows_are_laid_out_as_the_trace_schema_says(compiled, fallback):
    """trace.pxi writes its rows' fields in order by hand; columns.pxi, the reference
    and analysis read them by rmq.trace.rows' positions. Each field, on a row that decodes
    and on one that does not, is where rmq.trace.rows puts it."""
    from rmq.trace.rows import ROW
    frames = [request(code=105, opaque=5), BAD_FRAMES[2]]
    data = segment([(T0 + i, 3, f"p:{i}", i, f) for i, f in enumerate(frames)])
    for impl in (compiled, fallback):
        good, bad = rows(impl, data, conn_base=1 << 40)[0]
        for i, row in enumerate((good, bad)):
            assert len(row) == len(TRACE_ROW_FIELDS)
            assert [row[ROW[n]] for n in ("file", "file_index", "record", "time_ns", "conn",
                                          "peer", "direction", "frame_len")] == \
                [FILE, 7, i, T0 + i, (1 << 40) + 3, f"p:{i}", i, len(frames[i])]
        assert (good[ROW["code"]], good[ROW["flag"]], good[ROW["opaque"]]) == (105, 0, 5)
        assert (good[ROW["language"]], good[ROW["remark"]], good[ROW["ext"]]) == \
            ("JAVA", None, {"topic": "T"})
        assert (good[ROW["body_len"]], good[ROW["decode_error"]]) == (0, None)
        assert bad[ROW["code"]] is None and bad[ROW["decode_error"]].startswith("CorruptFrame")


@given(st.lists(st.tuples(
    st.integers(-(1 << 63), (1 << 63) - 1), st.integers(-(1 << 31), (1 << 40)),
    st.none() | st.text(max_size=30), st.integers(0, 1),
    command_kwargs()), max_size=12))
def test_compiled_rows_equal_the_reference_on_any_records(compiled, fallback, records):
    data = segment([(t, conn, peer, d, compiled.encode_frame(compiled.RemotingCommand(**kw)))
                    for t, conn, peer, d, kw in records])
    c_rows, c = rows(compiled, data, conn_base=1 << 32)
    p_rows, p = rows(fallback, data, conn_base=1 << 32)
    assert same(c_rows) == same(p_rows) and (c.stopped, c.offset, c.records) == (p.stopped, p.offset, p.records)


#: Records in forms the compiled reader leaves to the reference (not the writer's).
OTHER_FORMS = [
    [(1.5, 1, "p", IN, request())],                        # a float time
    [(T0, 1, "p", IN, "a str frame")],                     # a str, not bin
    [(T0, 1, b"bin peer", IN, request())],                 # a bin peer
    [(1 << 63, 1, "p", IN, request())],                    # beyond int64
    [(T0, 1, "p", IN, request(), "extra")],                # six fields
    [(T0, 1, "p", IN)],                                    # four fields
    [[T0, 1, "p", IN, request()] * 4],                     # a 20-array (array16)
    [{"t": T0}],                                           # not an array
    [(T0, "1", "p", IN, request())],                       # a str connection id
    [(T0, (1 << 62), "p", IN, request())],                 # conn_base + conn beyond int64
]


@pytest.mark.parametrize("tail", OTHER_FORMS, ids=range(len(OTHER_FORMS)))
def test_segment_rows_hands_over_to_the_reference_at_another_form(compiled, fallback, tail,
                                                                   monkeypatch):
    good = [(T0 + i, 1, "p:1", IN, request(opaque=i)) for i in range(3)]
    data = segment(good + tail + good)
    base = 1 << 62
    stop = compiled.TraceRows(data, len(header_bytes()), FILE, 0, base)
    assert len(list(stop)) == 3 and stop.stopped == "other"

    def run():
        try:
            return list(trace.segment_rows(data, FILE, 0, base, MAX)), None
        except TraceError as e:
            return None, str(e)

    got = run()
    import rmq._impl
    monkeypatch.setattr(rmq._impl, "core", fallback)
    alone = run()                       # the reference alone says the same
    assert (got[0] and same(got[0]), got[1]) == (alone[0] and same(alone[0]), alone[1])
    if got[0] is not None:
        assert len(got[0]) == 3 + len(tail) + 3
        assert [r[F["record"]] for r in got[0]] == list(range(len(got[0])))


def test_a_peer_that_is_not_utf8_is_a_corrupt_record(compiled):
    packer = msgpack.Packer(use_bin_type=True)
    bad = b"\x95" + packer.pack(T0) + packer.pack(1) + b"\xa2\xff\xfe" + packer.pack(IN) + \
        packer.pack(request())
    data = segment([(T0, 1, "p", IN, request())]) + bad
    r = compiled.TraceRows(data, len(header_bytes()), FILE, 0)
    assert len(list(r)) == 1 and r.stopped == "other"
    with pytest.raises(TraceError, match="corrupt record 1"):
        list(trace.segment_rows(data, FILE, 0))


# ---------------------------------------------------------------- segment_rows

def test_segment_rows_reads_what_the_writer_wrote(tmp_path, impl, monkeypatch):
    import rmq._impl
    monkeypatch.setattr(rmq._impl, "core", impl)
    w = SegmentWriter(tmp_path)
    for i, frame in enumerate(vector_frames()):
        w.write(T0 + i, i % 3, f"10.0.0.{i % 3}:9", i % 2, frame)
    w.close()
    data = open(w.files[0], "rb").read()
    stats = {}
    out = list(trace.segment_rows(data, FILE, 2, 0, MAX, stats=stats))
    recs = list(trace.read_records(w.files[0]))
    assert [r[3:7] for r in out] == [(t, c, p, d) for t, c, p, d, _ in recs]
    assert stats == {"records": len(recs), "truncated_bytes": 0}
    cut = list(trace.segment_rows(data[:-3], FILE, 2, 0, MAX, stats=stats))
    assert cut == out[:-1] and stats["records"] == len(recs) - 1
    # what is left over: the last record, but for the 3 bytes cut off it
    assert stats["truncated_bytes"] == len(msgpack.packb(recs[-1], use_bin_type=True)) - 3


@pytest.mark.parametrize("data, message", [
    (b"", "empty or cut before its header"),
    (b"not a trace", "not a trace segment"),
    (msgpack.packb({"rmq-trace": 9}), "trace format 9"),
])
def test_segment_rows_refuses_what_is_not_a_segment(data, message):
    with pytest.raises(TraceError, match=message):
        list(trace.segment_rows(data, FILE, 0))


def test_the_rows_let_go_of_a_mapped_file_once_read(tmp_path, impl, monkeypatch):
    import rmq._impl
    monkeypatch.setattr(rmq._impl, "core", impl)
    path = tmp_path / "s.rmqtrace"
    path.write_bytes(segment([(T0, 1, "p", IN, request())]))
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    assert len(list(trace.segment_rows(m, FILE, 0))) == 1
    m.close()           # BufferError if a reader still held the mapping
