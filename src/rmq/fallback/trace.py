"""Trace segment records read straight into analysis rows: the reference for
``rmq._core.TraceRows``. The rows and the reading are rmq.trace.rows' (shared with the
compiled core's fallback for the record forms it leaves); here the frames are decoded
by this reference's codec.
"""

from __future__ import annotations

from rmq.fallback.codec import decode_frame
from rmq.trace.rows import TRACE_ROW_FIELDS, RecordRows

__all__ = ["TRACE_ROW_FIELDS", "TraceRows"]


class TraceRows(RecordRows):
    _decode = staticmethod(decode_frame)
    __doc__ = RecordRows.__doc__
