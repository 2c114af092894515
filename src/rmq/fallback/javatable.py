"""Java's hash tables of string keys, the kernels rmq.javaorder's model of their
iteration order runs over every topic name: pure-Python twin of the compiled core's
(src/_core/javatable.pxi, javatable.c)."""

from __future__ import annotations

import functools
import sys
from array import array
from collections.abc import Sequence

__all__ = ["java_spread_hash", "concurrent_resizes"]

_UTF16_NATIVE = "utf-16-le" if sys.byteorder == "little" else "utf-16-be"   # for cast("H")

_MAXIMUM_CAPACITY = 1 << 30     # ConcurrentHashMap.MAXIMUM_CAPACITY


@functools.lru_cache(maxsize=1 << 16)      # (interpreted, a hash costs ~2 us a name)
def java_spread_hash(s: str) -> int:
    """``HashMap.hash(key)`` of a Java String: ``h ^ (h >>> 16)`` of ``String.hashCode``
    (over UTF-16 code units; a lone surrogate is its own unit), as an unsigned 32-bit
    int. ``ConcurrentHashMap.spread`` also clears the sign bit, which no table index
    ever reaches. (rmq.javaorder's tables replay Java's over every topic name.)"""
    h = 0
    for unit in memoryview(s.encode(_UTF16_NATIVE, "surrogatepass")).cast("H"):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h ^ (h >> 16)


def concurrent_resizes(size: int, seqs: array[int], hashes: array[int],
                       placed: dict[int, int]) -> tuple[int, dict[int, int]]:
    """The resizes of a Java ``ConcurrentHashMap`` that a table of ``size`` buckets
    makes when it holds the keys given (in insertion order: ``seqs``, increasing
    numbers, and ``hashes``, their java_spread_hash; buffers of unsigned 64- and
    32-bit ints): a ``transfer`` at each count reaching 3/4 of the table, of the keys
    present then. ``placed``: {seq: rank within its bucket} of the keys a resize put
    out of insertion order (others in it are ignored). Returns the new size and the
    new ``placed``."""
    if seqs.typecode != "Q" or hashes.typecode != "I":
        raise ValueError(f"arrays of 'Q' and 'I', not {seqs.typecode!r} and {hashes.typecode!r}")
    if len(seqs) != len(hashes):
        raise ValueError(f"{len(seqs)} insertion numbers but {len(hashes)} hashes")
    if size <= 0 or size & (size - 1):
        raise ValueError(f"a table size is a power of two, not {size}")
    index = {seq: i for i, seq in enumerate(seqs)}
    rank = [-1] * len(seqs)
    for seq, r in placed.items():
        i = index.get(seq)
        if i is not None:
            rank[i] = r
    while len(seqs) >= size - (size >> 2) and size < _MAXIMUM_CAPACITY:
        rank = _transfer(size, hashes, rank)
        size <<= 1
    return size, {seqs[i]: r for i, r in enumerate(rank) if r >= 0}


def _transfer(size: int, hashes: Sequence[int], rank: list[int]) -> list[int]:
    """``ConcurrentHashMap.transfer`` from ``size`` to twice that of the keys present
    at the resize, the first 3/4 x ``size`` (key i: ``hashes[i]``, ``rank[i]``): each
    bucket's last run of keys bound for the same half is moved as it is; the keys
    before it are pushed, one by one, in front of their half. The ranks after it.
    Only buckets of two keys or more can come out of insertion order."""
    mask = size - 1
    buckets: dict[int, list[int]] = {}
    for i in range(size - (size >> 2)):
        buckets.setdefault(hashes[i] & mask, []).append(i)
    fresh = [-1] * len(rank)
    for members in buckets.values():
        if len(members) < 2 or (len(members) == 2 and rank[members[0]] < 0
                                and rank[members[1]] < 0):
            continue            # two keys in insertion order: no reversal possible
        # as the table iterates them: the placed by rank, then the others by insertion
        old = sorted(members, key=lambda i: (0, rank[i], i) if rank[i] >= 0 else (1, i, i))
        bits = [hashes[i] & size for i in old]
        last_run = len(old) - 1
        while last_run > 0 and bits[last_run - 1] == bits[-1]:
            last_run -= 1
        halves: dict[int, list[int]] = {0: [], size: []}
        for i, bit in zip(old[:last_run], bits):
            halves[bit].insert(0, i)
        halves[bits[-1]] += old[last_run:]
        for half in halves.values():
            if half != sorted(half):
                for r, i in enumerate(half):
                    fresh[i] = r
    return fresh
