"""Trace inputs as Arrow record batches, and frames.parquet written from them.

The core's TraceColumns (or its reference, rmq.fallback.columns) reads an input's
records into column buffers; here they become pyarrow arrays without a Python
object per frame (``pa.Array.from_buffers`` over the core's bytes). The frames
table's columns that are computed from others (the time, the direction's and the
codes' names, the topic and broker from the ext fields) are added with Arrow's
compute functions, and each task writes its part of frames.parquet with Arrow's
Parquet writer (bench/README.md: Traces, for why not Spark's).

Needs pyarrow (the ``trace`` extra); imported by the Spark job's tasks.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from rmq.protocol import DEFAULT_MAX_FRAME_LENGTH, code_name
from rmq.rows import COLUMN_FIELDS, EXT_COLUMNS, PAIRED_ROW_FIELDS, frame_row

__all__ = ["RAW_SCHEMA", "FRAMES_SCHEMA", "input_batches", "error_batch", "raw_batch",
           "frames_batch", "write_frames_part"]

_STRING_MAP = pa.map_(pa.string(), pa.string())
_TYPES = {"file": pa.string(), "file_index": pa.int64(), "record": pa.int64(),
          "time_ns": pa.int64(), "conn": pa.int64(), "peer": pa.string(),
          "direction": pa.int32(), "code": pa.int32(), "flag": pa.int32(),
          "opaque": pa.int32(), "language": pa.string(), "version": pa.int32(),
          "remark": pa.string(), "ext": _STRING_MAP, "body_len": pa.int32(),
          "frame_len": pa.int32(), "decode_error": pa.string(), "answer_time_ns": pa.int64(),
          "answer_code": pa.int32(), "answer_remark": pa.string(), "pair_open": pa.bool_()}
#: The rows of an input, as the decoder pairs them (rmq.rows.PAIRED_ROW_FIELDS), then
#: the ext fields of rmq.rows.EXT_COLUMNS.
RAW_SCHEMA = pa.schema([pa.field(n, _TYPES[n]) for n in PAIRED_ROW_FIELDS]
                       + [pa.field(n, pa.string()) for n in EXT_COLUMNS])

#: frames.parquet: a row per frame. ``time`` is ``time_ns`` in microseconds (UTC);
#: ``direction`` "in" (towards the NameServer) or "out"; ``code_name`` the request's
#: or answer's name (CODE_<n> when unknown); ``topic``, ``broker_name``,
#: ``broker_addr`` and ``cluster`` the ext fields topic, brokerName, brokerAddr and
#: clusterName.
FRAMES_SCHEMA = pa.schema([
    ("time_ns", pa.int64()), ("time", pa.timestamp("us", tz="UTC")), ("conn", pa.int64()),
    ("peer", pa.string()), ("direction", pa.string()), ("code", pa.int32()),
    ("code_name", pa.string()), ("is_response", pa.bool_()), ("opaque", pa.int32()),
    ("flag", pa.int32()), ("oneway", pa.bool_()), ("language", pa.string()),
    ("version", pa.int32()), ("remark", pa.string()), ("ext", _STRING_MAP),
    ("body_len", pa.int32()), ("frame_len", pa.int32()), ("topic", pa.string()),
    ("broker_name", pa.string()), ("broker_addr", pa.string()), ("cluster", pa.string()),
    ("answer_time_ns", pa.int64()), ("answer_code", pa.int32()),
    ("answer_remark", pa.string()), ("pair_open", pa.bool_()),
    ("decode_error", pa.string()), ("file", pa.string()), ("file_index", pa.int64()),
    ("record", pa.int64())])

# Strings repeat (the file, peers, languages): dictionary pages keep the files small.
_DICTIONARY = ["file", "peer", "direction", "code_name", "language", "remark", "topic",
               "broker_name", "broker_addr", "cluster", "answer_remark", "decode_error"]


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
    arrays = [pa.repeat(pa.scalar(file, pa.string()), n),
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
    from rmq.trace import is_capture, read_records, segment_start

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
                from rmq.trace import core_record_rows
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

def _code_names(code: pa.Array, is_response: pa.Array) -> pa.Array:
    """code_name: each distinct (code, is_response) named once."""
    key = pc.add(pc.multiply(code.cast(pa.int64()), 2), is_response.cast(pa.int64()))
    distinct = pc.unique(key).drop_null()
    names = pa.array([code_name(k >> 1, bool(k & 1)) for k in distinct.to_pylist()],
                     pa.string())
    return pc.take(names, pc.index_in(key, value_set=distinct))


def frames_batch(raw: pa.RecordBatch) -> pa.RecordBatch:
    """The frames.parquet batch (FRAMES_SCHEMA) of a RAW_SCHEMA batch."""
    col = raw.column
    flag = col("flag")
    is_response = pc.not_equal(pc.bit_wise_and(flag, 1), 0)
    direction = pc.take(pa.array(["in", "out"]),
                        pc.if_else(pc.is_in(col("direction"), pa.array([0, 1], pa.int32())),
                                   col("direction"), None))
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


def part_name(partition: int) -> str:
    return f"part-{partition:05d}.parquet"


def write_frames_part(directory: str, partition: int, batches: Iterator[pa.RecordBatch]) -> int:
    """Write ``batches`` (RAW_SCHEMA) as the frames.parquet part ``partition`` under
    ``directory``; the rows written. The part appears whole or not at all (written
    under a temporary name, then renamed: a retried task writes it again)."""
    import pyarrow.parquet as pq

    final = os.path.join(directory, part_name(partition))
    tmp = os.path.join(directory, f".{part_name(partition)}.{uuid.uuid4().hex}.tmp")
    rows = 0
    try:
        with pq.ParquetWriter(tmp, FRAMES_SCHEMA, compression="snappy",
                              use_dictionary=_DICTIONARY) as writer:
            for raw in batches:
                if raw.num_rows:
                    writer.write_batch(frames_batch(raw))
                    rows += raw.num_rows
        os.replace(tmp, final)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return rows
