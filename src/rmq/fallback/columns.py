"""Trace rows as columns, and requests met with their answers within one input: the
reference for ``rmq._core.TraceColumns``. It holds the rows as lists and hands the
columns over as lists (rmq.trace.arrow makes Arrow arrays of either form).

The rules, the same in both:
- A row that is not a decoded frame (``decode_error`` set, or no flag, direction,
  connection or opaque) is no request or answer: ``pair_open`` null.
- A request (direction IN, no response flag) settles the request waiting under
  its key (connection, opaque) unanswered (clients may reuse opaques); a oneway
  request is never answered; any other waits under its key. When MAX_WAITING
  requests wait, all of them are let go unanswered first (an input holding one
  direction of its connections would otherwise keep every request).
- An answer (direction OUT, response flag) settles the request waiting under its
  key: the request's ``answer_time_ns``, ``answer_code`` and ``answer_remark``
  become the answer's. With none waiting the answer is open (``pair_open`` true):
  its key is paired again across the inputs (rmq.trace.analyze.requests_table).
- Rows keep their order, but a request still waiting when a batch is taken is
  carried into the next batch (so its answer can still be set), after the rows
  the batch already held; at the input's end (``take(final=True)``) nothing waits.
  A batch is full at ``batch_rows`` rows or MAX_BATCH_BYTES of text besides the
  requests carried into it (at most ``max_waiting``).
- A row whose fields its columns cannot hold becomes rmq.trace.rows.unfit_row.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rmq.fallback.codec import decode_frame
from rmq.protocol import DEFAULT_MAX_FRAME_LENGTH, IN, OUT
from rmq.trace.rows import (BATCH_ROWS, COLUMN_FIELDS, MAX_BATCH_BYTES, MAX_EXT_COLUMNS,
                            MAX_WAITING, MAX_WAITING_LIMIT, ROW, TRACE_ROW_FIELDS, RecordRows,
                            unfit_field, unfit_row)

__all__ = ["TraceColumns", "COLUMN_FIELDS"]

FLAG_RESPONSE = 1
FLAG_ONEWAY = 2
_TEXT = tuple(ROW[f] for f in ("peer", "language", "remark", "decode_error"))
_ANSWER_TIME, _ANSWER_CODE, _ANSWER_REMARK, _PAIR_OPEN = range(len(TRACE_ROW_FIELDS),
                                                               len(TRACE_ROW_FIELDS) + 4)


class _Rows(RecordRows):
    _decode = staticmethod(decode_frame)


class TraceColumns:
    """TraceColumns(file, conn_base=0, max_frame_length=DEFAULT_MAX_FRAME_LENGTH,
    batch_rows=BATCH_ROWS, max_waiting=MAX_WAITING, ext_columns=())"""

    def __init__(self, file: Any, conn_base: int = 0,
                 max_frame_length: int = DEFAULT_MAX_FRAME_LENGTH,
                 batch_rows: int = BATCH_ROWS, max_waiting: int = MAX_WAITING,
                 ext_columns: Iterable[str] = ()) -> None:
        names = tuple(ext_columns)
        if len(names) > MAX_EXT_COLUMNS or any(type(k) is not str for k in names):
            raise ValueError(f"ext_columns must be at most {MAX_EXT_COLUMNS} str keys, "
                             f"got {ext_columns!r:.80}")
        self._ext_names = names
        if batch_rows < 1:
            raise ValueError(f"batch_rows must be at least 1, got {batch_rows}")
        if not 1 <= max_waiting <= MAX_WAITING_LIMIT:
            raise ValueError(f"max_waiting must be from 1 to {MAX_WAITING_LIMIT}, "
                             f"got {max_waiting}")
        self._file = file
        self._conn_base = conn_base
        self._max_frame = max_frame_length
        self._batch_rows = batch_rows
        self._max_waiting = max_waiting
        self._rows: list[list[Any]] = []      # TRACE_ROW_FIELDS, then the four pairing fields
        self._waiting: dict[tuple[int, int], int] = {}     # (conn, opaque) -> row
        self._text_bytes = 0
        self._carried = (0, 0)     # rows and text carried into this batch: they do not fill it
        self.offset = 0
        self.records = 0
        self.stopped: str | None = None

    @property
    def rows(self) -> int:
        return len(self._rows)

    @property
    def full(self) -> bool:
        rows, text = self._carried
        return (len(self._rows) - rows >= self._batch_rows
                or self._text_bytes - text >= MAX_BATCH_BYTES)

    def append(self, row: tuple[Any, ...]) -> None:
        if type(row) is not tuple or len(row) != len(TRACE_ROW_FIELDS):
            raise TypeError(f"a trace row is a tuple of {len(TRACE_ROW_FIELDS)} fields, "
                            f"got {row!r:.80}")
        bad = unfit_field(row)
        if bad is not None:
            row = unfit_row(self._file, row, bad)
        r = list(row) + [None, None, None, None]
        self._text_bytes += self._bytes(r)
        self._pair(r)
        self._rows.append(r)

    def _pair(self, r: list[Any]) -> None:
        flag, direction = r[ROW["flag"]], r[ROW["direction"]]
        if (r[ROW["decode_error"]] is not None or flag is None or direction is None
                or r[ROW["conn"]] is None or r[ROW["opaque"]] is None):
            return
        key = (r[ROW["conn"]], r[ROW["opaque"]])
        if direction == IN and not flag & FLAG_RESPONSE:
            r[_PAIR_OPEN] = False
            self._waiting.pop(key, None)          # its next frame is a request: unanswered
            if not flag & FLAG_ONEWAY:            # oneway: never answered
                if len(self._waiting) >= self._max_waiting:
                    self._waiting.clear()
                self._waiting[key] = len(self._rows)
        elif direction == OUT and flag & FLAG_RESPONSE:
            before = self._waiting.pop(key, None)
            if before is None:
                r[_PAIR_OPEN] = True
                return
            r[_PAIR_OPEN] = False
            request = self._rows[before]
            request[_ANSWER_TIME] = r[ROW["time_ns"]]
            request[_ANSWER_CODE] = r[ROW["code"]]
            request[_ANSWER_REMARK] = r[ROW["remark"]]
            if r[ROW["remark"]] is not None:
                self._text_bytes += len(r[ROW["remark"]].encode())

    def read(self, data: Any, start: int, first_record: int = 0) -> None:
        rows = _Rows(data, start, self._file, None, self._conn_base, first_record,
                     self._max_frame)
        self.offset, self.records, self.stopped = start, first_record, None
        while not self.full:
            try:
                row = next(rows, None)
            except Exception:
                self.records = rows.records      # the record that did not read
                raise
            if row is None:
                self.offset, self.records, self.stopped = rows.offset, rows.records, rows.stopped
                return
            self.append(row)
            self.offset, self.records = rows.offset, rows.records
        self.stopped = "full"

    def take(self, final: bool = False) -> tuple[int, list[list[Any]], bytes | None]:
        if final:
            self._waiting.clear()
        rows = self._rows
        columns = [[r[i] for r in rows] for i in range(2, len(TRACE_ROW_FIELDS) + 4)]
        columns += [[(r[ROW["ext"]] or {}).get(k) for r in rows] for k in self._ext_names]
        keep = None
        carried: list[list[Any]] = []
        if self._waiting:
            waiting = set(self._waiting.values())
            keep = bytes(0 if i in waiting else 1 for i in range(len(rows)))
            moved = {}
            for i in sorted(waiting):
                moved[i] = len(carried)
                carried.append(rows[i])
            self._waiting = {k: moved[i] for k, i in self._waiting.items()}
        self._rows = carried
        self._text_bytes = sum(self._bytes(r) for r in carried)
        self._carried = (len(carried), self._text_bytes)
        return len(rows), columns, keep

    def _bytes(self, r: list[Any]) -> int:
        """The text a row holds (the bound of a batch counts it); an answer's remark
        is counted when it is set."""
        ext = r[ROW["ext"]] or {}
        return (sum(len(r[i].encode()) for i in _TEXT if r[i] is not None)
                + sum(len(k.encode()) + len(v.encode()) for k, v in ext.items())
                + sum(len(ext[k].encode()) for k in self._ext_names if k in ext))
