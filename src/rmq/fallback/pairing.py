"""Requests met with their answers within one input: the reference for
``rmq._core.RequestPairer``.

A request (a frame towards the NameServer that is not a response) is answered by
the next frame of its (connection, opaque) when that is an answer (a response from
the NameServer) and the request is not oneway; clients may reuse opaques. Most
requests are answered within the same input file, so the pairing is done there,
while the rows are decoded, and Spark pairs only what one file cannot settle: the
rows marked ``pair_open``.

``pair_open`` is set on an answer that met no waiting request: its request may be
in an earlier segment (or it is a duplicate, or answers a oneway request). Every
frame of an open answer's (connection, opaque) is paired again across the files,
in capture order (rmq.analyze.requests_table); every other key is settled within
its file. A request still waiting at its file's end comes out unanswered: were its
answer in a later file, that answer would have met no request there, so be open.
The same makes the bound on waiting requests safe: past it they are all let go.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from rmq.protocol import FLAG_ONEWAY, FLAG_RESPONSE, IN, OUT
from rmq.rows import (MAX_WAITING, NO_PAIRING, OPEN, PAIRED_ROW_FIELDS, ROW, SETTLED,
                      TRACE_ROW_FIELDS)

__all__ = ["RequestPairer", "MAX_WAITING", "NO_PAIRING", "PAIRED_ROW_FIELDS"]

_TIME, _CONN, _DIRECTION, _CODE, _FLAG, _OPAQUE, _REMARK, _ERROR = (
    ROW["time_ns"], ROW["conn"], ROW["direction"], ROW["code"], ROW["flag"], ROW["opaque"],
    ROW["remark"], ROW["decode_error"])


class RequestPairer:
    """RequestPairer(rows, max_waiting=MAX_WAITING)

    The rows of one input (TRACE_ROW_FIELDS tuples, in the input's order) as
    PAIRED_ROW_FIELDS tuples. Every row comes out once; a request comes out when its
    answer, its opaque's next request or the end of the rows is reached."""

    def __init__(self, rows: Iterable[tuple[Any, ...]], max_waiting: int = MAX_WAITING) -> None:
        if max_waiting < 1:
            raise ValueError(f"max_waiting must be at least 1, got {max_waiting}")
        self._rows = self._pair(iter(rows), max_waiting)

    def __iter__(self) -> RequestPairer:
        return self

    def __next__(self) -> tuple[Any, ...]:
        return next(self._rows)

    @staticmethod
    def _pair(rows: Iterator[tuple[Any, ...]], max_waiting: int) -> Iterator[tuple[Any, ...]]:
        waiting: dict[tuple[Any, Any], tuple[Any, ...]] = {}        # (conn, opaque) -> the request row waiting for its answer
        for row in rows:
            if type(row) is not tuple or len(row) != len(TRACE_ROW_FIELDS):
                raise TypeError(f"a trace row is a tuple of {len(TRACE_ROW_FIELDS)} fields, "
                                f"got {row!r:.80}")
            flag = row[_FLAG]
            if row[_ERROR] is not None or flag is None:
                yield row + NO_PAIRING
                continue
            direction = row[_DIRECTION]
            if direction == IN and not flag & FLAG_RESPONSE:
                key = (row[_CONN], row[_OPAQUE])
                before = waiting.pop(key, None)
                if before is not None:          # its next frame is a request: unanswered
                    yield before + SETTLED
                if flag & FLAG_ONEWAY:
                    yield row + SETTLED
                    continue
                if len(waiting) >= max_waiting:
                    for before in waiting.values():
                        yield before + SETTLED
                    waiting.clear()
                waiting[key] = row
            elif direction == OUT and flag & FLAG_RESPONSE:
                request = waiting.pop((row[_CONN], row[_OPAQUE]), None)
                if request is None:
                    yield row + OPEN
                    continue
                yield request + (row[_TIME], row[_CODE], row[_REMARK], False)
                yield row + SETTLED
            else:
                yield row + NO_PAIRING
        for request in waiting.values():
            yield request + SETTLED
