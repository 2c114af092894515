"""Java ``HashMap``/``HashSet`` iteration order of string keys: neutral ground that the
route tables' rules (rmq.namesrv.routeinfo) and both topic-table storages import."""

from collections.abc import Iterable
from functools import lru_cache

__all__ = ["java_spread_hash", "java_hash_order", "java_string_order"]


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
