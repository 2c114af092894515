"""Trace rows as columns, requests met with their answers within one input:
rmq._core.TraceColumns against its reference rmq.fallback.columns.TraceColumns (the
same tests on both, and Hypothesis comparing them, batches cut anywhere), the rule
the analysis relies on (pairing again every frame of the keys a file left open gives
what pairing the whole trace at once gives), and the Arrow batches made of them
(rmq.trace.arrow)."""

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import parts  # noqa: E402

parts.require("pyarrow", module=True)

import rmq  # noqa: E402
from rmq.protocol import IN, OUT  # noqa: E402
from rmq.trace.rows import (EXT_COLUMNS, MAX_BATCH_BYTES, MAX_WAITING,  # noqa: E402
                            PAIRED_ROW_FIELDS, TRACE_ROW_FIELDS)
from rmq.trace import arrow  # noqa: E402

F = {name: i for i, name in enumerate(PAIRED_ROW_FIELDS)}
REQUEST, ANSWER, ONEWAY = "request", "answer", "oneway"


def row(kind, conn, opaque, t, *, record=0, code=None, remark=None, error=None, direction=None):
    """A trace row as the decode makes it."""
    flag = {REQUEST: 0, ONEWAY: 2, ANSWER: 1}[kind]
    if direction is None:
        direction = OUT if kind == ANSWER else IN
    if code is None:
        code = 0 if kind == ANSWER else 105
    if error is not None:
        return ("f", 0, record, t, conn, "p", direction, None, None, None, None, None, None,
                None, None, 9, error)
    return ("f", 0, record, t, conn, "p", direction, code, flag, opaque, "JAVA", 409, remark,
            None, 0, 30, None)


NAMED = tuple(EXT_COLUMNS.values())


def batch_rows_of(taken, file="f", file_index=0):
    """The PAIRED_ROW_FIELDS tuples of a take(), as rmq.trace.arrow makes them."""
    table = arrow.raw_batch(taken, file, file_index).to_pylist()
    return [tuple(dict(r[k]) if k == "ext" and r[k] is not None else r[k]
                  for k in PAIRED_ROW_FIELDS) for r in table]


def paired(impl, rows, **kw):
    """Every row through TraceColumns.append, batches taken whenever full."""
    cols = impl.TraceColumns("f", ext_columns=NAMED, **kw)
    out = []
    for r in rows:
        cols.append(r)
        if cols.full:
            out += batch_rows_of(cols.take())
    return out + batch_rows_of(cols.take(final=True))


def answer_of(out_row):
    return out_row[F["answer_time_ns"]:]


def by_record(out):
    return {r[F["record"]]: r for r in out}


def numbered(rows):
    return [r[:2] + (i,) + r[3:] for i, r in enumerate(rows)]


def test_a_request_carries_its_answer_and_both_are_settled(impl):
    rows = numbered([row(REQUEST, 1, 5, 100), row(ANSWER, 1, 5, 130, code=17, remark="no")])
    out = paired(impl, rows)
    assert [r[:len(TRACE_ROW_FIELDS)] for r in out] == rows
    assert answer_of(out[0]) == (130, 17, "no", False)
    assert answer_of(out[1]) == (None, None, None, False)


def test_the_next_request_of_an_opaque_leaves_the_one_before_unanswered(impl):
    rows = numbered([row(REQUEST, 1, 5, 100), row(REQUEST, 1, 5, 110), row(ANSWER, 1, 5, 120)])
    got = by_record(paired(impl, rows))
    assert answer_of(got[0]) == (None, None, None, False)
    assert answer_of(got[1]) == (120, 0, None, False)


def test_connections_and_opaques_are_kept_apart(impl):
    rows = numbered([row(REQUEST, 1, 5, 100), row(REQUEST, 2, 5, 101), row(REQUEST, 1, 6, 102),
                     row(ANSWER, 2, 5, 103, code=2), row(ANSWER, 1, 6, 104, code=3),
                     row(ANSWER, 1, 5, 105, code=1)])
    got = by_record(paired(impl, rows))
    assert [answer_of(got[i])[:2] for i in range(3)] == [(105, 1), (103, 2), (104, 3)]


def test_a_oneway_request_is_never_answered(impl):
    rows = numbered([row(ONEWAY, 1, 5, 100), row(ANSWER, 1, 5, 110)])
    got = by_record(paired(impl, rows))
    assert answer_of(got[0]) == (None, None, None, False)
    # the answer met no waiting request: its key is paired again across the files
    assert answer_of(got[1]) == (None, None, None, True)


def test_answers_that_met_no_request_are_open(impl):
    """An answer before any request, a duplicate; a request still waiting at the
    end is unanswered (its answer, in a later file, would be open there)."""
    rows = numbered([row(ANSWER, 1, 4, 90), row(REQUEST, 1, 5, 100), row(ANSWER, 1, 5, 110),
                     row(ANSWER, 1, 5, 120), row(REQUEST, 1, 6, 130)])
    got = by_record(paired(impl, rows))
    assert [got[i][F["pair_open"]] for i in range(5)] == [True, False, False, True, False]
    assert answer_of(got[4]) == (None, None, None, False)


def test_rows_that_are_no_request_or_answer_pass_through(impl):
    rows = numbered([
        row(REQUEST, 1, 5, 100, error="CorruptFrame: cut"),
        row(ANSWER, 1, 5, 101, direction=IN),            # an answer to the NameServer
        row(REQUEST, 1, 5, 102, direction=OUT),          # a request from it
        row(REQUEST, 1, 5, 103)])
    out = paired(impl, rows)
    assert [r[F["record"]] for r in out] == [0, 1, 2, 3]
    assert [answer_of(r) for r in out[:3]] == [(None,) * 4] * 3
    assert [r[:len(TRACE_ROW_FIELDS)] for r in out] == rows


def test_past_max_waiting_every_waiting_request_is_let_go(impl):
    rows = numbered([row(REQUEST, 1, o, 100 + o) for o in range(5)]
                    + [row(ANSWER, 1, o, 200 + o) for o in range(5)])
    got = by_record(paired(impl, rows, max_waiting=3))
    # requests 0-2 were let go unanswered when request 3 came: their answers are
    # open, to be paired again; 3 and 4 met theirs
    assert [answer_of(got[i])[0] for i in range(5)] == [None, None, None, 203, 204]
    assert [got[i][F["pair_open"]] for i in range(5)] == [False] * 5
    assert [got[5 + i][F["pair_open"]] for i in range(5)] == [True, True, True, False, False]
    assert len(got) == 10
    with pytest.raises(ValueError, match="max_waiting must be from 1 to 16777216, got 0"):
        impl.TraceColumns("f", max_waiting=0)
    with pytest.raises(ValueError, match="batch_rows must be at least 1, got 0"):
        impl.TraceColumns("f", batch_rows=0)
    assert MAX_WAITING >= 1024


@pytest.mark.parametrize("bad", [("short",), ["a list"] * 17, None])
def test_a_row_that_is_not_a_trace_row_is_a_type_error(impl, bad):
    with pytest.raises(TypeError, match="a trace row is a tuple of 17 fields"):
        paired(impl, [row(REQUEST, 1, 5, 100), bad])


def test_an_empty_input_and_a_taken_batch(impl):
    assert paired(impl, []) == []
    cols = impl.TraceColumns("f", ext_columns=NAMED)
    cols.append(row(REQUEST, 1, 5, 100))
    assert cols.rows == 1 and not cols.full
    n, _, keep = cols.take()
    assert n == 1 and keep == b"\x00" and cols.rows == 1      # still waiting: carried
    n, _, keep = cols.take(final=True)
    assert n == 1 and keep is None and cols.rows == 0
    assert cols.take(final=True)[0] == 0


def test_a_request_waiting_across_batches_gets_its_answer(impl):
    """Taken before its answer came, a request is carried into the next batch; the
    rows taken before it are not held back."""
    rows = numbered([row(REQUEST, 1, 5, 100), row(REQUEST, 1, 6, 101, code=10),
                     row(ANSWER, 1, 6, 102), row(ANSWER, 1, 5, 103, code=17, remark="late")])
    cols = impl.TraceColumns("f", batch_rows=3, ext_columns=NAMED)
    for r in rows[:3]:
        cols.append(r)
    assert cols.full
    first = batch_rows_of(cols.take())
    assert [r[F["record"]] for r in first] == [1, 2]
    assert answer_of(first[0]) == (102, 0, None, False)
    assert cols.rows == 1
    cols.append(rows[3])
    second = batch_rows_of(cols.take(final=True))
    assert [r[F["record"]] for r in second] == [0, 3]
    assert answer_of(second[0]) == (103, 17, "late", False)
    assert [r[:len(TRACE_ROW_FIELDS)] for r in first + second] == [rows[i] for i in (1, 2, 0, 3)]


def test_the_named_ext_fields_are_columns_of_their_own(impl):
    r = row(REQUEST, 1, 5, 100)
    rows = [r[:F["ext"]] + ({"topic": "T", "brokerName": "b", "x": "y"},) + r[F["ext"] + 1:],
            r[:2] + (1,) + r[3:]]
    cols = impl.TraceColumns("f", ext_columns=tuple(EXT_COLUMNS.values()))
    for x in rows:
        cols.append(x)
    batch = arrow.raw_batch(cols.take(final=True), "f", 0)
    assert batch.schema == arrow.RAW_SCHEMA
    got = batch.select(list(EXT_COLUMNS)).to_pylist()
    assert got == [{"topic": "T", "broker_name": "b", "broker_addr": None, "cluster": None},
                   {"topic": None, "broker_name": None, "broker_addr": None, "cluster": None}]
    with pytest.raises(ValueError, match="ext_columns must be at most 8 str keys"):
        impl.TraceColumns("f", ext_columns=("a",) * 9)


@pytest.mark.parametrize("field, value", [
    ("time_ns", "soon"), ("conn", 1 << 64), ("opaque", 1 << 31), ("code", True),
    ("peer", b"bytes"), ("remark", "lone \ud800 surrogate"), ("ext", {"k": 1}),
    ("ext", {"\udc00": "v"}), ("ext", [("k", "v")])])
def test_a_row_its_columns_cannot_hold_becomes_an_error_row(impl, field, value):
    r = row(REQUEST, 1, 5, 100, record=4)
    bad = r[:F[field]] + (value,) + r[F[field] + 1:]
    [got] = paired(impl, [bad])
    assert got[F["decode_error"]].startswith(f"TraceError: f: record 4 has a {field} its column")
    assert got[F["code"]] is None and got[F["flag"]] is None and got[F["pair_open"]] is None
    kept = {"record": 4, "time_ns": 100, "conn": 1, "peer": "p", "direction": IN,
            "frame_len": 30}
    kept.pop(field, None)
    assert {k: got[F[k]] for k in kept} == kept


def test_a_batch_ends_at_max_batch_bytes_of_text(impl):
    r = row(REQUEST, 1, 5, 100, remark="x" * (1 << 20), error=None)
    cols = impl.TraceColumns("f")
    n = 0
    while not cols.full:
        cols.append(r[:2] + (n,) + r[3:9] + (n,) + r[10:])
        n += 1
    assert n == MAX_BATCH_BYTES >> 20


# ---------------------------------------------------------------- random inputs

EVENT = st.tuples(st.sampled_from([REQUEST, REQUEST, ANSWER, ANSWER, ONEWAY]),
                  st.integers(1, 3), st.integers(0, 3))


def events_rows(events):
    return numbered([row(kind, conn, opaque, 1000 + i) for i, (kind, conn, opaque)
                     in enumerate(events)])


@settings(max_examples=300, deadline=None)
@given(st.lists(EVENT, max_size=60), st.integers(1, 8), st.integers(1, 70))
def test_compiled_pairs_as_the_reference(compiled, fallback, events, max_waiting, batch_rows):
    rows = events_rows(events)
    got = paired(compiled, rows, max_waiting=max_waiting, batch_rows=batch_rows)
    assert got == paired(fallback, rows, max_waiting=max_waiting, batch_rows=batch_rows)
    # whatever the batches, the same rows
    assert sorted(got, key=lambda r: r[F["record"]]) == \
        sorted(paired(compiled, rows, max_waiting=max_waiting), key=lambda r: r[F["record"]])


def whole_trace_answers(rows):
    """The rule on the whole sequence at once: record -> its answer row's record
    (None: unanswered), for each request."""
    out, last = {}, {}
    for r in rows:
        key = (r[F["conn"]], r[F["opaque"]])
        is_request = r[F["direction"]] == IN and not r[F["flag"]] & 1
        before = last.get(key)
        if before is not None and not is_request and not before[F["flag"]] & 2:
            out[before[F["record"]]] = r[F["record"]]
        if is_request:
            out[r[F["record"]]] = None
        last[key] = r if is_request else None
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(EVENT, max_size=80), st.lists(st.integers(0, 80), max_size=4),
       st.integers(1, 8))
def test_pairing_open_keys_again_gives_the_whole_traces_answers(impl, events, cuts, max_waiting):
    """Split the trace into files, pair each, then pair every frame of the open keys
    again in order (what requests_table does): the same answers as the whole trace."""
    rows = events_rows(events)
    edges = sorted({0, len(rows), *[min(c, len(rows)) for c in cuts]})
    out = []
    for a, b in zip(edges, edges[1:]):
        out += paired(impl, rows[a:b], max_waiting=max_waiting, batch_rows=7)
    assert sorted(r[F["record"]] for r in out) == list(range(len(rows)))
    open_keys = {(r[F["conn"]], r[F["opaque"]]) for r in out if r[F["pair_open"]]}
    got = {}
    for r in out:
        if r[F["direction"]] == IN and not r[F["flag"]] & 1 \
                and (r[F["conn"]], r[F["opaque"]]) not in open_keys:
            t = r[F["answer_time_ns"]]
            got[r[F["record"]]] = None if t is None else t - 1000
    again = whole_trace_answers(sorted((r[:len(TRACE_ROW_FIELDS)] for r in out
                                        if (r[F["conn"]], r[F["opaque"]]) in open_keys),
                                       key=lambda r: r[F["record"]]))
    assert not set(got) & set(again)
    got.update(again)
    assert got == whole_trace_answers(rows)


# ---------------------------------------------------------------- reading segments

HEADER = msgpack.packb({"rmq-trace": 1, "created_ns": 1, "host": "h", "pid": 1})


def read_all(impl, data, batch_rows=None):
    """TraceColumns.read over a segment's records (then the reference's rows for a
    record the compiled reader leaves), as rows, and where it stopped."""
    kw = {} if batch_rows is None else {"batch_rows": batch_rows}
    cols = impl.TraceColumns("f", 1 << 32, (1 << 31) - 1, ext_columns=NAMED, **kw)
    out, start, record = [], len(HEADER), 0
    while True:
        try:
            cols.read(data, start, record)
        except rmq.errors.TraceError as e:        # the reference reads every form
            return out + batch_rows_of(cols.take(final=True)), str(e)
        assert cols.offset >= start and cols.records >= record
        start, record = cols.offset, cols.records
        if cols.stopped != "full":
            break
        out += batch_rows_of(cols.take())
    stopped = cols.stopped
    if stopped == "other":
        from rmq.trace.segments import core_record_rows
        rows = core_record_rows(data, start, "f", 1 << 32, record, (1 << 31) - 1)
        try:
            for r in rows:      # as rmq.trace.arrow.input_batches goes on
                cols.append(r)
                if cols.full:
                    out += batch_rows_of(cols.take())
            stopped = rows.stopped
        except rmq.errors.TraceError as e:
            stopped = str(e)
    return out + batch_rows_of(cols.take(final=True)), stopped


def frame(code, opaque, flag=0, **ext):
    c = rmq.RemotingCommand.request(code, ext or None, opaque=opaque)
    c.flag = flag
    return rmq.encode_frame(c)


RECORD = st.one_of(
    st.tuples(st.integers(0, 1 << 62), st.integers(0, 5), st.sampled_from(["a:1", "b:2", None]),
              st.sampled_from([IN, OUT, 7]),
              st.builds(frame, st.sampled_from([105, 0, 17]), st.integers(0, 3),
                        st.sampled_from([0, 1, 2]), topic=st.text(max_size=5))),
    st.tuples(st.integers(-(1 << 63), (1 << 64) - 1), st.integers(-3, 3),
              st.one_of(st.text(max_size=3), st.binary(max_size=3)),
              st.integers(-(1 << 40), 1 << 40), st.binary(max_size=40)),
    st.just(["not", "a", "record"]),
    st.just((1, 2.5, "x", 0, b"")))


@settings(max_examples=300, deadline=None)
@given(st.lists(RECORD, max_size=25), st.integers(1, 9), st.integers(0, 6))
def test_compiled_reads_segments_as_the_reference(compiled, fallback, records, batch_rows, cut):
    """Any records, any batch size, a segment cut anywhere in its last bytes: the
    compiled reader (and the reference's rows where it stops) gives the reference's
    rows; an unreadable record ends both the same way."""
    packer = msgpack.Packer(use_bin_type=True)
    data = HEADER + b"".join(packer.pack(r) for r in records)
    data = data[:len(data) - cut] if len(data) - cut >= len(HEADER) else data
    got = read_all(compiled, data, batch_rows)
    want = read_all(fallback, data, batch_rows)
    assert got == want


def test_a_json_escape_with_no_utf8_form_is_an_error_row(impl):
    """A header whose ext value is a lone surrogate (valid JSON): the row says so,
    the rows around it are read."""
    header = b'{"code":105,"flag":0,"opaque":3,"extFields":{"topic":"\\ud800"}}'
    bad = len(header).to_bytes(4, "big")
    bad = (4 + len(header)).to_bytes(4, "big") + bad + header
    packer = msgpack.Packer(use_bin_type=True)
    data = HEADER + b"".join(packer.pack((10 + i, 1, "a:1", IN, f)) for i, f in
                             enumerate([frame(105, 1), bad, frame(105, 2)]))
    rows, stopped = read_all(impl, data)
    assert stopped == "end" and [r[F["record"]] for r in rows] == [0, 1, 2]
    assert rows[1][F["decode_error"]].startswith("TraceError: f: record 1 has a ext its column")
    assert rows[1][F["time_ns"]] == 11 and rows[0][F["decode_error"]] is None
