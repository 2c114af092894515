# Requests met with their answers within one input, while its rows are read: the
# compiled rmq.fallback.pairing.RequestPairer (the reference, with the rules).


from rmq.fallback.pairing import MAX_WAITING as _MAX_WAITING

cdef enum:
    ROW_TIME = 3
    ROW_CONN = 4
    ROW_DIRECTION = 6
    ROW_CODE = 7
    ROW_FLAG = 8
    ROW_OPAQUE = 9
    ROW_REMARK = 12
    ROW_ERROR = 16
    ROW_FIELDS = 17

cdef tuple NOT_AN_EVENT = (None, None, None, None)
cdef tuple SETTLED = (None, None, None, False)
cdef tuple OPEN = (None, None, None, True)
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
            if direction_o == 0 and not flag & 1:
                request = True
            elif direction_o == 1 and flag & 1:
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
            if flag & 2:                        # oneway: never answered
                self.queue.append(row + SETTLED)
                continue
            if len(self.waiting) >= self.max_waiting:
                self._let_go()
            self.waiting[key] = row
