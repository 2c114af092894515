"""Trace rows: their schema, and how a trace record becomes one. Shared by both
implementations of the core (``rmq._core`` imports it while it is initialised, so it
imports nothing of rmq's but the wire-level errors and protocol constants).

A row is one frame of a trace with its header decoded: a flat tuple in the order of
:data:`TRACE_ROW_FIELDS`. A frame that does not decode is still a row, with
``decode_error`` set. The pairing of requests with their answers (``TraceColumns``)
appends :data:`PAIRED_ROW_FIELDS`' last four fields.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import msgpack

from rmq.errors import TraceError
from rmq.protocol import DEFAULT_MAX_FRAME_LENGTH

if TYPE_CHECKING:
    from typing_extensions import Buffer

__all__ = ["TRACE_ROW_FIELDS", "PAIRED_ROW_FIELDS", "COLUMN_FIELDS", "MAX_WAITING", "NO_PAIRING",
           "SETTLED", "OPEN", "ROW", "BATCH_ROWS", "EXT_COLUMNS", "MAX_BATCH_BYTES", "frame_row", "unfit_field",
           "unfit_row", "RecordRows"]

#: The fields of a row, in order. ``conn`` is ``conn_base + `` the record's
#: connection id; ``body_len`` and ``frame_len`` are in bytes.
TRACE_ROW_FIELDS = ("file", "file_index", "record", "time_ns", "conn", "peer", "direction",
                    "code", "flag", "opaque", "language", "version", "remark", "ext",
                    "body_len", "frame_len", "decode_error")
#: A field's position in a row.
ROW = {name: i for i, name in enumerate(TRACE_ROW_FIELDS)}

#: A paired row: a trace row, then its answer's time, code and remark (on a request
#: answered in the same file), and on requests and answers whether its key must be
#: paired again across the files (None on other rows).
PAIRED_ROW_FIELDS = TRACE_ROW_FIELDS + ("answer_time_ns", "answer_code", "answer_remark",
                                        "pair_open")
#: The pairing fields of a row that is no request or answer; of a request or answer
#: settled within its file; of an answer that met no request there.
NO_PAIRING = (None, None, None, None)
SETTLED = (None, None, None, False)
OPEN = (None, None, None, True)

#: How many requests may wait for their answers before all of them are let go
#: unanswered: an input holding only one direction of its connections (a capture
#: filtered on one port) would otherwise keep every request in memory.
MAX_WAITING = 65536
MAX_WAITING_LIMIT = 1 << 24

#: Rows as columns (rmq._core.TraceColumns and its reference): the paired fields
#: less ``file`` and ``file_index`` (one value per input), in the order take()
#: hands them over. A batch ends at BATCH_ROWS rows or MAX_BATCH_BYTES of text,
#: far below Arrow's 2 GiB offsets.
COLUMN_FIELDS = PAIRED_ROW_FIELDS[2:]
BATCH_ROWS = 65536
MAX_BATCH_BYTES = 64 << 20
#: The ext fields the analysis keys on, taken out as columns of their own
#: (TraceColumns' ext_columns): column name -> ext key.
EXT_COLUMNS = {"topic": "topic", "broker_name": "brokerName", "broker_addr": "brokerAddr",
               "cluster": "clusterName"}
MAX_EXT_COLUMNS = 8

_INT64 = (-(1 << 63), (1 << 63) - 1)
_INT32 = (-(1 << 31), (1 << 31) - 1)
#: The range of each integer field of a row, as its column holds it.
INT_RANGES = {"record": _INT64, "time_ns": _INT64, "conn": _INT64, "direction": _INT32,
              "code": _INT32, "flag": _INT32, "opaque": _INT32, "version": _INT32,
              "body_len": _INT32, "frame_len": _INT32}
_TEXT_FIELDS = ("peer", "language", "remark", "decode_error")
#: What an unfit row keeps (the fields that fit): where and when the frame was.
_KEPT = ("record", "time_ns", "conn", "peer", "direction", "frame_len")


def _fits(name: str, v: Any) -> bool:
    if v is None:
        return True
    if name in INT_RANGES:
        lo, hi = INT_RANGES[name]
        return type(v) is int and lo <= v <= hi
    if name in _TEXT_FIELDS:
        return type(v) is str and _utf8(v)
    if name == "ext":
        return type(v) is dict and all(type(k) is str and type(x) is str and _utf8(k)
                                       and _utf8(x) for k, x in v.items())
    return True


def _utf8(s: str) -> bool:
    try:
        s.encode()
    except UnicodeEncodeError:      # a lone surrogate (a JSON "\ud800")
        return False
    return True


def unfit_field(row: tuple[Any, ...]) -> str | None:
    """The first field of a row (TRACE_ROW_FIELDS) its column cannot hold: an
    integer of another type or out of its range, text that is not a str with a
    UTF-8 form, ext not a dict of such; None when all fit."""
    for name, v in zip(TRACE_ROW_FIELDS, row):
        if not _fits(name, v):
            return name
    return None


def unfit_row(file: Any, row: tuple[Any, ...], field: str) -> tuple[Any, ...]:
    """The row a row with an unfit ``field`` becomes: the frame's place (the fields
    of _KEPT that fit), none of its header, and ``decode_error`` saying what was
    wrong."""
    kept = {name: v for name, v in zip(TRACE_ROW_FIELDS, row)
            if name in _KEPT and _fits(name, v)}
    error = (f"TraceError: {file}: record {kept.get('record')} has a {field} its column "
             f"cannot hold: {row[ROW[field]]!r:.80}")
    return tuple(error if name == "decode_error" else kept.get(name)
                 for name in TRACE_ROW_FIELDS)


def frame_row(file: Any, file_index: Any, record: int, time_ns: Any, conn: Any, peer: Any,
              direction: Any, frame: Any, max_frame_length: int,
              decode: Callable[[Any, int], Any]) -> tuple[Any, ...]:
    """One frame's row, its header decoded by ``decode`` (a ``decode_frame``); a
    frame that does not decode (whatever it is) is a row with ``decode_error`` set,
    the exception's type and message."""
    try:
        c = decode(frame, max_frame_length)
    except Exception as e:
        return (file, file_index, record, time_ns, conn, peer, direction, None, None, None,
                None, None, None, None, None, _len(frame), f"{type(e).__name__}: {e}")
    return (file, file_index, record, time_ns, conn, peer, direction, c.code, c.flag,
            c.opaque, c.language, c.version, c.remark, c.ext_fields, len(c.body), len(frame),
            None)


def _len(frame: Any) -> int | None:
    try:
        return len(frame)
    except TypeError:
        return None


class RecordRows:
    """Rows of the records (``[time_ns, conn, peer, direction, frame]`` arrays, see
    rmq.trace) of ``data`` (a bytes-like segment) from byte ``start``, each frame
    decoded by ``_decode`` (a subclass names its ``decode_frame``). ``record`` numbers
    start at ``first_record``. After the iteration: ``offset`` is the end of the last complete
    record, ``records`` the next record's number, and ``stopped`` "end" (all of the
    data read) or "cut" (the data ends inside a record, a crash while writing:
    ``len(data) - offset`` bytes are left over). A record that is not a 5-array
    raises TraceError."""

    _decode: Callable[[Any, int], Any]

    def __init__(self, data: Buffer, start: int, file: Any, file_index: Any, conn_base: int = 0,
                 first_record: int = 0, max_frame_length: int = DEFAULT_MAX_FRAME_LENGTH) -> None:
        self._data = memoryview(data).cast("B")
        if not 0 <= start <= len(self._data):
            raise ValueError(f"start {start} is outside the {len(self._data)} bytes of data")
        self.offset = start
        self.records = first_record
        self.stopped: str | None = None
        self._rows = self._read(file, file_index, conn_base, max_frame_length)

    def __iter__(self) -> RecordRows:
        return self

    def __next__(self) -> tuple[Any, ...]:
        return next(self._rows)

    def _read(self, file: Any, file_index: Any, conn_base: int, max_frame: int
              ) -> Iterator[tuple[Any, ...]]:
        data = self._data
        unpacker = msgpack.Unpacker(raw=False, max_buffer_size=0, strict_map_key=False,
                                    use_list=False)
        unpacker.feed(data[self.offset:])
        base = self.offset
        tell = unpacker.tell
        decode = type(self)._decode
        try:
            for rec in unpacker:
                if not isinstance(rec, tuple) or len(rec) != 5 or not isinstance(rec[1], int):
                    raise TraceError(f"{file}: record {self.records} is not "
                                     f"[time_ns, conn, peer, direction, frame]: {rec!r:.80}")
                t, conn, peer, direction, frame = rec
                n = self.records
                self.records += 1
                self.offset = base + tell()
                yield frame_row(file, file_index, n, t, conn_base + conn, peer, direction,
                                frame, max_frame, decode)
        except TraceError:
            raise
        except (ValueError, msgpack.FormatError, msgpack.StackError) as e:
            raise TraceError(f"{file}: corrupt record {self.records} ({e})") from None
        self.stopped = "end" if self.offset == len(data) else "cut"
