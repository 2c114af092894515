"""Trace inputs as Arrow record batches, and frames.parquet and requests.parquet
written from them.

The core's TraceColumns (or its reference, rmq.fallback.columns) reads an input's
records into column buffers; here they become pyarrow arrays without a Python
object per frame (``pa.Array.from_buffers`` over the core's bytes). The frames
table's columns that are computed from others (the time, the direction's and the
codes' names, the topic and broker from the ext fields) are added with Arrow's
compute functions, and each task writes its part of frames.parquet, and of
requests.parquet (each request with the answer found in its input), with Arrow's
Parquet writer (bench/README.md: Traces, for why not Spark's). The columns are
computed as rmq.trace.analyze's Spark expressions compute them for Spark's writer;
tests/test_analyze.py holds the two to the same rows.

Needs pyarrow (the ``trace`` extra); imported by the Spark job's tasks.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from rmq.protocol import DEFAULT_MAX_FRAME_LENGTH, IN, OUT, code_name
from rmq.trace.rows import COLUMN_FIELDS, EXT_COLUMNS, PAIRED_ROW_FIELDS, TRACE_ROW_FIELDS, frame_row

__all__ = ["RAW_SCHEMA", "FRAMES_SCHEMA", "REQUESTS_SCHEMA", "input_batches", "error_batch",
           "raw_batch", "frames_batch", "requests_batch", "write_parts", "write_requests_part",
           "merge_keys",
           "drop_requests", "key_frames", "pair_again", "spark_long", "FrameStats",
           "MAX_INPUT_ERRORS", "MAX_OPEN_KEYS", "MAX_PAIR_AGAIN_ROWS"]

_STRING_MAP = pa.map_(pa.string(), pa.string())
#: A string column of few values (the file, the direction, the codes' names), made
#: as indices into its values: no string is copied or hashed to write it.
NAMES = pa.dictionary(pa.int32(), pa.string())
_TYPES = {"file": NAMES, "file_index": pa.int64(), "record": pa.int64(),
          "time_ns": pa.int64(), "conn": pa.int64(), "peer": pa.string(),
          "direction": pa.int32(), "code": pa.int32(), "flag": pa.int32(),
          "opaque": pa.int32(), "language": pa.string(), "version": pa.int32(),
          "remark": pa.string(), "ext": _STRING_MAP, "body_len": pa.int32(),
          "frame_len": pa.int32(), "decode_error": pa.string(), "answer_time_ns": pa.int64(),
          "answer_code": pa.int32(), "answer_remark": pa.string(), "pair_open": pa.bool_()}
#: The rows of an input, as the decoder pairs them (rmq.trace.rows.PAIRED_ROW_FIELDS), then
#: the ext fields of rmq.trace.rows.EXT_COLUMNS.
RAW_SCHEMA = pa.schema([pa.field(n, _TYPES[n]) for n in PAIRED_ROW_FIELDS]
                       + [pa.field(n, pa.string()) for n in EXT_COLUMNS])

#: frames.parquet: a row per frame. ``time`` is ``time_ns`` in microseconds (UTC);
#: ``direction`` "in" (towards the NameServer) or "out"; ``code_name`` the request's
#: or answer's name (CODE_<n> when unknown); ``topic``, ``broker_name``,
#: ``broker_addr`` and ``cluster`` the ext fields topic, brokerName, brokerAddr and
#: clusterName.
FRAMES_SCHEMA = pa.schema([
    ("time_ns", pa.int64()), ("time", pa.timestamp("us", tz="UTC")), ("conn", pa.int64()),
    ("peer", pa.string()), ("direction", NAMES), ("code", pa.int32()),
    ("code_name", NAMES), ("is_response", pa.bool_()), ("opaque", pa.int32()),
    ("flag", pa.int32()), ("oneway", pa.bool_()), ("language", pa.string()),
    ("version", pa.int32()), ("remark", pa.string()), ("ext", _STRING_MAP),
    ("body_len", pa.int32()), ("frame_len", pa.int32()), ("topic", pa.string()),
    ("broker_name", pa.string()), ("broker_addr", pa.string()), ("cluster", pa.string()),
    ("answer_time_ns", pa.int64()), ("answer_code", pa.int32()),
    ("answer_remark", pa.string()), ("pair_open", pa.bool_()),
    ("decode_error", pa.string()), ("file", NAMES), ("file_index", pa.int64()),
    ("record", pa.int64())])

#: requests.parquet: a row per request (direction "in", no response flag, decoded)
#: with the answer to it: the next frame of its (connection, opaque) when that is an
#: answer and the request is not oneway. ``heartbeat_timeout_ms`` is the ext field
#: heartbeatTimeoutMillis as a long (null when it is none: Spark's try_cast);
#: ``latency_us`` the answer's time less the request's, in microseconds.
REQUESTS_SCHEMA = pa.schema([
    ("file", NAMES), ("file_index", pa.int64()), ("record", pa.int64()),
    ("conn", pa.int64()), ("peer", pa.string()), ("time_ns", pa.int64()),
    ("time", pa.timestamp("us", tz="UTC")), ("code", pa.int32()), ("code_name", NAMES),
    ("opaque", pa.int32()), ("oneway", pa.bool_()), ("language", pa.string()),
    ("version", pa.int32()), ("topic", pa.string()), ("broker_name", pa.string()),
    ("broker_addr", pa.string()), ("cluster", pa.string()), ("heartbeat_timeout_ms", pa.int64()),
    ("answer_time_ns", pa.int64()), ("answer_code", pa.int32()),
    ("answer_code_name", NAMES), ("answer_remark", pa.string()),
    ("latency_us", pa.float64())])

# Strings repeat (the file, peers, languages): dictionary pages keep the files small.
_DICTIONARY = ["file", "peer", "direction", "code_name", "language", "remark", "topic",
               "broker_name", "broker_addr", "cluster", "answer_code_name", "answer_remark",
               "decode_error"]
# Integers that mostly grow (times, record numbers, opaques): delta-encoded, a half
# to a quarter of the bytes, and faster to write than compressed plain values.
_DELTA = ["time_ns", "time", "record", "answer_time_ns", "opaque"]
# Min/max statistics (which let a reader skip row groups) for the columns queries
# select on; on every column they cost a sixth of the write (bench/README.md: "The
# job's tables and counts from the tasks").
_STATISTICS = ["time_ns", "time", "conn", "code", "answer_code", "file_index", "record"]


def _writer_options(schema: pa.Schema) -> dict[str, Any]:
    """How a part of ``schema`` is written (Spark's reader reads all of it)."""
    names = set(schema.names)
    return {"compression": "snappy",
            "use_dictionary": [n for n in _DICTIONARY if n in names],
            "column_encoding": {n: "DELTA_BINARY_PACKED" for n in _DELTA if n in names},
            "write_statistics": [n for n in _STATISTICS if n in names]}


# ---------------------------------------------------------------- columns to arrays

def _buffer(b: bytes | None) -> pa.Buffer | None:
    return None if b is None else pa.py_buffer(b)


def _array(type_: pa.DataType, n: int, column: Any) -> pa.Array:
    """An array of what a TraceColumns.take() hands over for one field: the core's
    buffers (a tuple), or the reference's list of values."""
    if isinstance(column, list):
        if pa.types.is_map(type_):
            column = [None if d is None else list(d.items()) for d in column]
        return pa.array(column, type_)
    if pa.types.is_map(type_):
        valid, offsets, entries, keys, values = column
        entries_array = pa.StructArray.from_arrays(
            [_array(pa.string(), entries, keys), _array(pa.string(), entries, values)],
            fields=[type_.key_field, type_.item_field])
        return pa.Array.from_buffers(type_, n, [_buffer(valid), _buffer(offsets)],
                                     children=[entries_array])
    return pa.Array.from_buffers(type_, n, [_buffer(b) for b in column])


def raw_batch(taken: tuple[int, Any, bytes | None], file: str, file_index: int
              ) -> pa.RecordBatch:
    """The RAW_SCHEMA batch of what TraceColumns.take() returned, less the rows it
    carries into the next batch."""
    n, columns, keep = taken
    arrays = [pa.DictionaryArray.from_arrays(pa.repeat(pa.scalar(0, pa.int32()), n),
                                             pa.array([file], pa.string())),
              pa.repeat(pa.scalar(file_index, pa.int64()), n)]
    arrays += [_array(_TYPES[name], n, c) for name, c in zip(COLUMN_FIELDS, columns)]
    arrays += [_array(pa.string(), n, c) for c in columns[len(COLUMN_FIELDS):]]
    batch = pa.RecordBatch.from_arrays(arrays, schema=RAW_SCHEMA)
    if keep is not None:
        mask = pc.not_equal(pa.Array.from_buffers(pa.uint8(), n, [None, pa.py_buffer(keep)]), 0)
        batch = batch.filter(mask)
    return batch


# ---------------------------------------------------------------- one input

def input_batches(path: str, data: Any, file_index: int, conn_base: int = 0,
                  server_ports: tuple[int, ...] = (9876,), *,
                  max_frame_length: int = DEFAULT_MAX_FRAME_LENGTH,
                  batch_rows: int | None = None) -> Iterator[pa.RecordBatch]:
    """The RAW_SCHEMA batches of one input's bytes (a trace segment or a capture):
    every frame a row, its request paired with its answer when both are in it.
    Nothing the bytes hold makes it raise: an undecodable frame is a row with
    ``decode_error``, an input that cannot be read (or stops being readable) one
    more such row."""
    from rmq._impl import core
    from rmq.codec import decode_frame
    from rmq.trace.segments import is_capture, read_records, segment_start

    kw = {} if batch_rows is None else {"batch_rows": batch_rows}
    columns = core.TraceColumns(path, conn_base, max_frame_length,
                                ext_columns=tuple(EXT_COLUMNS.values()), **kw)
    record = 0
    try:
        if is_capture(data):
            for t, conn, peer, direction, frame in read_records(data, server_ports=server_ports):
                columns.append(frame_row(None, None, record, t, conn_base + conn, peer,
                                         direction, frame, max_frame_length, decode_frame))
                record += 1         # the records read: the error row's, if the next fails
                if columns.full:
                    yield raw_batch(columns.take(), path, file_index)
        else:
            start = segment_start(data, path)
            while True:
                try:
                    columns.read(data, start, record)
                finally:
                    start, record = columns.offset, columns.records
                if columns.stopped != "full":
                    break
                yield raw_batch(columns.take(), path, file_index)
            if columns.stopped == "other":      # a form the compiled reader leaves
                from rmq.trace.segments import core_record_rows
                rows = core_record_rows(data, start, path, conn_base, record, max_frame_length)
                for row in rows:
                    columns.append(row)
                    record = rows.records
                    if columns.full:
                        yield raw_batch(columns.take(), path, file_index)
    except Exception as e:      # not a trace, a cut pcap, a corrupt record, no rmq.trace.pcap...
        columns.append(_error_row(record, e))
    yield raw_batch(columns.take(final=True), path, file_index)


def _error_row(record: int, e: BaseException) -> tuple[Any, ...]:
    return (None, None, record, None, None, None, None, None, None, None, None, None, None,
            None, None, None, f"{type(e).__name__}: {e}")


def error_batch(path: str, file_index: int, record: int, e: BaseException) -> pa.RecordBatch:
    """The batch of an input that could not be read: one row, its ``decode_error``."""
    from rmq._impl import core

    columns = core.TraceColumns(path, ext_columns=tuple(EXT_COLUMNS.values()))
    columns.append(_error_row(record, e))
    return raw_batch(columns.take(final=True), path, file_index)


# ---------------------------------------------------------------- frames.parquet

def _is_request(col: Any) -> pa.Array:
    """Rows of frames.parquet's columns (``col``) that are requests: towards the
    NameServer, no response flag (decoded or not)."""
    return pc.and_(pc.equal(col("direction"), "in"), pc.invert(col("is_response")))


def _is_answer(col: Any) -> pa.Array:
    """Rows that are answers: from the NameServer, the response flag set."""
    return pc.and_(pc.equal(col("direction"), "out"), col("is_response"))


def _code_names(code: pa.Array, is_response: pa.Array) -> pa.Array:
    """code_name: each distinct (code, is_response) named once."""
    key = pc.add(pc.multiply(code.cast(pa.int64()), 2), is_response.cast(pa.int64()))
    distinct = pc.unique(key).drop_null()
    names = pa.array([code_name(k >> 1, bool(k & 1)) for k in distinct.to_pylist()],
                     pa.string())
    return pa.DictionaryArray.from_arrays(pc.index_in(key, value_set=distinct), names)


def frames_batch(raw: pa.RecordBatch) -> pa.RecordBatch:
    """The frames.parquet batch (FRAMES_SCHEMA) of a RAW_SCHEMA batch."""
    col = raw.column
    flag = col("flag")
    is_response = pc.not_equal(pc.bit_wise_and(flag, 1), 0)
    direction = pa.DictionaryArray.from_arrays(
        pc.if_else(pc.is_in(col("direction"), pa.array([0, 1], pa.int32())),
                   col("direction"), None), pa.array(["in", "out"]))
    columns = {
        "time": pc.divide(col("time_ns"), 1000).cast(pa.timestamp("us", tz="UTC")),
        "direction": direction,
        "code_name": _code_names(col("code"), is_response),
        "is_response": is_response,
        "oneway": pc.not_equal(pc.bit_wise_and(flag, 2), 0),
    }
    return pa.RecordBatch.from_arrays(
        [columns[f.name] if f.name in columns else col(f.name) for f in FRAMES_SCHEMA],
        schema=FRAMES_SCHEMA)


#: The input errors a summary lists (the first, by file and record).
MAX_INPUT_ERRORS = 100


class FrameStats:
    """The summary's counts over frames.parquet, added up batch by batch in each
    task (:meth:`add`) and task by task on the driver (:meth:`merge`): the frames
    never reach the driver. Small: its size grows with the distinct connections."""

    def __init__(self) -> None:
        self.rows = 0
        self.unreadable = 0         # rows of an input that could not be read: no time
        self.undecodable = 0        # frames that did not decode
        self.start: int | None = None
        self.end: int | None = None
        self.answers: dict[str, int] = {}     # code_name -> decoded answers
        self.errors: list[dict[str, Any]] = []     # the first MAX_INPUT_ERRORS
        self._conns = pa.array([], pa.int64())     # distinct

    def counts(self) -> dict[str, Any]:
        """The counts as rmq.trace.analyze.aggregate takes them (plain data)."""
        return {"rows": self.rows, "unreadable": self.unreadable,
                "undecodable": self.undecodable, "connections": len(self._conns),
                "start": self.start, "end": self.end, "answers": dict(sorted(self.answers.items())),
                "errors": list(self.errors)}

    def add(self, frames: pa.RecordBatch | pa.Table) -> None:
        """Count a batch with frames.parquet's columns time_ns, conn, direction,
        is_response, code_name, decode_error, file, record."""
        col = frames.column
        time_ns, error = col("time_ns"), col("decode_error")
        self.rows += frames.num_rows
        self.unreadable += time_ns.null_count
        failed = pc.is_valid(error)
        self.undecodable += pc.sum(pc.and_(failed, pc.is_valid(time_ns))
                                   .cast(pa.int64())).as_py() or 0
        extremes = pc.min_max(time_ns)
        self._extend(extremes["min"].as_py(), extremes["max"].as_py())
        self._conns = pc.unique(pa.concat_arrays(
            [self._conns, pc.unique(col("conn")).drop_null().cast(pa.int64())]))
        answered = pc.and_(_is_answer(col), pc.invert(failed))
        for x in pc.value_counts(pc.filter(col("code_name"), answered)).to_pylist():
            if x["values"] is not None:
                self.answers[x["values"]] = self.answers.get(x["values"], 0) + x["counts"]
        if error.null_count < len(error):
            # a rotten input errs on every frame: only the first few become dicts
            rows = pa.table({"file": col("file"), "record": col("record"), "time_ns": time_ns,
                             "error": error}).filter(failed)
            rows = rows.set_column(0, "file", rows.column("file").cast(pa.string()))
            self._keep_errors(rows.sort_by([("file", "ascending"), ("record", "ascending")])
                              .slice(0, MAX_INPUT_ERRORS).to_pylist())

    def merge(self, other: FrameStats) -> None:
        self.rows += other.rows
        self.unreadable += other.unreadable
        self.undecodable += other.undecodable
        self._extend(other.start, other.end)
        self._conns = pc.unique(pa.concat_arrays([self._conns, other._conns]))
        for name, n in other.answers.items():
            self.answers[name] = self.answers.get(name, 0) + n
        self._keep_errors(other.errors)

    def _extend(self, low: int | None, high: int | None) -> None:
        if low is not None and high is not None:        # both or neither: min_max's
            self.start = low if self.start is None else min(self.start, low)
            self.end = high if self.end is None else max(self.end, high)

    def _keep_errors(self, errors: list[dict[str, Any]]) -> None:
        # by file and record (the summary's order); file and record are never null
        self.errors = sorted(self.errors + errors,
                             key=lambda e: (e["file"], e["record"]))[:MAX_INPUT_ERRORS]


#: Spark's ``try_cast(s as bigint)``: these bytes trimmed from both ends (ASCII
#: controls, space, DEL), then an optional sign and ASCII digits only, in range.
_SPARK_TRIM = "".join(map(chr, range(0x21))) + "\x7f"


def spark_long(text: str | None) -> int | None:
    """``text`` as Spark's ``try_cast(text as bigint)`` reads it; None when it does not."""
    if text is None:
        return None
    s = text.strip(_SPARK_TRIM)
    sign, digits = (s[0], s[1:]) if s[:1] in ("+", "-") else ("", s)
    if not (digits.isascii() and digits.isdigit()):
        return None
    digits = digits.lstrip("0") or "0"
    if len(digits) > 19:        # past a long (and past what int() reads in one go)
        return None
    value = int(sign + digits)
    return value if -(1 << 63) <= value < (1 << 63) else None


def _longs(text: pa.Array) -> pa.Array:
    """spark_long of each value, each distinct one read once."""
    distinct = pc.unique(text).drop_null()
    longs = pa.array([spark_long(t) for t in distinct.to_pylist()], pa.int64())
    return pc.take(longs, pc.index_in(text, value_set=distinct))


def _difference(a: pa.Array, b: pa.Array) -> pa.Array:
    """a - b, null where it overflows a long (Spark's try_subtract)."""
    d = pc.subtract(a, b)
    overflow = pc.less(pc.bit_wise_and(pc.bit_wise_xor(a, b), pc.bit_wise_xor(a, d)), 0)
    return pc.if_else(overflow, pa.scalar(None, pa.int64()), d)


_REQUEST_FRAME_COLUMNS = [f.name for f in REQUESTS_SCHEMA if f.name in FRAMES_SCHEMA.names]


def requests_batch(frames: pa.RecordBatch) -> pa.RecordBatch:
    """The requests.parquet batch (REQUESTS_SCHEMA) of a frames.parquet batch (each
    request with the answer its input gave it)."""
    col = frames.column
    is_request = pc.and_(_is_request(col), pc.is_null(col("decode_error")))
    # only the columns it keeps are filtered (not the ext maps: the one field is looked up)
    kept = frames.select(_REQUEST_FRAME_COLUMNS).filter(is_request)
    requests = dict(zip(_REQUEST_FRAME_COLUMNS, kept.columns))
    answer_code = requests["answer_code"]
    requests["heartbeat_timeout_ms"] = _longs(pc.filter(
        pc.map_lookup(col("ext"), "heartbeatTimeoutMillis", "first"), is_request))
    requests["answer_code_name"] = _code_names(answer_code, pa.repeat(True, len(answer_code)))
    requests["latency_us"] = pc.divide(
        _difference(requests["answer_time_ns"], requests["time_ns"]).cast(pa.float64()), 1000.0)
    return pa.RecordBatch.from_arrays([requests[f.name] for f in REQUESTS_SCHEMA],
                                      schema=REQUESTS_SCHEMA)


def part_name(partition: int) -> str:
    return f"part-{partition:05d}.parquet"


class _Part:
    """A Parquet file written whole or not at all: under a temporary name beside
    ``path``, renamed to it when the ``with`` block ends well, removed when it does
    not (a retried task writes it again)."""

    def __init__(self, path: str, schema: pa.Schema) -> None:
        import pyarrow.parquet as pq

        directory, name = os.path.split(path)
        self.final = path
        self.tmp = os.path.join(directory, f".{name}.{uuid.uuid4().hex}.tmp")
        self.rows = 0
        self._writer = pq.ParquetWriter(self.tmp, schema, **_writer_options(schema))

    def write(self, data: pa.RecordBatch | pa.Table) -> None:
        if data.num_rows:
            self._writer.write(data)
            self.rows += data.num_rows

    def __enter__(self) -> _Part:
        return self

    def __exit__(self, kind: Any, *_: Any) -> None:
        if kind is None:
            try:
                self._writer.close()
                os.replace(self.tmp, self.final)
                return
            except BaseException:
                self._discard()
                raise
        self._discard()

    def _discard(self) -> None:
        try:
            self._writer.close()
        except Exception:       # what failed first is what the caller raises
            pass
        try:
            os.unlink(self.tmp)
        except OSError:
            pass


def _write_whole(path: str, data: pa.RecordBatch | pa.Table) -> None:
    with _Part(path, data.schema) as part:
        part.write(data)


#: The answers' keys that met no request in their input (an answer's connection and
#: opaque) up to this many are paired again across the inputs by pair_again, in the
#: driver, when their frames are at most MAX_PAIR_AGAIN_ROWS; more (a capture of the
#: answers only, opaques reused without end) by Spark (rmq.trace.analyze).
MAX_OPEN_KEYS = 100_000
MAX_PAIR_AGAIN_ROWS = 1_000_000
_KEYS = ["conn", "opaque"]
_KEYS_SCHEMA = pa.schema([("conn", pa.int64()), ("opaque", pa.int32())])


def _distinct_keys(tables: list[pa.Table]) -> pa.Table:
    keys = pa.concat_tables(tables) if tables else _KEYS_SCHEMA.empty_table()
    return keys.group_by(_KEYS).aggregate([]).select(_KEYS)


def write_parts(frames_dir: str, requests_dir: str, partition: int,
                batches: Iterator[pa.RecordBatch]) -> dict[str, Any]:
    """Write ``batches`` (RAW_SCHEMA) as the parts ``partition`` of frames.parquet
    under ``frames_dir`` and of requests.parquet under ``requests_dir``. Their rows
    are counted: ``frames``, ``requests``, and ``open`` (the answers that met no
    request in their input, rmq.fallback.columns: their keys are still to be paired
    across the inputs); ``open_keys``, those keys (conn, opaque), None past
    MAX_OPEN_KEYS; ``stats``, the frames' FrameStats."""
    name = part_name(partition)
    n_open, stats, keys = 0, FrameStats(), []
    with _Part(os.path.join(frames_dir, name), FRAMES_SCHEMA) as frames, \
            _Part(os.path.join(requests_dir, name), REQUESTS_SCHEMA) as requests:
        for raw in batches:
            if raw.num_rows:
                batch = frames_batch(raw)
                frames.write(batch)
                requests.write(requests_batch(batch))
                stats.add(batch)
                opened = pc.sum(raw.column("pair_open").cast(pa.int64())).as_py() or 0
                n_open += opened
                if opened and n_open <= MAX_OPEN_KEYS:
                    keys.append(pa.Table.from_batches([raw.select(_KEYS)])
                                .filter(raw.column("pair_open")))
    return {"frames": frames.rows, "requests": requests.rows, "open": n_open,
            "open_keys": _distinct_keys(keys) if n_open <= MAX_OPEN_KEYS else None,
            "stats": stats}


def write_requests_part(directory: str, partition: int, batch: pa.RecordBatch) -> None:
    """Write ``batch`` (REQUESTS_SCHEMA) as requests.parquet's part ``partition``."""
    _write_whole(os.path.join(directory, part_name(partition)), batch)


def merge_keys(parts: list[pa.Table | None]) -> pa.Table | None:
    """The distinct keys of the tasks' ``open_keys``; None past MAX_OPEN_KEYS."""
    if any(k is None for k in parts):
        return None
    keys = _distinct_keys([k for k in parts if k is not None])
    return keys if keys.num_rows <= MAX_OPEN_KEYS else None


def _key_mask(table: pa.Table, keys: pa.Table) -> pa.Array:
    """Which rows of ``table`` have a (conn, opaque) that is a row of ``keys``."""
    index = pa.array(range(table.num_rows), pa.int64())
    hit = (pa.table({"conn": table.column("conn"), "opaque": table.column("opaque"),
                     "_row": index})
           .join(keys.select(_KEYS), _KEYS, join_type="left semi").column("_row"))
    return pc.is_in(index, value_set=hit)


def _read_key_rows(path: str, keys: pa.Table, **read: Any) -> tuple[pa.Table, pa.Array] | None:
    """The Parquet part at ``path`` (pq.read_table's ``read``) and the _key_mask of
    its rows; None when no row has one of ``keys`` (the usual part: then only its
    conn and opaque are read)."""
    import pyarrow.parquet as pq

    if not pc.any(_key_mask(pq.read_table(path, columns=_KEYS), keys)).as_py():
        return None
    table = pq.read_table(path, **read)
    return table, _key_mask(table, keys)


def drop_requests(path: str, keys: pa.Table) -> int:
    """Drop from the requests.parquet part at ``path`` the requests whose (conn,
    opaque) is a row of ``keys`` (they are paired again across the inputs); the rows
    dropped. The part is replaced whole, and only when a row goes."""
    found = _read_key_rows(path, keys, schema=REQUESTS_SCHEMA)
    if found is None:
        return 0
    table, hit = found
    kept = table.filter(pc.invert(hit))
    _write_whole(path, kept)
    return int(table.num_rows - kept.num_rows)


#: frames.parquet's columns that a frame's trace row (rmq.trace.rows.TRACE_ROW_FIELDS) is
#: made of again.
_ROW_COLUMNS = ["file", "file_index", "record", "time_ns", "conn", "peer", "direction", "code",
                "flag", "opaque", "language", "version", "remark", "ext", "body_len",
                "frame_len", "decode_error", "is_response"]


def key_frames(path: str, keys: pa.Table) -> pa.Table:
    """The requests and answers (decoded) in the frames.parquet part at ``path``
    whose (conn, opaque) is a row of ``keys``: _ROW_COLUMNS."""
    import pyarrow.parquet as pq

    found = _read_key_rows(path, keys, columns=_ROW_COLUMNS)
    if found is None:
        schema = pq.read_schema(path)
        frames = pa.schema([schema.field(n) for n in _ROW_COLUMNS]).empty_table()
    else:
        frames = found[0].filter(found[1])
    col = frames.column
    ok = pc.and_(pc.is_null(col("decode_error")), pc.or_(_is_request(col), _is_answer(col)))
    return frames.filter(ok)


def pair_again(frames: pa.Table) -> pa.RecordBatch:
    """The requests.parquet batch of the requests among ``frames`` (key_frames of
    every part), each given its answer as the whole trace gives it: the frames in
    capture order (time, then the order within the file) paired by the rules of
    rmq.fallback.columns, as within one input."""
    from rmq._impl import core

    frames = frames.sort_by([("time_ns", "ascending"), ("file_index", "ascending"),
                             ("record", "ascending")])
    # a request waits per key at most: none is let go for want of room
    columns = core.TraceColumns("", max_waiting=MAX_OPEN_KEYS + 1,
                                ext_columns=tuple(EXT_COLUMNS.values()))
    direction = pc.if_else(pc.equal(frames.column("direction"), "in"), IN, OUT)
    values = [frames.column(n).to_pylist() if n != "direction" else direction.to_pylist()
              for n in TRACE_ROW_FIELDS]
    ext = TRACE_ROW_FIELDS.index("ext")
    values[ext] = [None if m is None else dict(m) for m in values[ext]]
    for row in zip(*values):
        columns.append(row)
    raw = raw_batch(columns.take(final=True), "", 0)
    # the rows in the order appended, each from its own file
    own = {"file": frames.column("file").combine_chunks().cast(NAMES),
           "file_index": frames.column("file_index").combine_chunks()}
    raw = pa.RecordBatch.from_arrays([own.get(f.name, raw.column(f.name)) for f in RAW_SCHEMA],
                                     schema=RAW_SCHEMA)
    return requests_batch(frames_batch(raw))
