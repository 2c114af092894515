"""The iteration order of Java's hash tables of string keys (OpenJDK 17): neutral
ground that the route tables' rules (rmq.namesrv.routeinfo), the KV table, both
topic-table storages and the configuration (rmq.namesrv.config, for ``Properties``)
import.

Java's answers list its tables in iteration order, which no contract fixes but which
rmq reproduces so that its answers compare byte for byte with Java's:

- ``HashMap``/``HashSet`` (``java_hash_order``, ``JavaHashKeys``): by bucket
  (``hash & (table size - 1)``), then by insertion within a bucket. A resize splits
  each bucket keeping that relative order, a removal unlinks, a re-insertion goes to
  the end of its bucket; the table never shrinks, so its size follows the most keys
  the map ever held.
- ``ConcurrentHashMap`` (``ConcurrentTable``, ``JavaConcurrentKeys``): by bucket too,
  new keys at the end of their bucket, but its table is sized otherwise (``new
  ConcurrentHashMap<>(n)`` makes ``tableSizeFor(1 + n / 0.75)`` buckets, not
  ``tableSizeFor(n)``), it grows when the count *reaches* 3/4 of the table (a
  HashMap when it exceeds it), and a resize (``transfer``) does not keep the order
  within a bucket: the tail run of keys bound for the same half stays as it was and
  the keys before it are pushed in front, reversed. So the order depends on which
  keys shared a bucket at each resize, i.e. on the insertion and removal history.

Not emulated (Java's order then differs; rmq's answers stay correct): what Java does
to a bucket that reaches 8 keys, rare at a load of at most 3/4 (keys sharing a
String.hashCode; among tens of thousands of similar names, a bucket or two). Below 64
buckets the whole table then grows early; from 64 on the bucket becomes a red-black
tree, whose new keys go after their tree parent (``HashMap``) or in front
(``ConcurrentHashMap``), and which resizes without the reversal; whether a removal
turns it back into a list depends on the tree's shape.
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from types import ModuleType
from typing import Generic, TypeVar

__all__ = ["java_spread_hash", "java_long_spread_hash", "java_hash_order",
           "java_string_order", "hash_map_table_size", "concurrent_table_size",
           "hash_set_copy_table_size", "JavaHashKeys", "ConcurrentTable",
           "JavaConcurrentKeys", "java_route_orders", "java_properties_order"]

_MAXIMUM_CAPACITY = 1 << 30
_DEFAULT_CAPACITY = 16


_the_core: ModuleType | None = None


def _core() -> ModuleType:
    """The implementation's core (rmq._impl's choice), with the kernels of this model
    (``java_spread_hash``, ``concurrent_resizes``): looked up on first use, as
    rmq.fallback imports this module."""
    global _the_core
    if _the_core is None:
        from rmq._impl import core
        _the_core = core
    return _the_core


def java_spread_hash(s: str) -> int:
    """``HashMap.hash(key)`` of a Java String: ``h ^ (h >>> 16)`` of ``String.hashCode``
    (over UTF-16 code units), as an unsigned 32-bit int (the core's, compiled or not)."""
    spread: Callable[[str], int] = _core().java_spread_hash
    return spread(s)


def java_long_spread_hash(v: int) -> int:
    """``HashMap.hash`` of a ``Long`` (``Long.hashCode`` is ``(int) (v ^ (v >>> 32))``)."""
    v &= 0xFFFFFFFFFFFFFFFF
    h = (v ^ (v >> 32)) & 0xFFFFFFFF
    return h ^ (h >> 16)


def java_string_order(s: str) -> bytes:
    """A sort key of ``String.compareTo`` (a ``TreeMap``'s order): it compares UTF-16
    code units, which big-endian UTF-16 bytes keep. Code-point order (Python's) is
    the same for strings without characters above U+FFFF or in U+E000..U+FFFF."""
    return s.encode("utf-16-be", "surrogatepass")


def _table_size_for(c: int) -> int:
    """``HashMap.tableSizeFor``: the smallest power of two at least ``c`` (at least 1)."""
    if c >= _MAXIMUM_CAPACITY:
        return _MAXIMUM_CAPACITY
    return 1 if c <= 1 else 1 << (c - 1).bit_length()


def hash_map_table_size(peak: int, initial_capacity: int = _DEFAULT_CAPACITY) -> int:
    """The table size of a ``new HashMap<>(initial_capacity)`` that once held ``peak``
    keys: it doubles when its size exceeds 3/4 of the table, and never shrinks."""
    size = _table_size_for(initial_capacity)
    while peak > size * 0.75 and size < _MAXIMUM_CAPACITY:
        size <<= 1
    return size


def hash_set_copy_table_size(count: int, jdk: int = 17) -> int:
    """The table size of ``new HashSet<>(c)`` for a collection of ``count`` elements:
    up to JDK 18 ``new HashMap<>(max((int) (c.size() / .75f) + 1, 16))``, from JDK 19
    ``HashMap.newHashMap(max(c.size(), 12))``, i.e. ``ceil(n / 0.75)`` buckets asked.
    They differ when ``count / .75`` is a power of two (count 12, 24, 48, ...): there
    JDK 8 to 18 make twice the table."""
    if jdk >= 19:
        n = max(count, 12)
        asked = -(-4 * n // 3)              # ceil(n / 0.75), exact in integers
    else:
        # (int) (count / .75f) + 1: float32 division, exact for these integers as
        # count / .75 is never within float32 rounding of an integer it is not.
        asked = max(4 * count // 3 + 1, 16)
    return hash_map_table_size(count, asked)


def java_hash_order(keys: Iterable[str], initial_capacity: int = _DEFAULT_CAPACITY, *,
                    peak: int = 0) -> list[str]:
    """``keys`` (strings, in insertion order) in the iteration order of a Java
    ``HashMap``/``HashSet`` of that initial capacity filled in that order, which
    once held ``peak`` keys (at least as many as it holds): by bucket, then by
    insertion within a bucket."""
    ordered = list(keys)
    mask = hash_map_table_size(max(peak, len(ordered)), initial_capacity) - 1
    spread = _core().java_spread_hash
    return sorted(ordered, key=lambda k: spread(k) & mask)


_V = TypeVar("_V")


class _MirroredKeys(Generic[_V]):
    """The keys of a Java map or set, mirrored: ``add``/``discard`` as Java puts and
    removes them. Iterates in insertion order (cheap, for the tables' own use);
    ``java_order()`` is Java's iteration order."""

    __slots__ = ("_keys",)

    _keys: dict[str, _V]

    def discard(self, key: str) -> None:
        self._keys.pop(key, None)

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)


class JavaHashKeys(_MirroredKeys[None]):
    """The keys of a Java ``HashMap``/``HashSet`` (``new HashSet<>()``: capacity 16)."""

    __slots__ = ("_peak", "_initial")

    def __init__(self, keys: Iterable[str] = (), initial_capacity: int = _DEFAULT_CAPACITY):
        self._keys = dict.fromkeys(keys)
        self._peak = len(self._keys)
        self._initial = initial_capacity

    def add(self, key: str) -> None:
        keys = self._keys
        if key not in keys:
            keys[key] = None
            if len(keys) > self._peak:
                self._peak = len(keys)

    def java_order(self) -> list[str]:
        return java_hash_order(self._keys, self._initial, peak=self._peak)

    def __repr__(self) -> str:
        return f"JavaHashKeys({list(self._keys)!r}, peak={self._peak})"


def concurrent_table_size(initial_capacity: int | None = None) -> int:
    """The table of a ``new ConcurrentHashMap<>(initial_capacity)`` (None: ``new
    ConcurrentHashMap<>()``, 16) at its first insertion, JDK 11 and later:
    ``tableSizeFor((long) (1.0 + n / 0.75f))``, e.g. 2,048 for 1,024 and 256 for 128.
    (JDK 8's ``tableSizeFor(n + n/2 + 1)`` gives the same for a power of two, as
    RocketMQ's capacities are, but not for 11, say: 32 where JDK 17 makes 16.)"""
    if initial_capacity is None:
        return _DEFAULT_CAPACITY
    n = max(initial_capacity, 1)        # concurrencyLevel 1: at least one bin
    # 1.0 + (float) n / 0.75f: n / 0.75 is k + 1/3 or k + 2/3 or exact, never within
    # float32 rounding of the integer above it (below 2**22), so this is its floor.
    return _table_size_for(4 * n // 3 + 1)


class ConcurrentTable:
    """The bucket layout of a Java ``ConcurrentHashMap`` with string keys: its table
    size, and the order of the buckets whose resizes reordered them.

    Keys are given with a *sequence number*: increasing with each insertion, new for
    a key removed and inserted again (a storage's insertion order). A bucket's keys
    are in sequence order but where a resize reordered the bucket: its keys present
    then (still present since, hence with the same sequence number) keep the order
    the resize gave them (their *placing*, by sequence number), ahead of the later
    ones. ``order`` sorts by that.

    ``grow`` replays the resizes Java makes as keys are inserted; call it after every
    change that inserted keys, with the count then and a function listing every key's
    sequence number and java_spread_hash (in sequence order). It is exact when,
    between two calls, no key was removed after a key was inserted (Java's
    registrations remove first), and when the count before the change was below
    ``threshold`` (the previous call saw to it). The replay runs in the core
    (``concurrent_resizes``: over a million topics, in C).
    """

    __slots__ = ("size", "_placed")

    def __init__(self, initial_capacity: int | None = None):
        self.size = concurrent_table_size(initial_capacity)
        self._placed: dict[int, int] = {}     # seq -> rank in its bucket

    @property
    def threshold(self) -> int:
        """The count at which the table doubles (``sizeCtl``: 3/4 of it)."""
        return self.size - (self.size >> 2)

    def sort_key(self, key: str, seq: int) -> tuple[int, int, int]:
        """(bucket, 0, rank) of a key a resize placed, else (bucket, 1, seq)."""
        bucket = java_spread_hash(key) & (self.size - 1)
        rank = self._placed.get(seq)
        return (bucket, 1, seq) if rank is None else (bucket, 0, rank)

    def forget_absent(self, seqs: Iterable[int]) -> None:
        """Forget the placings of keys no longer in the map (``seqs``: the sequence
        numbers of every key now); a key back since has a new one."""
        placed = self._placed
        self._placed = {seq: placed[seq] for seq in seqs if seq in placed}

    def order(self, entries: Iterable[tuple[int, str]]) -> list[str]:
        """The keys of ``entries`` (``(seq, key)``, any subset of the map's) in Java's
        iteration order."""
        mask, spread, placed = self.size - 1, _core().java_spread_hash, self._placed.get
        keyed = []
        for seq, key in entries:       # sort_key, inlined: answers sort every topic
            rank = placed(seq)
            keyed.append((spread(key) & mask, 1, seq, key) if rank is None
                         else (spread(key) & mask, 0, rank, key))
        keyed.sort()
        return [e[3] for e in keyed]

    def grow(self, count: int,
             entries: Callable[[], tuple[array[int], array[int]]]) -> None:
        """Replay the resizes of the insertions that brought the map to ``count`` keys
        (``entries()``: the sequence numbers and the java_spread_hash of every key,
        in sequence order; asked only when some resize happened). The resize at each
        threshold moved the keys present at that insertion: the ``threshold`` first
        in sequence order, since the keys inserted before it are still there and
        those after it came after."""
        if count < self.threshold or self.size >= _MAXIMUM_CAPACITY:
            return
        seqs, hashes = entries()
        self.size, self._placed = _core().concurrent_resizes(self.size, seqs, hashes,
                                                             self._placed)


class JavaConcurrentKeys(_MirroredKeys[int]):
    """The keys of a Java ``ConcurrentHashMap``, each with its insertion's number."""

    __slots__ = ("_next", "_table")

    def __init__(self, initial_capacity: int | None = None, keys: Iterable[str] = ()):
        self._keys = {}
        self._next = 0
        self._table = ConcurrentTable(initial_capacity)
        for key in keys:
            self.add(key)

    def add(self, key: str) -> None:
        seqs = self._keys
        if key not in seqs:
            seqs[key] = self._next
            self._next += 1
            if len(seqs) >= self._table.threshold:
                self._table.grow(len(seqs), self._hashed)

    def _entries(self) -> list[tuple[int, str]]:
        return [(s, k) for k, s in self._keys.items()]

    def _hashed(self) -> tuple[array[int], array[int]]:
        spread = _core().java_spread_hash
        return array("Q", self._keys.values()), array("I", map(spread, self._keys))

    @property
    def table_size(self) -> int:
        return self._table.size

    def java_order(self) -> list[str]:
        return self._table.order(self._entries())

    def __repr__(self) -> str:
        return f"JavaConcurrentKeys({list(self._keys)!r}, table={self._table.size})"


def java_route_orders(history: Iterable[tuple[str, str]],
                      jdk: int = 17) -> tuple[list[str], list[str]]:
    """The broker orders of a 5.0.0 GET_ROUTEINFO_BY_TOPIC answer
    (``RouteInfoManager.pickupTopicRouteData``): ``(queueDatas, brokerDatas)``.

    ``history``: the changes of the topic's ``queueDataMap`` (``new HashMap<>()``,
    brokerName -> QueueData), ``("put", name)`` or ``("remove", name)``, in order (a put
    of a present name replaces its value in place). ``queueDatas`` is ``new
    ArrayList<>(queueDataMap.values())``: the map's order. ``brokerDatas`` follows
    ``new HashSet<>(queueDataMap.keySet())``: the same keys re-bucketed in a table
    sized by ``hash_set_copy_table_size`` (JDK-dependent), ties in the map's order.
    Brokers without BrokerData are skipped in brokerDatas only (not modelled here)."""
    keys = JavaHashKeys()
    for op, name in history:
        if op == "put":
            keys.add(name)
        elif op == "remove":
            keys.discard(name)
        else:
            raise ValueError(f"unknown queueDataMap change {op!r}")
    queue_datas = keys.java_order()
    size = hash_set_copy_table_size(len(queue_datas), jdk)
    broker_datas = java_hash_order(queue_datas, size)
    return queue_datas, broker_datas


#: ConcurrentHashMap: a bin that already holds this many keys is made a tree (or, in a
#: table of fewer than 64 bins, the table grows instead) when one more lands in it.
_TREEIFY_THRESHOLD = 8


def java_properties_order(keys: Iterable[str]) -> list[str]:
    """``keys`` (strings, in insertion order; a repeated one keeps its first place) in
    the iteration order of a ``java.util.Properties`` filled in that order, as on Java 9
    and later (the JVM of the 5.0.0 vectors), where ``Properties`` keeps its entries in
    a ``new ConcurrentHashMap<>(8)``: a JavaConcurrentKeys.

    Bins stay lists here: a key landing in a bin that already holds 8 (where Java
    makes a tree, or grows the table early) raises ValueError. rmq's configuration
    keys never fill one (tests/test_config.py checks it)."""
    table = JavaConcurrentKeys(8)
    size, counts = 0, Counter[int]()
    for key in keys:
        if key in table:
            continue
        if table.table_size != size:            # a resize: count the bins afresh
            size = table.table_size
            counts = Counter(java_spread_hash(k) & (size - 1) for k in table)
        bucket = java_spread_hash(key) & (size - 1)
        if counts[bucket] >= _TREEIFY_THRESHOLD:
            raise ValueError(f"{key!r} lands in a ConcurrentHashMap bin of "
                             f"{counts[bucket]} keys: Java would make it a tree")
        counts[bucket] += 1
        table.add(key)
    return table.java_order()
