# Requests met with their answers within one input, while its rows are read: the
# compiled rmq.fallback.pairing.RequestPairer (the reference, with the rules). The row
# layout is rmq.rows' (the one both implementations read), taken at import.

import rmq.rows as _rows
from rmq.rows import MAX_WAITING as _MAX_WAITING

cdef Py_ssize_t ROW_TIME = _rows.ROW["time_ns"]
cdef Py_ssize_t ROW_CONN = _rows.ROW["conn"]
cdef Py_ssize_t ROW_DIRECTION = _rows.ROW["direction"]
cdef Py_ssize_t ROW_CODE = _rows.ROW["code"]
cdef Py_ssize_t ROW_FLAG = _rows.ROW["flag"]
cdef Py_ssize_t ROW_OPAQUE = _rows.ROW["opaque"]
cdef Py_ssize_t ROW_REMARK = _rows.ROW["remark"]
cdef Py_ssize_t ROW_ERROR = _rows.ROW["decode_error"]
cdef Py_ssize_t ROW_FIELDS = len(_rows.TRACE_ROW_FIELDS)

cdef tuple NOT_AN_EVENT = _rows.NO_PAIRING
cdef tuple SETTLED = _rows.SETTLED
cdef tuple OPEN = _rows.OPEN
cdef object ROWS_END = object()


@cython.final
cdef class RequestPairer:
    """RequestPairer(rows, max_waiting=MAX_WAITING)

    The rows of one input (TRACE_ROW_FIELDS tuples, in the input's order) as
    PAIRED_ROW_FIELDS tuples. Every row comes out once; a request comes out when its
    answer, its opaque's next request or the end of the rows is reached."""

    cdef object rows
    cdef dict waiting       # (conn, opaque) -> the request row waiting for its answer
    cdef list queue         # rows to hand out, in order, from queue[head], before reading on
    cdef Py_ssize_t head
    cdef Py_ssize_t max_waiting

    def __cinit__(self, rows, Py_ssize_t max_waiting=_MAX_WAITING):
        if max_waiting < 1:
            raise ValueError(f"max_waiting must be at least 1, got {max_waiting}")
        self.rows = iter(rows)
        self.waiting = {}
        self.queue = []
        self.max_waiting = max_waiting

    def __iter__(self):
        return self

    cdef _let_go(self):
        """Every waiting request, unanswered."""
        for request in self.waiting.values():
            self.queue.append(<tuple>request + SETTLED)
        self.waiting.clear()

    def __next__(self):
        cdef tuple row
        cdef object flag_o, direction_o, before
        cdef long flag
        cdef bint request
        while True:
            if self.head < len(self.queue):
                row = self.queue[self.head]
                self.head += 1
                return row
            if self.head:
                self.queue.clear()
                self.head = 0
            if self.rows is None:
                raise StopIteration
            item = next(self.rows, ROWS_END)
            if item is ROWS_END:
                self.rows = None
                self._let_go()
                continue
            if type(item) is not tuple or len(<tuple>item) != ROW_FIELDS:
                raise TypeError(f"a trace row is a tuple of {ROW_FIELDS} fields, got {item!r:.80}")
            row = <tuple>item
            flag_o = row[ROW_FLAG]
            if flag_o is None or row[ROW_ERROR] is not None:
                return row + NOT_AN_EVENT
            flag = flag_o
            direction_o = row[ROW_DIRECTION]
            if direction_o == 0 and not flag & FLAG_RESPONSE:     # IN
                request = True
            elif direction_o == 1 and flag & FLAG_RESPONSE:      # OUT
                request = False
            else:
                return row + NOT_AN_EVENT
            key = (row[ROW_CONN], row[ROW_OPAQUE])
            before = self.waiting.pop(key, None)
            if not request:
                if before is None:
                    return row + OPEN
                self.queue.append(row + SETTLED)
                return <tuple>before + (row[ROW_TIME], row[ROW_CODE], row[ROW_REMARK], False)
            if before is not None:              # its next frame is a request: unanswered
                self.queue.append(<tuple>before + SETTLED)
            if flag & FLAG_ONEWAY:               # oneway: never answered
                self.queue.append(row + SETTLED)
                continue
            if len(self.waiting) >= self.max_waiting:
                self._let_go()
            self.waiting[key] = row
