# The compiled topic-table storage of the route tables, the twin of
# rmq.fallback.routes.TopicTable (the rules are rmq.namesrv.routeinfo's, which lists
# the interface): topicQueueTable, the cached route answers and the registration's
# topic loop in C (routetable.c), run with the GIL released. Two writer-preferring
# read/write locks, waited for with the GIL released (but by serve_cached_routes: see
# why there), always taken in this order:
# - the table lock (_TableLock, ``TopicTable.lock``): RouteInfoManager's, held by the
#   rules (write: mutators; read: readers of the cold tables), so no reader sees half
#   a registration though the writer gives up the GIL between bytecodes;
# - the topic table's own lock in C, held inside ``with nogil`` blocks for one
#   operation, never across Python code: readers copy C data out under it and build
#   Python objects after. Route queries answered in C take only this one, so they
#   never wait for a registration's Python half.

from cpython.pythread cimport PyThread_get_thread_ident

from rmq.javacase import fold as _java_fold
from rmq._wire import route_zone as _route_zone, topic_not_exist as _topic_not_exist

from routetable cimport *
from bufpool cimport rp_give
from serve cimport RS_BATCH, RS_LOCK, RS_SINGLE, rs_counts, rs_serve_routes, rs_serve_threads


cdef enum:
    # Removing a broker's QueueData from this many topics gives the freed memory
    # back to the system (rt_trim): a large broker's topics are megabytes.
    TRIM_AFTER_QUEUE_DATAS = 4096


cdef size_t _budget(value) except? 0:
    if value < 0:
        raise ValueError(f"the route cache budget must be >= 0 bytes, not {value}")
    return value


cdef inline bytes _utf8(str s):
    # Topic and broker names may hold lone surrogates (from \ud800 escapes): they
    # round-trip through surrogatepass, and never match a name from the wire.
    return s.encode("utf-8", "surrogatepass")


cdef inline str _unutf8(const char* p, size_t n):
    return p[:n].decode("utf-8", "surrogatepass")


cdef enum:
    # Topic records applied under one hold of the topic table's write lock: a route
    # query waits for one slice at most (its duration: bench/README.md).
    APPLY_SLICE = 4096


@cython.final
cdef class _TableLock:
    """RouteInfoManager's read/write lock: writer-preferring, waited for with the
    GIL released, reentrant within a thread (the writer may read; a reader may read
    again, even with a writer waiting: it would deadlock otherwise). A reader
    cannot become the writer, as with Java's ReentrantReadWriteLock."""
    cdef rt_rwlock lock
    cdef unsigned long writer       # thread ident of the writer, 0: none
    cdef int depth                  # the writer's nesting (reads included)
    cdef dict readers               # thread ident -> read nesting

    def __cinit__(self):
        rt_lock_init(&self.lock)
        self.readers = {}

    def __dealloc__(self):
        rt_lock_destroy(&self.lock)

    def acquire_write(self):
        cdef unsigned long me = PyThread_get_thread_ident()
        if self.writer == me:
            self.depth += 1
            return
        if me in self.readers:
            raise RuntimeError("the route tables' reader cannot become their writer")
        with nogil:
            rt_lock_write(&self.lock)
        self.writer = me
        self.depth = 1

    def release_write(self):
        self.depth -= 1
        if self.depth == 0:
            self.writer = 0
            with nogil:
                rt_unlock_write(&self.lock)

    def acquire_read(self):
        cdef unsigned long me = PyThread_get_thread_ident()
        if self.writer == me:
            self.depth += 1
            return
        n = self.readers.get(me, 0)
        if n == 0:
            with nogil:
                rt_lock_read(&self.lock)
        self.readers[me] = n + 1

    def release_read(self):
        cdef unsigned long me = PyThread_get_thread_ident()
        if self.writer == me:
            self.depth -= 1
            return
        n = self.readers.pop(me) - 1
        if n:
            self.readers[me] = n
        else:
            with nogil:
                rt_unlock_read(&self.lock)

    @property
    def state(self):
        """(writer thread ident or 0, reader count): for tests."""
        return self.writer, sum(self.readers.values())


@cython.final
cdef class _Configs:
    """A registration's topic configs as C records (rmq_topic_rec), over the bytes that
    hold their names: the scanned body itself, or names encoded from a dict."""
    cdef rmq_topic_rec* recs
    cdef size_t n, cap              # records, and room for (the scan's buffer: pooled)
    cdef object keep                # the bytes the records point into

    def __dealloc__(self):
        rp_give(self.recs, self.cap * sizeof(rmq_topic_rec))

    def __len__(self):
        return self.n


cdef bint _frozen_bytes_view(object body):
    """Whether ``body`` is a view of bytes that cannot change: read-only, contiguous."""
    return (type(body) is memoryview and body.readonly and body.c_contiguous
            and body.format == "B")


cdef const char* _buffer_start(object data) except? NULL:
    """The first byte of ``data`` (bytes or a _frozen_bytes_view), which keeps it."""
    cdef const uint8_t[::1] view
    if type(data) is bytes:
        return PyBytes_AS_STRING(data)
    view = data
    if view.shape[0] == 0:
        return ""
    return <const char*>&view[0]


cdef _Configs _configs_from_scan(object data, rb_body* body):
    """Takes the scan's records (body is left empty)."""
    cdef _Configs c = _Configs.__new__(_Configs)
    c.keep = data
    c.n = body.ntopics
    c.cap = body.cap
    c.recs = body.topics            # the records are the scan's (one type, wire.h)
    body.topics = NULL
    body.cap = 0
    rb_body_free(body)
    return c


cdef _Configs _configs_from_dict(dict table):
    """From a checked topicConfigTable (rmq.namesrv.routeinfo._checked_body)."""
    cdef _Configs c = _Configs.__new__(_Configs)
    cdef size_t i = 0
    cdef list keep = []
    c.n = c.cap = len(table)
    c.recs = <rmq_topic_rec*>malloc(max(c.n, 1) * sizeof(rmq_topic_rec))
    if c.recs == NULL:
        raise MemoryError()
    for key, tc in table.items():
        k = _utf8(key)
        name = _utf8(tc["topicName"])
        keep.append(k)
        keep.append(name)
        c.recs[i].key = PyBytes_AS_STRING(k)
        c.recs[i].key_len = len(k)
        c.recs[i].name = PyBytes_AS_STRING(name)
        c.recs[i].name_len = len(name)
        c.recs[i].perm = tc["perm"]
        c.recs[i].read = tc["readQueueNums"]
        c.recs[i].write = tc["writeQueueNums"]
        c.recs[i].sysflag = tc["topicSysFlag"]
        i += 1
    c.keep = keep
    return c


cdef bytes _broker_data_json(dict bd, bint legacy):
    cdef WBuf b
    wb_init(&b, 128)
    try:
        wb_broker_data(&b, bd, legacy)
        return wb_bytes(&b)
    finally:
        wb_free(&b)


cdef bytes _qd_prefix(str name, bint legacy):
    cdef WBuf b
    wb_init(&b, 64)
    try:
        wb_lit(&b, b'{"brokerName":')
        wb_str(&b, name, not legacy)
        return wb_bytes(&b)
    finally:
        wb_free(&b)



ctypedef struct _found:         # a topic a reader asked for, copied out under the lock
    uint64_t seq
    size_t off, len             # its name in the names buffer
    int32_t flag                # topicSysFlag of its first QueueData (Java's order)
    bint has_flag


cdef inline bint _wanted(const rt_topic* e, int form, const uint8_t* members,
                         int32_t nmembers) noexcept nogil:
    cdef int32_t k, b
    if form >= 0:
        return e.body[form] != NULL
    if members == NULL or not e.nqd:
        return True
    for k in range(e.nqd):
        b = e.qds[k].broker
        if 0 <= b < nmembers and members[b]:
            return True
    return False


cdef int _copy_topics(rt_table* t, int form, bint want_flags, const uint8_t* members,
                      int32_t nmembers, _found** found, char** names,
                      size_t* count) noexcept nogil:
    """Copy the topics with a cached answer in ``form`` (>= 0), else those on a broker
    in ``members`` (NULL: all), into C arrays, the read lock held; -1: no memory."""
    cdef size_t i, n = 0, total = 0
    cdef rt_topic* e
    cdef int64_t flag
    for i in range(t.mask + 1):
        e = t.buckets[i]
        while e != NULL:
            if _wanted(e, form, members, nmembers):
                n += 1
                total += e.len
            e = e.next
    found[0] = <_found*>malloc(max(n, 1) * sizeof(_found))
    names[0] = <char*>malloc(max(total, 1))
    if found[0] == NULL or names[0] == NULL:
        return -1
    n = total = 0
    for i in range(t.mask + 1):
        e = t.buckets[i]
        while e != NULL:
            if _wanted(e, form, members, nmembers):
                found[0][n].seq, found[0][n].off, found[0][n].len = e.seq, total, e.len
                memcpy(names[0] + total, e.name, e.len)
                total += e.len
                found[0][n].has_flag = want_flags and e.nqd > 0
                if found[0][n].has_flag:
                    flag = rt_first_flag(t, e)
                    if flag == RT_NOMEM:
                        return -1
                    found[0][n].flag = <int32_t>flag
                n += 1
            e = e.next
    count[0] = n
    return 0


@cython.final
cdef class TopicTable:
    """The route tables' topic-table storage in C (see rmq.namesrv.routeinfo):
    topicQueueTable and the route answers behind a writer-preferring read/write
    lock; registrations are read and applied, and routes built and served, with the
    GIL released. Safe to use from several threads."""

    cdef rt_table* t
    cdef readonly _TableLock lock
    cdef dict index                 # brokerName -> its slot in the C table
    cdef list slot_names            # slot -> brokerName, None: a free slot
    cdef object broker_state
    # Route answers written by serve_routes (the GIL held): read at scrape time,
    # so that counting them costs the hot path an increment, not a Python call.
    cdef uint64_t served
    cdef uint64_t not_found         # TOPIC_NOT_EXIST answers serve_routes wrote
    # The serialize type route answers are written in (answer_serialize_type): its
    # code for the C writer, its name for the answers built in Python.
    cdef int answer_stype
    cdef str answer_stype_name

    concurrent = True

    def __cinit__(self, *args, **kwargs):
        self.t = rt_new()
        if self.t == NULL:
            raise MemoryError()
        self.lock = _TableLock()
        self.index = {}
        self.slot_names = []
        self.answer_stype = SER_JSON
        self.answer_stype_name = S_JSON

    def __init__(self, broker_state=None, cache_bytes=None):
        self.broker_state = broker_state
        if cache_bytes is not None:
            self.cache_budget = cache_bytes

    def __dealloc__(self):
        rt_free(self.t)

    # ------------------------------------------------------------ route answers

    @property
    def version(self):
        return self.t.version

    @property
    def python_routes(self):
        """Whether some answers need the rules (mappings, an orderTopicConf)."""
        return bool(self.t.python_routes)

    @python_routes.setter
    def python_routes(self, value):
        cdef int v = bool(value)
        with nogil:
            rt_wrlock(self.t)
            self.t.python_routes = v
            rt_wrunlock(self.t)

    @property
    def answer_serialize_type(self):
        """The serialize type route answers are written in: "JSON" (the default) or
        "ROCKETMQ". Java 5.x answers in the NameServer's own, whatever the request used."""
        return self.answer_stype_name

    @answer_serialize_type.setter
    def answer_serialize_type(self, name):
        self.answer_stype = _serialize_type_code(name)
        self.answer_stype_name = name

    @property
    def cache_budget(self):
        """The answer cache's byte budget (None: unbounded)."""
        return None if self.t.budget == <size_t>-1 else self.t.budget

    @cache_budget.setter
    def cache_budget(self, value):
        cdef size_t budget = <size_t>-1 if value is None else _budget(value)
        with nogil:
            rt_wrlock(self.t)
            rt_set_budget(self.t, budget)
            rt_wrunlock(self.t)

    def cache_stats(self):
        """The answer cache's counters since start (hits, misses: answers built or
        found shared; shared; evictions; refused: built but not admitted; served:
        route answers written by serve_routes; not_found: its TOPIC_NOT_EXIST
        answers) and its size now (bytes, budget,
        answers: distinct ones held, entries: topic forms pointing at one; topics:
        in the table)."""
        cdef rt_cache_stats st
        cdef size_t topics
        with nogil:
            rt_rdlock(self.t)
            rt_get_cache_stats(self.t, &st)
            topics = self.t.count
            rt_rdunlock(self.t)
        return {"hits": st.hits, "misses": st.misses, "shared": st.shared,
                "evictions": st.evictions, "refused": st.refused, "served": self.served,
                "not_found": self.not_found, "bytes": st.bytes, "budget": None if st.budget == <size_t>-1 else st.budget,
                "answers": st.answers, "entries": st.entries, "topics": topics}

    def _work(self):
        """Entries probed and topics walked since start: what operations cost, for tests."""
        return rt_work(self.t)

    def _buried(self):
        """Answers evicted while another reader was in (they wait in the graveyard
        until no reader is): (since start, in the graveyard now), for tests. Read
        under the read lock, before its release may empty the graveyard."""
        cdef uint64_t since_start
        cdef size_t now
        with nogil:
            rt_rdlock(self.t)
            rt_buried(self.t, &since_start, &now)
            rt_rdunlock(self.t)
        return since_start, now

    def encode_topic_route_data(self, route, legacy=False):
        return encode_topic_route_data(route, legacy)

    def route(self, str topic, bint legacy, zone=None):
        """(the answer, None) built in C (cached, or built now under the read lock;
        copied out under it, its bytes made after), (None, version) when the rules
        must build it, (None, None): no route. ``zone``: a zone-mode query's folded
        zone (the answer is then legacy whatever ``legacy`` says)."""
        cdef bytes name = _utf8(topic)
        cdef const char* p = PyBytes_AS_STRING(name)
        cdef size_t n = len(name), blen = 0
        cdef const rt_blob* blob
        cdef rt_blob* temp
        cdef char* copy = NULL
        cdef int status = RT_OK, form = RT_LEGACY if legacy else RT_STANDARD
        cdef uint64_t version
        cdef bytes zb = None if zone is None else _utf8(zone)
        cdef const char* zp = NULL if zb is None else PyBytes_AS_STRING(zb)
        cdef size_t zn = 0 if zb is None else len(zb)
        with nogil:
            rt_rdlock(self.t)
            if zp != NULL:
                form = rt_zone_form(self.t, zp, zn)
            blob = rt_route(self.t, p, n, form, &status, &temp)
            version = self.t.version
            if blob != NULL:
                blen = blob.len
                copy = <char*>malloc(max(blen, 1))
                if copy != NULL:
                    memcpy(copy, blob.data, blen)
            rt_rdunlock(self.t)
            free(temp)
        if blob != NULL:
            try:
                if copy == NULL:
                    raise MemoryError()
                return PyBytes_FromStringAndSize(copy, blen), None
            finally:
                free(copy)
        if status == RT_NOMEM:
            raise MemoryError()
        return None, (version if status == RT_PYTHON else None)

    def store_route(self, str topic, bint legacy, bytes body, uint64_t version, zone=None):
        cdef bytes name = _utf8(topic)
        cdef const char* p = PyBytes_AS_STRING(name)
        cdef size_t n = len(name), bn = len(body)
        cdef const char* bp = PyBytes_AS_STRING(body)
        cdef int form = RT_LEGACY if legacy else RT_STANDARD
        cdef bytes zb = None if zone is None else _utf8(zone)
        cdef const char* zp = NULL if zb is None else PyBytes_AS_STRING(zb)
        cdef size_t zn = 0 if zb is None else len(zb)
        with nogil:
            rt_rdlock(self.t)
            if zp != NULL:
                form = rt_zone_form(self.t, zp, zn)
            rt_store(self.t, p, n, form, bp, bn, version)
            rt_rdunlock(self.t)

    def cached_topics(self, bint legacy):
        return {t for _, t, _ in self._entries(1 if legacy else 0, False, None)}

    def touch(self, topics):
        """The routes of ``topics`` may have changed (each answer stands alone)."""
        cdef bytes name
        cdef const char* p
        cdef size_t n
        for topic in topics or ():
            name = _utf8(topic)
            p, n = PyBytes_AS_STRING(name), len(name)
            with nogil:
                rt_wrlock(self.t)
                rt_forget(self.t, p, n)
                rt_wrunlock(self.t)

    def touch_all(self):
        with nogil:
            rt_wrlock(self.t)
            rt_forget(self.t, NULL, 0)
            rt_wrunlock(self.t)

    def broker_changed(self, str broker_name):
        # A broker without a slot has no QueueData: only a registered one needs one.
        b = self.index.get(broker_name)
        if b is not None:
            self._push_broker(broker_name, b)
        elif self.broker_state(broker_name)[0] is not None:
            self._push_broker(broker_name)

    # ------------------------------------------------------------ broker slots

    cdef int32_t _broker(self, str name) except? -1:
        """The broker's slot in the C table (a new one gets its data at once)."""
        b = self.index.get(name)
        return self._push_broker(name) if b is None else b

    def _push_broker(self, str broker_name, b=None):
        """Push the broker's encoded BrokerData (or its absence) to its slot (b
        None: to a new one), which drops the answers of the broker's topics; an
        unregistered broker without QueueData gives its slot back. The slot, or
        None when given back."""
        cdef int32_t bi = -1 if b is None else b
        cdef int rc = 0, released = 0, python_only = 0, has_master = 0
        cdef const char* sp = NULL
        cdef const char* lp = NULL
        cdef const char* zp = NULL
        cdef size_t sn = 0, ln = 0, zn = 0
        d, needs_rules = self.broker_state(broker_name)
        std = legacy = zone = None
        if d is not None:
            std = _broker_data_json(d, False)
            legacy = _broker_data_json(d, True)
            sp, sn = PyBytes_AS_STRING(std), len(std)
            lp, ln = PyBytes_AS_STRING(legacy), len(legacy)
            python_only = bool(needs_rules)
            # What a zone-mode answer asks of it (ZoneRouteRPCHook): its zone, folded
            # as the queries' are, and whether it has a master.
            has_master = 0 in d["brokerAddrs"]
            if d.get("zoneName") is not None:
                zone = _utf8(_java_fold(d["zoneName"]))
                zp, zn = PyBytes_AS_STRING(zone), len(zone)
        cdef bytes qs = _qd_prefix(broker_name, False)
        cdef bytes ql = _qd_prefix(broker_name, True)
        cdef const char* qsp = PyBytes_AS_STRING(qs)
        cdef const char* qlp = PyBytes_AS_STRING(ql)
        cdef size_t qsn = len(qs), qln = len(ql)
        cdef uint32_t jhash = _java_spread_hash(broker_name)
        cdef bint new = b is None
        with nogil:
            rt_wrlock(self.t)
            if new:
                bi = rt_new_broker(self.t)
            if bi == RT_NOMEM:
                rc = RT_NOMEM
            else:
                rc = rt_set_broker(self.t, bi, sp, sn, lp, ln, qsp, qsn, qlp, qln, jhash,
                                   python_only, zp, zn, has_master)
                # A new slot is given back at once when its data did not fit; an
                # old one once its broker is gone (a new one may get QueueData
                # next: register_topic's broker).
                if (rc == RT_NOMEM) if new else (rc == 0):
                    released = rt_release_broker(self.t, bi)
            rt_wrunlock(self.t)
        if rc == RT_NOMEM:
            raise MemoryError()
        if new:
            self.index[broker_name] = bi
            if bi == len(self.slot_names):
                self.slot_names.append(broker_name)
            else:
                self.slot_names[bi] = broker_name
        elif released:
            self._forget_slot(broker_name, bi)
            return None
        return bi

    cdef _forget_slot(self, str broker_name, int32_t b):
        del self.index[broker_name]
        self.slot_names[b] = None

    def _broker_slots(self):
        """(slots in use, slots ever used) of the C table, and the broker names
        holding a slot: for tests."""
        cdef int32_t used, total
        with nogil:
            rt_rdlock(self.t)
            used, total = self.t.nbrokers - self.t.nfree, self.t.nbrokers
            rt_rdunlock(self.t)
        return used, total, set(self.index)

    def _hash_stats(self):
        """{"topics", "buckets", "max_chain"} of the C topic table: for tests."""
        cdef rt_topic* e
        cdef size_t i, chain, longest = 0, count, buckets
        with nogil:
            rt_rdlock(self.t)
            count, buckets = self.t.count, self.t.mask + 1
            for i in range(buckets):
                chain = 0
                e = self.t.buckets[i]
                while e != NULL:
                    chain += 1
                    e = e.next
                if chain > longest:
                    longest = chain
            rt_rdunlock(self.t)
        return {"topics": count, "buckets": buckets, "max_chain": longest}

    # ------------------------------------------------------------ queue data

    def qmap(self, str topic):
        """{brokerName: QueueData dict} of a topic in insertion order, or None."""
        cdef bytes name = _utf8(topic)
        cdef const char* p = PyBytes_AS_STRING(name)
        cdef size_t n = len(name)
        cdef rt_topic* e
        cdef rt_qdv* qds = NULL
        cdef int32_t i, nqd = -1
        with nogil:
            rt_rdlock(self.t)
            e = rt_find(self.t, p, n)
            if e != NULL:
                nqd = e.nqd
                qds = <rt_qdv*>malloc(max(nqd, 1) * sizeof(rt_qdv))
                if qds != NULL and rt_topic_qds(self.t, e, qds) != 0:
                    free(qds)
                    qds = NULL
            rt_rdunlock(self.t)
        if nqd < 0:
            return None
        if qds == NULL:
            raise MemoryError()
        names = self.slot_names
        try:
            return {names[qds[i].broker]: {
                        "brokerName": names[qds[i].broker], "perm": qds[i].perm,
                        "readQueueNums": qds[i].read, "topicSysFlag": qds[i].sysflag,
                        "writeQueueNums": qds[i].write}
                    for i in range(nqd)}
        finally:
            free(qds)

    def qmap_peak(self, str topic):
        """The most QueueData the topic held since it was created (Java's HashMap of
        them never shrinks: its order follows this); 0 for no topic."""
        cdef bytes name = _utf8(topic)
        cdef const char* p = PyBytes_AS_STRING(name)
        cdef size_t n = len(name)
        cdef rt_topic* e
        cdef uint32_t peak = 0
        with nogil:
            rt_rdlock(self.t)
            e = rt_find(self.t, p, n)
            if e != NULL:
                peak = e.peak
            rt_rdunlock(self.t)
        return peak

    cdef list _entries(self, int form, bint want_flags, object members):
        """(seq, topic, first flag or None) of every topic (``form`` >= 0: with a
        cached answer in that form; ``members``: a set of broker slots, only the
        topics with queue data on one of them), in insertion order."""
        cdef _found* found = NULL
        cdef char* names = NULL
        cdef uint8_t* member = NULL
        cdef size_t i, count = 0
        cdef int32_t nm = len(self.slot_names)
        cdef int rc
        try:
            if members is not None:
                member = <uint8_t*>calloc(max(nm, 1), 1)
                if member == NULL:
                    raise MemoryError()
                for b in members:
                    member[<int32_t>b] = 1
            with nogil:
                rt_rdlock(self.t)
                rc = _copy_topics(self.t, form, want_flags, member, nm, &found, &names, &count)
                rt_rdunlock(self.t)
            if rc < 0:
                raise MemoryError()
            out = [(found[i].seq, _unutf8(names + found[i].off, found[i].len),
                    found[i].flag if found[i].has_flag else None) for i in range(count)]
        finally:
            free(found)
            free(names)
            free(member)
        out.sort()
        return out

    def topic_seqs(self):
        """``(seq, topic)`` of every topic with queue data, in insertion order: ``seq``
        numbers the insertion, a new one when a topic removed comes back."""
        return [(seq, t) for seq, t, _ in self._entries(-1, False, None)]

    def topic_hashes(self):
        """``(seqs, hashes)``: arrays ("Q", "I") of every topic's insertion number (as
        ``topic_seqs``) and java_spread_hash, in insertion order: what the topic
        order's replay needs of a million topics, without a Python object each."""
        cdef uint64_t* seqs = NULL
        cdef uint32_t* hashes = NULL
        cdef size_t n = 0
        cdef int rc
        with nogil:
            rt_rdlock(self.t)
            rc = rt_topic_hashes(self.t, &seqs, &hashes, &n)
            rt_rdunlock(self.t)
        if rc != 0:
            raise MemoryError()
        try:
            return _seq_hash_arrays(seqs, hashes, n)
        finally:
            free(seqs)
            free(hashes)

    def topic_count(self):
        """How many topics have queue data."""
        cdef size_t count
        with nogil:
            rt_rdlock(self.t)
            count = self.t.count
            rt_rdunlock(self.t)
        return count

    def first_flags(self):
        """(topic, topicSysFlag of its first QueueData in Java's order) per topic."""
        return [(t, flag) for _, t, flag in self._entries(-1, True, None) if flag is not None]

    def topics_of_brokers(self, names):
        """Topics with queue data on any of the broker ``names``, in insertion order."""
        members = {self.index[n] for n in names if n in self.index}
        return [t for _, t, _ in self._entries(-1, False, members)] if members else []

    # ------------------------------------------------------------ registration

    def read_body(self, body, now_ms, check):
        """(dataVersion, topic configs, mappings, filter servers) of a body: scanned
        in C, else decoded and checked by ``check`` (the rules')."""
        cdef rb_body scanned
        cdef int rc
        cdef const char* dp
        cdef size_t dn
        cdef rb_partial* partial
        if isinstance(body, (bytes, bytearray, memoryview)):
            # The records point into what was scanned: bytes, or a read-only view (the
            # I/O engine's frame, read where it arrived: a body of megabytes is not
            # copied); what could change under them is copied first.
            data = body if type(body) is bytes or _frozen_bytes_view(body) else bytes(body)
            dp, dn = _buffer_start(data), len(data)
            # (the entries the engine scanned while the body arrived: not read again)
            partial = _scanned_as_it_arrived(body)
            with nogil:
                rc = rb_scan_register_body_from(dp, dn, partial, &scanned)
                re_free_partial(partial)
            if rc == RB_NOMEM:
                raise MemoryError()
            if rc == RB_SLOW and is_zlib(<const uint8_t*>dp, dn):
                # The compressed form: inflated (bounded as decode_register_broker_body
                # bounds it), then scanned like the JSON form, without a Python
                # object per topic; the records point into the inflated bytes.
                data = inflate(data, DEFAULT_MAX_INFLATED)
                dp, dn = _buffer_start(data), len(data)
                with nogil:
                    rc = rb_scan_compressed_body(dp, dn, &scanned)
                if rc == RB_NOMEM:
                    raise MemoryError()
                if rc != RB_OK:
                    body = decode_inflated(data)
            else:
                body = None
            if rc == RB_OK:
                configs = _configs_from_scan(data, &scanned)
                dv = {"counter": scanned.counter, "stateVersion": scanned.state_version,
                      "timestamp": scanned.timestamp if scanned.has_timestamp else now_ms}
                return dv, configs, {}, []
            if body is None:
                body = decode_register_broker_body(data)
        dv, table, mappings, filters = check(body, now_ms)[1:]
        return dv, _configs_from_dict(table), mappings, filters

    def apply_topic_configs(self, str broker_name, _Configs configs, *, force, readonly,
                            delete_missing):
        cdef int32_t b = self._broker(broker_name)
        cdef int rc = 0, taken = 0, f = bool(force), ro = bool(readonly)
        cdef int dm = bool(delete_missing)
        cdef size_t differ, k, m, removed = 0
        cdef int step
        cdef uint8_t* only = <uint8_t*>malloc(max(configs.n, 1))
        if only == NULL:
            raise MemoryError()
        try:
            with nogil:
                # Compare under the read lock (route queries go on); take the write
                # lock only for what changes: a periodic re-registration with a new
                # DataVersion and the same topics never blocks a query.
                rt_rdlock(self.t)
                differ = rt_apply_diff(self.t, b, configs.recs, configs.n, f, ro, only, &taken)
                rt_rdunlock(self.t)
                if dm:
                    # Not only the records found different: Java deletes by key, then
                    # creates by topicName, so a record keyed otherwise than its name
                    # brings back a topic the deletion removed.
                    rt_wrlock(self.t)
                    rc = rt_apply(self.t, b, configs.recs, configs.n, f, ro, dm, NULL, &removed)
                    rt_wrunlock(self.t)
                    if rc == 1:
                        taken = 1
                elif differ:
                    # In slices, each under the write lock on its own: a route query
                    # waits for one slice at most, never for a whole large table.
                    k = 0
                    while k < configs.n and rc != RT_NOMEM:
                        m = min(APPLY_SLICE, configs.n - k)
                        rt_wrlock(self.t)
                        step = rt_apply(self.t, b, configs.recs + k, m, f, ro, 0, only + k, NULL)
                        rt_wrunlock(self.t)
                        if step != 0:
                            rc = step
                        k += m
        finally:
            free(only)
        if rc == RT_NOMEM:
            raise MemoryError()
        return bool(taken), differ, removed

    def put_queue_data(self, str topic, dict qd):
        cdef bytes name = _utf8(topic)
        cdef rt_qdv q
        cdef int rc
        q.broker = self._broker(qd["brokerName"])
        q.perm, q.read, q.write, q.sysflag = (qd["perm"], qd["readQueueNums"],
                                              qd["writeQueueNums"], qd["topicSysFlag"])
        cdef const char* np = PyBytes_AS_STRING(name)
        cdef size_t nn = len(name)
        with nogil:
            rt_wrlock(self.t)
            rc = rt_put(self.t, np, nn, &q)
            rt_wrunlock(self.t)
        if rc == RT_NOMEM:
            raise MemoryError()
        return rc == 1

    def remove_queue_data(self, str topic, str broker_name):
        cdef bytes name = _utf8(topic)
        cdef int rc, released
        b = self.index.get(broker_name)
        if b is None:
            return False
        cdef int32_t bi = b
        cdef const char* np = PyBytes_AS_STRING(name)
        cdef size_t nn = len(name)
        with nogil:
            rt_wrlock(self.t)
            rc = rt_remove(self.t, np, nn, bi)
            released = rt_release_broker(self.t, bi)
            rt_wrunlock(self.t)
        if released:
            self._forget_slot(broker_name, bi)
        return rc == 1

    def remove_broker(self, str broker_name):
        cdef size_t n
        cdef int released
        b = self.index.get(broker_name)
        if b is None:
            return
        cdef int32_t bi = b
        with nogil:
            rt_wrlock(self.t)
            n = rt_remove_broker(self.t, bi)
            released = rt_release_broker(self.t, bi)
            rt_wrunlock(self.t)
            if n >= TRIM_AFTER_QUEUE_DATAS:
                rt_trim()
        if released:
            self._forget_slot(broker_name, bi)

    def write_perm(self, str broker_name, wipe):
        cdef size_t n
        cdef int w = bool(wipe)
        b = self.index.get(broker_name)
        if b is None:
            return 0
        cdef int32_t bi = b
        with nogil:
            rt_wrlock(self.t)
            n = rt_write_perm(self.t, bi, w)
            rt_wrunlock(self.t)
        return n

    # ------------------------------------------------------------ serving

    def serve_routes(self, route_body, FrameDecoder decoder, data, Py_ssize_t limit,
                     bint builds=True):
        """rmq.namesrv.routeinfo.RouteTable.serve_routes: complete frames the decoder
        holds nothing of are answered from the C answers first (serve_cached_routes);
        the decoder decodes the rest, whose route queries before the first other
        request are answered with ``route_body``. A topic without a route is
        answered TOPIC_NOT_EXIST: in C, or when ``route_body`` gives None and
        ``builds`` says that None is no route (else only for a topic not in the
        table)."""
        cdef list cmds = [], others = []
        cdef WBuf b
        cdef Py_buffer view
        cdef Py_ssize_t pos = 0, n = -1
        cdef bint in_order = False
        error = None
        wb_init(&b, 64 * 1024)      # a read's worth of answers: no regrowth per read
        try:
            if decoder.error is None:
                PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
                n = view.len
                try:
                    if decoder.len:     # first complete the frame a previous read began
                        try:
                            pos = decoder.take(<const uint8_t*>view.buf, view.len, cmds)
                        except ProtocolError as e:
                            decoder.error = e
                            decoder.reset()
                            error = e
                        in_order = _answer_routes(self, cmds, route_body, &b, limit, others,
                                                  False, builds)
                        cmds = []
                    if error is None and not in_order and decoder.len == 0:
                        pos += serve_cached_routes(<const uint8_t*>view.buf + pos,
                                                   view.len - pos, decoder.max_frame_length,
                                                   self, &b, limit)
                finally:
                    PyBuffer_Release(&view)
            if error is None and pos != n:     # not all answered in C: decode the rest
                try:
                    cmds = decoder._feed(data if pos == 0 else memoryview(data)[pos:])
                except ProtocolError as e:
                    cmds, error = list(getattr(e, "decoded", ())), e
                _answer_routes(self, cmds, route_body, &b, limit, others, in_order, builds)
            return wb_bytes(&b) if b.len else EMPTY, others, error
        finally:
            wb_free(&b)


cdef bint _answer_routes(TopicTable tt, list cmds, route_body, WBuf* b, Py_ssize_t limit,
                         list others, bint in_order, bint builds) except -1:
    """Answer the route queries of ``cmds`` before the first other request;
    hand the rest to ``others``. Returns whether another request was met."""
    cdef RemotingCommand cmd, resp
    cdef bint std, missing
    for cmd in cmds:
        body = None
        missing = False
        if in_order:
            others.append(cmd)
            continue
        if cmd.code != RMQ_GET_ROUTEINFO_BY_TOPIC:
            in_order = True     # it may change routes: the rest waits for it
        elif (cmd.flag & (FLAG_RESPONSE | FLAG_ONEWAY)) == 0 \
                and cmd.ext_fields is not None and (limit < 0 or b.len < limit):
            topic = dget(cmd.ext_fields, "topic", None)
            if PyUnicode_Check(topic):
                std = cmd.version >= V4_9_4 or _is_true(
                    dget(cmd.ext_fields, "acceptStandardJsonOnly", None))
                body = route_body(topic, not std, _route_zone(cmd))
                missing = body is None and (builds or tt.qmap_peak(topic) == 0)
        if missing:
            resp = _topic_not_exist(cmd, topic)
            tt.not_found += 1
        elif body is None:
            # Answered by the caller: the later ones wait too, to keep the order.
            in_order = True
            others.append(cmd)
            continue
        else:
            resp = cmd.response(0, None, None, body)
            tt.served += 1
        resp.serialize_type = tt.answer_stype_name
        encode_into(b, resp)
    return in_order


# ---------------------------------------------------------------- serving

cdef Py_ssize_t serve_cached_routes(const uint8_t* p, Py_ssize_t n, Py_ssize_t max_frame,
                                    TopicTable tt, WBuf* b, Py_ssize_t limit) except -1:
    """serve.c's loop (rs_serve_routes) on p[:n]: the complete GET_ROUTEINFO_BY_TOPIC
    frames at its start answered from the table (found or TOPIC_NOT_EXIST) into b,
    grown for an answer that does not fit, until a frame needs Python or the
    answers reach ``limit``. Returns the bytes consumed.

    The GIL stays held: a run only copies answers, and while the table thread runs
    Python (a liveness scan dropping many brokers), giving the GIL up here would cost
    the loop thread a wait of up to the switch interval to take it back, per read.
    Waiting for the read lock with the GIL is safe: no holder of the table's lock
    ever waits for the GIL."""
    cdef size_t pos = 0, need = 0, length
    cdef rs_counts counts
    while True:
        counts.served = counts.not_found = 0
        length = <size_t>b.len
        pos += rs_serve_routes(tt.t, tt.answer_stype, p + pos, <size_t>(n - pos),
                               <size_t>max_frame, b.data, <size_t>b.cap, &length,
                               SIZE_MAX if limit < 0 else <size_t>limit, &need, &counts)
        b.len = <Py_ssize_t>length
        tt.served += counts.served
        tt.not_found += counts.not_found
        if need == 0:
            return <Py_ssize_t>pos
        wb_grow(b, <Py_ssize_t>need)



def _serve_threads(TopicTable tt, data, int threads, double seconds, mode="batch"):
    """Bench hook (bench/scaling.py): ``threads`` C threads, without the GIL, each
    going over the route queries of ``data`` (complete frames, all answered by
    serve.c's loop) again and again from ``tt`` for ``seconds``: ``mode`` "batch"
    answers all of them per call, "single" one per call (the read lock per answer),
    "lock" only takes and releases the read lock once per frame. What each thread did
    (answers, or lock pairs). ValueError when a frame is left to Python."""
    modes = {"batch": RS_BATCH, "single": RS_SINGLE, "lock": RS_LOCK}
    if threads < 1:
        raise ValueError(f"threads must be at least 1, not {threads}")
    if mode not in modes:
        raise ValueError(f"mode must be one of {sorted(modes)}, not {mode!r}")
    cdef int cmode = modes[mode]
    cdef const uint8_t[::1] view = data
    cdef uint64_t* answers = <uint64_t*>calloc(threads, sizeof(uint64_t))
    cdef int rc
    if answers == NULL:
        raise MemoryError()
    try:
        with nogil:
            rc = rs_serve_threads(tt.t, tt.answer_stype, &view[0], view.shape[0], threads,
                                  seconds, cmode, answers)
        if rc != 0:
            raise ValueError("a thread failed: a frame the loop leaves to Python, or no "
                             "memory or thread")
        return [answers[i] for i in range(threads)]
    finally:
        free(answers)
