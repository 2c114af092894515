"""Java ``HashMap``/``HashSet`` (and ``Properties``) iteration order of string keys:
neutral ground that the route tables' rules (rmq.namesrv.routeinfo), both topic-table
storages and the configuration (rmq.namesrv.config) import."""

from collections.abc import Iterable
from functools import lru_cache

__all__ = ["java_spread_hash", "java_hash_order", "java_string_order", "java_properties_order"]


@lru_cache(maxsize=1 << 16)
def java_spread_hash(s: str) -> int:
    """``HashMap.hash(key)`` of a Java String: ``h ^ (h >>> 16)`` of ``String.hashCode``
    (over UTF-16 code units), as an unsigned 32-bit int."""
    h = 0
    b = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(b), 2):
        h = (31 * h + ((b[i] << 8) | b[i + 1])) & 0xFFFFFFFF
    return h ^ (h >> 16)


def java_string_order(s: str) -> bytes:
    """A sort key of ``String.compareTo`` (a ``TreeMap``'s order): it compares UTF-16
    code units, which big-endian UTF-16 bytes keep. Code-point order (Python's) is
    the same for strings without characters above U+FFFF or in U+E000..U+FFFF."""
    return s.encode("utf-16-be", "surrogatepass")


def _capacity(n: int, initial: int) -> int:
    cap = initial
    while n > cap * 0.75:           # HashMap resizes when size exceeds 0.75 * capacity
        cap <<= 1
    return cap


def java_hash_order(keys: Iterable[str], initial_capacity: int = 16) -> list[str]:
    """``keys`` (strings, in insertion order) in the iteration order of a Java
    ``HashMap``/``HashSet`` of that initial capacity filled in that order: by bucket,
    then by insertion within a bucket (resizes keep that relative order)."""
    ordered = list(keys)
    mask = _capacity(len(ordered), initial_capacity) - 1
    return sorted(ordered, key=lambda k: java_spread_hash(k) & mask)


#: ConcurrentHashMap: a bin that already holds this many keys is made a tree (or, in a
#: table of fewer than 64 bins, the table grows instead) when one more lands in it.
_TREEIFY_THRESHOLD = 8


def _split_bin(chain: list[str], n: int) -> tuple[list[str], list[str]]:
    """``ConcurrentHashMap.transfer``'s split of one bin of a table of ``n`` bins into
    its low and high halves: the keys of the bin's tail that go to one half (its
    "lastRun") keep their order; each key before them is pushed in front of its half."""
    if not chain:
        return [], []
    bits = [java_spread_hash(k) & n for k in chain]
    run = len(chain) - 1
    while run > 0 and bits[run - 1] == bits[run]:
        run -= 1
    low: list[str] = []
    high: list[str] = []
    (high if bits[run] else low).extend(chain[run:])
    for k, bit in zip(chain[:run], bits[:run]):
        (high if bit else low).insert(0, k)
    return low, high


def java_properties_order(keys: Iterable[str]) -> list[str]:
    """``keys`` (strings, in insertion order; a repeated one keeps its first place) in
    the iteration order of a ``java.util.Properties`` filled in that order, as on Java 9
    and later (the JVM of the 5.0.0 vectors), where ``Properties`` keeps its entries in
    a ``ConcurrentHashMap``: 16 bins at first (``new Properties()`` asks for 8), each
    key appended to its bin, the table doubled when its size reaches 3/4 of the bins
    (each bin split as :func:`_split_bin`), then iterated bin by bin.

    Bins stay lists here: a key landing in a bin that already holds 8 (where Java
    makes a tree, or grows the table early) raises ValueError. rmq's configuration
    keys never fill one (tests/test_config.py checks it)."""
    n = 16
    bins: list[list[str]] = [[] for _ in range(n)]
    count = 0
    for k in keys:
        chain = bins[java_spread_hash(k) & (n - 1)]
        if k in chain:
            continue
        if len(chain) >= _TREEIFY_THRESHOLD:
            raise ValueError(f"{k!r} lands in a ConcurrentHashMap bin of "
                             f"{len(chain)} keys: Java would make it a tree")
        chain.append(k)
        count += 1
        if count >= n - (n >> 2):
            halves = [_split_bin(b, n) for b in bins]
            bins = [low for low, _ in halves] + [high for _, high in halves]
            n <<= 1
    return [k for chain in bins for k in chain]
