# The compiled route tables: rmq.fallback.routes.RouteTable (Java's RouteInfoManager)
# with its topic table, its cached route answers and the registration's topic
# loop in C (routetable.c), behind a writer-preferring read/write lock.
#
# The cold tables (clusters, brokers, live brokers, filter servers, mappings: a
# handful of entries) and every rule about them stay in the reference class, so
# the two implementations cannot drift; this subclass overrides its "primitive"
# methods. Heavy work runs with the GIL released: reading a registration body
# (rb_scan_register_body), applying its topics (rt_apply under the write lock),
# and building and serving route answers (rt_route under the read lock).
#
# Two writer-preferring read/write locks, both waited for with the GIL released:
# - the table lock (_TableLock): RouteInfoManager's lock, over all the tables.
#   Every mutating method holds it for writing, every reader of the cold tables
#   (cluster info, topic lists, routes built by the reference code) for reading,
#   so no reader sees half a registration even though the writer thread gives up
#   the GIL between bytecodes. A registration body is read before it is taken.
# - the topic table's own lock in C, held only inside ``with nogil`` blocks for
#   one operation, never across Python code (except allocating answer bytes): the
#   route queries answered in C take only this one, so they never wait for a
#   registration's Python half. The order is always table lock, then topic lock.

from cpython.pythread cimport PyThread_get_thread_ident

from rmq.fallback import routes as _ref

cdef extern from "routetable.h" nogil:
    ctypedef struct rt_blob:
        size_t len
        char data[1]
    ctypedef struct rt_qd:
        int32_t broker, perm, read, write, sysflag
    ctypedef struct rt_topic:
        rt_topic* next
        uint64_t seq
        int32_t nqd
        rt_qd* qds
        rt_blob* body[2]
        size_t len
        char name[1]
    ctypedef struct rt_rec:
        const char* key
        size_t key_len
        const char* name
        size_t name_len
        int32_t perm, read, write, sysflag
    ctypedef struct rt_table:
        rt_topic** buckets
        size_t mask, count
        uint64_t version
        int32_t nbrokers, nfree
        int python_routes
    enum: RT_OK, RT_NOT_FOUND, RT_PYTHON, RT_NOMEM
    rt_table* rt_new()
    void rt_free(rt_table* t)
    ctypedef struct rt_rwlock:
        pass
    void rt_lock_init(rt_rwlock* l)
    void rt_lock_destroy(rt_rwlock* l)
    void rt_lock_read(rt_rwlock* l)
    void rt_unlock_read(rt_rwlock* l)
    void rt_lock_write(rt_rwlock* l)
    void rt_unlock_write(rt_rwlock* l)
    void rt_rdlock(rt_table* t)
    void rt_rdunlock(rt_table* t)
    void rt_wrlock(rt_table* t)
    void rt_wrunlock(rt_table* t)
    int32_t rt_new_broker(rt_table* t)
    int rt_release_broker(rt_table* t, int32_t b)
    void rt_trim()
    int rt_set_broker(rt_table* t, int32_t b, const char* std, size_t std_len,
                      const char* legacy, size_t legacy_len, const char* qd_std,
                      size_t qd_std_len, const char* qd_legacy, size_t qd_legacy_len,
                      uint32_t jhash, int python_only)
    int rt_put(rt_table* t, const char* name, size_t len, const rt_qd* qd)
    int rt_remove(rt_table* t, const char* name, size_t len, int32_t broker)
    size_t rt_remove_broker(rt_table* t, int32_t broker)
    size_t rt_write_perm(rt_table* t, int32_t broker, int wipe)
    int rt_apply(rt_table* t, int32_t b, const rt_rec* recs, size_t n, int force, int readonly,
                 int delete_missing, const uint8_t* only)
    size_t rt_apply_diff(const rt_table* t, int32_t b, const rt_rec* recs, size_t n, int force,
                         int readonly, uint8_t* only, int* taken)
    void rt_forget(rt_table* t, const char* name, size_t len)
    rt_topic* rt_find(const rt_table* t, const char* name, size_t len)
    const rt_blob* rt_route(rt_table* t, const char* name, size_t len, int legacy, int* status)
    int rt_store(rt_table* t, const char* name, size_t len, int legacy, const char* body,
                 size_t body_len, uint64_t version)
    void rt_java_order(const rt_table* t, const rt_topic* e, int32_t* order)


cdef enum:
    # Removing a broker's QueueData from this many topics gives the freed memory
    # back to the system (rt_trim): a large broker's topics are megabytes.
    TRIM_AFTER_QUEUE_DATAS = 4096


cdef inline bytes _utf8(str s):
    # Topic and broker names may hold lone surrogates (from \ud800 escapes): they
    # round-trip through surrogatepass, and never match a name from the wire.
    return s.encode("utf-8", "surrogatepass")


cdef inline str _unutf8(const char* p, size_t n):
    return p[:n].decode("utf-8", "surrogatepass")


@cython.final
cdef class _TopicTable:
    """Owns the C tables."""
    cdef rt_table* t

    def __cinit__(self):
        self.t = rt_new()
        if self.t == NULL:
            raise MemoryError()

    def __dealloc__(self):
        rt_free(self.t)


cdef enum:
    # Topic records applied under one hold of the topic table's write lock (~1 ms).
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
    """A registration's topic configs as C records (rt_rec), over the bytes that
    hold their names: the scanned body itself, or names encoded from a dict."""
    cdef rt_rec* recs
    cdef size_t n
    cdef object keep                # the bytes the records point into

    def __dealloc__(self):
        free(self.recs)

    def __len__(self):
        return self.n


cdef _Configs _configs_from_scan(object data, rb_body* body):
    """Takes the scan's records (body's topics are freed, also on error)."""
    cdef _Configs c = _Configs.__new__(_Configs)
    cdef size_t i
    c.keep = data
    c.n = body.ntopics
    c.recs = <rt_rec*>malloc(max(c.n, 1) * sizeof(rt_rec))
    if c.recs == NULL:
        rb_body_free(body)
        raise MemoryError()
    for i in range(c.n):
        c.recs[i].key = body.topics[i].key
        c.recs[i].key_len = body.topics[i].key_len
        c.recs[i].name = body.topics[i].name
        c.recs[i].name_len = body.topics[i].name_len
        c.recs[i].perm = body.topics[i].perm
        c.recs[i].read = body.topics[i].read
        c.recs[i].write = body.topics[i].write
        c.recs[i].sysflag = body.topics[i].sysflag
    # Copied: the scan's array (48 bytes a topic) goes before the apply grows the table.
    rb_body_free(body)
    return c


cdef _Configs _configs_from_dict(dict table):
    """From the checked topicConfigTable of rmq.fallback.routes._checked_body."""
    cdef _Configs c = _Configs.__new__(_Configs)
    cdef size_t i = 0
    cdef list keep = []
    c.n = len(table)
    c.recs = <rt_rec*>malloc(max(c.n, 1) * sizeof(rt_rec))
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
        wb_put(&b, b'{"brokerName":', 14)
        wb_str(&b, name, not legacy)
        return wb_bytes(&b)
    finally:
        wb_free(&b)


class _CoreBodies:
    decode_register_broker_body = staticmethod(decode_register_broker_body)
    encode_topic_route_data = staticmethod(encode_topic_route_data)


def _writes(method):
    """Run a mutating method as the only writer (the table lock held for writing)."""
    def locked(self, *args, **kwargs):
        lock = self._lock
        lock.acquire_write()
        try:
            return method(self, *args, **kwargs)
        finally:
            lock.release_write()
    locked.__name__ = method.__name__
    locked.__doc__ = method.__doc__
    return locked


def _reads(method):
    """Run a reader of the cold tables with the table lock held for reading."""
    def locked(self, *args, **kwargs):
        lock = self._lock
        lock.acquire_read()
        try:
            return method(self, *args, **kwargs)
        finally:
            lock.release_read()
    locked.__name__ = method.__name__
    locked.__doc__ = method.__doc__
    return locked


class _ReadBody:
    """A registration body already read (outside the table lock)."""
    __slots__ = ("parts",)

    def __init__(self, parts):
        self.parts = parts


cdef object _route_in_c(_TopicTable tt, bytes name, int form, int* status,
                        uint64_t* version):
    """The answer rt_route gives (cached, or built in C under the read lock), or
    None with ``status`` saying why (RT_PYTHON: the Python half must build it)."""
    cdef const char* p = PyBytes_AS_STRING(name)
    cdef size_t n = len(name)
    cdef const rt_blob* blob
    status[0] = RT_OK
    with nogil:
        rt_rdlock(tt.t)
        blob = rt_route(tt.t, p, n, form, status)
        version[0] = tt.t.version
    try:
        if blob != NULL:
            return PyBytes_FromStringAndSize(blob.data, blob.len)
    finally:
        with nogil:
            rt_rdunlock(tt.t)
    if status[0] == RT_NOMEM:
        raise MemoryError()
    return None


class RouteTable(_ref.RouteTable):
    __doc__ = _ref.RouteTable.__doc__.split("\n\n")[0] + """

    Compiled: the topic table and the route answers live in C behind a
    writer-preferring read/write lock; registrations are read and applied, and
    routes built, with the GIL released. Safe to use from several threads.
    """

    _bodies = _CoreBodies
    concurrent = True

    def __init__(self, **kwargs):
        self._tt = _TopicTable()
        self._lock = _TableLock()
        self._index = {}            # brokerName -> its slot in the C table
        self._slot_names = []       # slot -> brokerName, None: a free slot
        super().__init__(**kwargs)

    # ------------------------------------------------------------ writers

    _register_broker = _writes(_ref.RouteTable.register_broker)

    def register_broker(self, *args, body, now_ms, **kwargs):
        # The body is read (2 ms for 10,000 topics, the GIL released) before the
        # table lock is taken: readers wait only for the apply.
        return self._register_broker(*args, body=_ReadBody(self._read_body(body, now_ms)),
                                     now_ms=now_ms, **kwargs)

    register_broker.__doc__ = _ref.RouteTable.register_broker.__doc__
    unregister_broker = _writes(_ref.RouteTable.unregister_broker)
    scan_not_active = _writes(_ref.RouteTable.scan_not_active)
    connection_closed = _writes(_ref.RouteTable.connection_closed)
    heartbeat = _writes(_ref.RouteTable.heartbeat)
    query_data_version = _writes(_ref.RouteTable.query_data_version)
    register_topic = _writes(_ref.RouteTable.register_topic)
    delete_topic = _writes(_ref.RouteTable.delete_topic)
    wipe_write_perm = _writes(_ref.RouteTable.wipe_write_perm)
    add_write_perm = _writes(_ref.RouteTable.add_write_perm)
    forget_route = _writes(_ref.RouteTable.forget_route)

    # ------------------------------------------------------------ readers

    live_brokers = _reads(_ref.RouteTable.live_brokers)
    topic_route = _reads(_ref.RouteTable.topic_route)
    cluster_info = _reads(_ref.RouteTable.cluster_info)
    broker_member_group = _reads(_ref.RouteTable.broker_member_group)
    all_topics = _reads(_ref.RouteTable.all_topics)
    topics_by_cluster = _reads(_ref.RouteTable.topics_by_cluster)
    system_topics = _reads(_ref.RouteTable.system_topics)
    unit_topics = _reads(_ref.RouteTable.unit_topics)
    has_unit_sub_topics = _reads(_ref.RouteTable.has_unit_sub_topics)
    has_unit_sub_ununit_topics = _reads(_ref.RouteTable.has_unit_sub_ununit_topics)
    _build_route_body = _reads(_ref.RouteTable._build_route_body)

    @property
    def support_acting_master(self):
        return self._support_acting_master

    @support_acting_master.setter
    def support_acting_master(self, value):
        self._lock.acquire_write()
        try:
            _ref.RouteTable.support_acting_master.fset(self, value)
        finally:
            self._lock.release_write()

    @property
    def order_topic_conf(self):
        return self._order_topic_conf

    @order_topic_conf.setter
    def order_topic_conf(self, get):
        self._lock.acquire_write()
        try:
            self._order_topic_conf = get
            self._touch_all()
        finally:
            self._lock.release_write()

    # ------------------------------------------------------------ route cache

    @property
    def version(self):
        return (<_TopicTable>self._tt).t.version

    def cached_route_body(self, topic, legacy=False):
        """The answer built in C (cached, or built now under the topic table's read
        lock), or None: never runs the Python half (topics with mappings or an
        orderTopicConf), so any thread may ask while the table thread changes things."""
        cdef int status
        cdef uint64_t version
        return _route_in_c(self._tt, _utf8(topic), 1 if legacy else 0, &status, &version)

    def route_body(self, topic, legacy=False):
        cdef _TopicTable tt = self._tt
        cdef bytes name = _utf8(topic)
        cdef int status, form = 1 if legacy else 0
        cdef uint64_t version
        body = _route_in_c(tt, name, form, &status, &version)
        if body is not None or status != RT_PYTHON:
            return body
        body = self._build_route_body(topic, legacy)
        cdef const char* p = PyBytes_AS_STRING(name)
        cdef size_t n = len(name)
        cdef const char* bp
        cdef size_t bn
        if body is not None:
            bp, bn = PyBytes_AS_STRING(body), len(body)
            with nogil:
                rt_rdlock(tt.t)
                rt_store(tt.t, p, n, form, bp, bn, version)
                rt_rdunlock(tt.t)
        return body

    def cached_topics(self, legacy=False):
        cdef _TopicTable tt = self._tt
        cdef rt_topic* e
        cdef size_t i
        cdef int form = 1 if legacy else 0
        cdef list found = []
        with nogil:
            rt_rdlock(tt.t)
        try:
            for i in range(tt.t.mask + 1):
                e = tt.t.buckets[i]
                while e != NULL:
                    if e.body[form] != NULL:
                        found.append(_unutf8(e.name, e.len))
                    e = e.next
        finally:
            with nogil:
                rt_rdunlock(tt.t)
        return set(found)

    # ------------------------------------------------------------ primitives

    def _set_python_routes(self):
        (<_TopicTable>self._tt).t.python_routes = bool(
            self._mappings or self._order_topic_conf is not None)

    def _touch(self, topics):
        cdef _TopicTable tt = self._tt
        if not topics:
            return
        names = [_utf8(t) for t in topics]
        with nogil:
            rt_wrlock(tt.t)
        try:
            for name in names:
                rt_forget(tt.t, PyBytes_AS_STRING(name), len(name))
            self._set_python_routes()
        finally:
            with nogil:
                rt_wrunlock(tt.t)

    def _touch_all(self):
        cdef _TopicTable tt = self._tt
        with nogil:
            rt_wrlock(tt.t)
            rt_forget(tt.t, NULL, 0)
        try:
            self._set_python_routes()
        finally:
            with nogil:
                rt_wrunlock(tt.t)

    def _broker(self, str name):
        """The broker's slot in the C table (a new one gets its data at once)."""
        b = self._index.get(name)
        return self._push_broker(name) if b is None else b

    def _touch_broker(self, broker_name):
        # A broker without a slot has no QueueData: only a registered one needs one.
        b = self._index.get(broker_name)
        if b is not None:
            self._push_broker(broker_name, b)
        elif broker_name in self._brokers:
            self._push_broker(broker_name)

    def _push_broker(self, str broker_name, b=None):
        """Push the broker's encoded BrokerData (or its absence) to its slot (b
        None: to a new one), which drops the answers of the broker's topics; an
        unregistered broker without QueueData gives its slot back. The slot, or
        None when given back."""
        cdef _TopicTable tt = self._tt
        cdef int32_t bi = -1 if b is None else b
        cdef int rc = 0, released = 0, python_only = 0
        cdef const char* sp = NULL
        cdef const char* lp = NULL
        cdef size_t sn = 0, ln = 0
        bd = self._brokers.get(broker_name)
        std = legacy = None
        if bd is not None:
            d = bd.to_dict()
            std = _broker_data_json(d, False)
            legacy = _broker_data_json(d, True)
            sp, sn = PyBytes_AS_STRING(std), len(std)
            lp, ln = PyBytes_AS_STRING(legacy), len(legacy)
            # Routes with filter servers or an acting-master rewrite are built by
            # the reference code (rare: filter servers are gone from 5.x).
            python_only = bool(
                (bd.addrs and _ref.MASTER_ID not in bd.addrs and bd.enable_acting_master)
                or any((bd.cluster, a) in self._filters for a in bd.addrs.values()))
        cdef bytes qs = _qd_prefix(broker_name, False)
        cdef bytes ql = _qd_prefix(broker_name, True)
        cdef const char* qsp = PyBytes_AS_STRING(qs)
        cdef const char* qlp = PyBytes_AS_STRING(ql)
        cdef size_t qsn = len(qs), qln = len(ql)
        cdef uint32_t jhash = _ref._java_spread_hash(broker_name)
        cdef bint new = b is None
        with nogil:
            rt_wrlock(tt.t)
            if new:
                bi = rt_new_broker(tt.t)
            if bi == RT_NOMEM:
                rc = RT_NOMEM
            else:
                rc = rt_set_broker(tt.t, bi, sp, sn, lp, ln, qsp, qsn, qlp, qln, jhash,
                                   python_only)
                # A new slot is given back at once when its data did not fit; an
                # old one once its broker is gone (a new one may get QueueData
                # next: register_topic's broker).
                if (rc == RT_NOMEM) if new else (rc == 0):
                    released = rt_release_broker(tt.t, bi)
            rt_wrunlock(tt.t)
        if rc == RT_NOMEM:
            raise MemoryError()
        if new:
            self._index[broker_name] = bi
            if bi == len(self._slot_names):
                self._slot_names.append(broker_name)
            else:
                self._slot_names[bi] = broker_name
        elif released:
            self._forget_slot(broker_name, bi)
            return None
        return bi

    def _forget_slot(self, broker_name, b):
        del self._index[broker_name]
        self._slot_names[b] = None

    def _broker_slots(self):
        """(slots in use, slots ever used) of the C table, and the broker names
        holding a slot: for tests."""
        cdef _TopicTable tt = self._tt
        cdef int32_t used, total
        with nogil:
            rt_rdlock(tt.t)
            used, total = tt.t.nbrokers - tt.t.nfree, tt.t.nbrokers
            rt_rdunlock(tt.t)
        return used, total, set(self._index)

    def _hash_stats(self):
        """{"topics", "buckets", "max_chain"} of the C topic table: for tests."""
        cdef _TopicTable tt = self._tt
        cdef rt_topic* e
        cdef size_t i, chain, longest = 0, count, buckets
        with nogil:
            rt_rdlock(tt.t)
            count, buckets = tt.t.count, tt.t.mask + 1
            for i in range(buckets):
                chain = 0
                e = tt.t.buckets[i]
                while e != NULL:
                    chain += 1
                    e = e.next
                if chain > longest:
                    longest = chain
            rt_rdunlock(tt.t)
        return {"topics": count, "buckets": buckets, "max_chain": longest}

    def _qmap(self, topic):
        cdef _TopicTable tt = self._tt
        cdef bytes name = _utf8(topic)
        cdef rt_topic* e
        cdef int32_t i
        cdef list qds = []
        with nogil:
            rt_rdlock(tt.t)
        try:
            e = rt_find(tt.t, PyBytes_AS_STRING(name), len(name))
            if e == NULL:
                return None
            for i in range(e.nqd):
                qds.append((e.qds[i].broker, e.qds[i].perm, e.qds[i].read, e.qds[i].write,
                            e.qds[i].sysflag))
        finally:
            with nogil:
                rt_rdunlock(tt.t)
        names = self._slot_names
        return {names[b]: _ref._queue_data(names[b], read, write, perm, flag)
                for b, perm, read, write, flag in qds}

    def _entries(self, want_flags=False, members=None):
        """(seq, topic, first flag) of every topic (optionally only those with
        queue data on a broker index in ``members``), in insertion order."""
        cdef _TopicTable tt = self._tt
        cdef rt_topic* e
        cdef size_t i
        cdef int32_t k, small[64]
        cdef int32_t* order
        cdef list out = []
        with nogil:
            rt_rdlock(tt.t)
        try:
            for i in range(tt.t.mask + 1):
                e = tt.t.buckets[i]
                while e != NULL:
                    if e.nqd and members is not None:
                        for k in range(e.nqd):
                            if e.qds[k].broker in members:
                                break
                        else:
                            e = e.next
                            continue
                    flag = None
                    if want_flags and e.nqd:
                        if e.nqd <= 64:
                            order = &small[0]
                        else:
                            order = <int32_t*>malloc(e.nqd * sizeof(int32_t))
                        if order == NULL:
                            raise MemoryError()
                        rt_java_order(tt.t, e, order)
                        flag = e.qds[order[0]].sysflag
                        if order != &small[0]:
                            free(order)
                    out.append((e.seq, _unutf8(e.name, e.len), flag))
                    e = e.next
        finally:
            with nogil:
                rt_rdunlock(tt.t)
        out.sort()
        return out

    def _topic_names(self):
        return [t for _, t, _ in self._entries()]

    def _first_flags(self):
        return [(t, flag) for _, t, flag in self._entries(True) if flag is not None]

    def _topics_of_brokers(self, names):
        members = {self._index[n] for n in names if n in self._index}
        return [t for _, t, _ in self._entries(False, members)] if members else []

    def _read_body(self, body, now_ms):
        cdef rb_body scanned
        cdef int rc
        cdef const char* dp
        cdef size_t dn
        if isinstance(body, _ReadBody):
            return body.parts
        if isinstance(body, (bytes, bytearray, memoryview)):
            data = bytes(body)
            dp, dn = PyBytes_AS_STRING(data), len(data)
            with nogil:
                rc = rb_scan_register_body(dp, dn, &scanned)
            if rc == RB_NOMEM:
                raise MemoryError()
            if rc == RB_SLOW and is_zlib(<const uint8_t*>dp, dn):
                # The compressed form: inflated (bounded as decode_register_broker_body
                # bounds it), then scanned like the JSON form, without a Python
                # object per topic; the records point into the inflated bytes.
                data = inflate(data, DEFAULT_MAX_INFLATED)
                dp, dn = PyBytes_AS_STRING(data), len(data)
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
        dv, table, mappings, filters = _ref.RouteTable._read_body(self, body, now_ms)
        return dv, _configs_from_dict(table), mappings, filters

    def _apply_topic_configs(self, broker_name, _Configs configs, *, force, readonly,
                             delete_missing):
        cdef _TopicTable tt = self._tt
        cdef int32_t b = self._broker(broker_name)
        cdef int rc = 0, taken = 0, f = bool(force), ro = bool(readonly)
        cdef int dm = bool(delete_missing)
        cdef size_t differ, k, m
        cdef int step
        cdef uint8_t* only = <uint8_t*>malloc(max(configs.n, 1))
        if only == NULL:
            raise MemoryError()
        try:
            with nogil:
                # Compare under the read lock (route queries go on); take the write
                # lock only for what changes: a periodic re-registration with a new
                # DataVersion and the same topics never blocks a query.
                rt_rdlock(tt.t)
                differ = rt_apply_diff(tt.t, b, configs.recs, configs.n, f, ro, only, &taken)
                rt_rdunlock(tt.t)
                if dm:
                    # Not only the records found different: Java deletes by key, then
                    # creates by topicName, so a record keyed otherwise than its name
                    # brings back a topic the deletion removed.
                    rt_wrlock(tt.t)
                    rc = rt_apply(tt.t, b, configs.recs, configs.n, f, ro, dm, NULL)
                    rt_wrunlock(tt.t)
                    if rc == 1:
                        taken = 1
                elif differ:
                    # In slices, each under the write lock on its own: a route query
                    # waits for one slice at most, never for a whole large table.
                    k = 0
                    while k < configs.n and rc != RT_NOMEM:
                        m = min(APPLY_SLICE, configs.n - k)
                        rt_wrlock(tt.t)
                        step = rt_apply(tt.t, b, configs.recs + k, m, f, ro, 0, only + k)
                        rt_wrunlock(tt.t)
                        if step != 0:
                            rc = step
                        k += m
        finally:
            free(only)
        if rc == RT_NOMEM:
            raise MemoryError()
        return bool(taken)

    def _put_queue_data(self, topic, qd):
        cdef _TopicTable tt = self._tt
        cdef bytes name = _utf8(topic)
        cdef rt_qd q
        cdef int rc
        q.broker = self._broker(qd["brokerName"])
        q.perm, q.read, q.write, q.sysflag = (qd["perm"], qd["readQueueNums"],
                                              qd["writeQueueNums"], qd["topicSysFlag"])
        cdef const char* np = PyBytes_AS_STRING(name)
        cdef size_t nn = len(name)
        with nogil:
            rt_wrlock(tt.t)
            rc = rt_put(tt.t, np, nn, &q)
            rt_wrunlock(tt.t)
        if rc == RT_NOMEM:
            raise MemoryError()
        return rc == 1

    def _remove_queue_data(self, topic, broker_name):
        cdef _TopicTable tt = self._tt
        cdef bytes name = _utf8(topic)
        cdef int rc, released
        b = self._index.get(broker_name)
        if b is None:
            return False
        cdef int32_t bi = b
        cdef const char* np = PyBytes_AS_STRING(name)
        cdef size_t nn = len(name)
        with nogil:
            rt_wrlock(tt.t)
            rc = rt_remove(tt.t, np, nn, bi)
            released = rt_release_broker(tt.t, bi)
            rt_wrunlock(tt.t)
        if released:
            self._forget_slot(broker_name, bi)
        return rc == 1

    def _remove_topic_by_broker_name(self, broker_name):
        cdef _TopicTable tt = self._tt
        cdef size_t n
        cdef int released
        b = self._index.get(broker_name)
        if b is None:
            return
        cdef int32_t bi = b
        with nogil:
            rt_wrlock(tt.t)
            n = rt_remove_broker(tt.t, bi)
            released = rt_release_broker(tt.t, bi)
            rt_wrunlock(tt.t)
            if n >= TRIM_AFTER_QUEUE_DATAS:
                rt_trim()
        if released:
            self._forget_slot(broker_name, bi)

    def _operate_write_perm(self, broker_name, wipe):
        cdef _TopicTable tt = self._tt
        cdef size_t n
        cdef int w = bool(wipe)
        b = self._index.get(broker_name)
        if b is None:
            return 0
        cdef int32_t bi = b
        with nogil:
            rt_wrlock(tt.t)
            n = rt_write_perm(tt.t, bi, w)
            rt_wrunlock(tt.t)
        return n



# ---------------------------------------------------------------- serving

cdef Py_ssize_t serve_cached_routes(const uint8_t* p, Py_ssize_t n, Py_ssize_t max_frame,
                                    _TopicTable tt, WBuf* b, Py_ssize_t limit) except -1:
    """Answer the complete GET_ROUTEINFO_BY_TOPIC frames at the start of p[:n] from
    the table (cached, or built in C), the GIL released and the read lock held for
    the whole run; stop at the first frame that needs Python (another request, a
    header the scanner leaves to the general decoder, a topic without an answer
    in C, a bad length) or when the answers reach ``limit``. Returns the bytes
    consumed."""
    cdef Py_ssize_t pos = 0, need = 0
    cdef int32_t length
    cdef int status, legacy
    cdef rq_route req
    cdef const rt_blob* blob
    while True:
        need = 0
        with nogil:
            rt_rdlock(tt.t)
            while n - pos >= 4 and (limit < 0 or b.len < limit):
                length = be32(p + pos)
                if length < 0 or <Py_ssize_t>length + 4 > max_frame or n - pos - 4 < length:
                    break
                if not rq_scan_route(p + pos + 4, length, &req):
                    break
                legacy = 0 if req.version >= V4_9_4 or req.accept_standard else 1
                blob = rt_route(tt.t, req.topic, req.topic_len, legacy, &status)
                if blob == NULL:
                    break
                need = rq_route_answer_size(&req, blob.len)
                if b.len + need > b.cap:
                    break
                b.len += rq_write_route_answer(b.data + b.len, b.cap - b.len, &req,
                                               blob.data, blob.len)
                need = 0
                pos += 4 + length
            rt_rdunlock(tt.t)
        if need == 0:
            return pos
        wb_grow(b, need)
