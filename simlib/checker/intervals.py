"""Address ranges with a value each, found by overlap: what rule 7 follows data through."""

from __future__ import annotations

import bisect
from typing import Generic, Iterable, Iterator, TypeVar

from ..trace import DataPtr

V = TypeVar("V")


class Intervals(Generic[V]):
    """Address ranges ``[lo, hi)``, each with a value; finds the ones overlapping a range.

    Keys stay sorted, so a query bisects to the first range starting at or past
    ``hi`` and walks back only as far as the longest range could reach.
    """

    def __init__(self, items: Iterable[tuple[tuple[DataPtr, DataPtr], V]] = ()) -> None:
        self._keys: list[tuple[DataPtr, DataPtr]] = []
        self._values: dict[tuple[DataPtr, DataPtr], V] = {}
        self._longest = 0
        self.update(items)

    def update(self, items: Iterable[tuple[tuple[DataPtr, DataPtr], V]]) -> None:
        """Add many ranges at once (a later value for a range replaces an earlier). Only the new
        ranges are sorted and measured: a map that grows at every capture is not re-sorted whole."""
        values = self._values
        if not values:
            values.update(items)
            new = sorted(values)
        else:
            new = []
            for key, value in items:
                if key not in values:
                    new.append(key)
                values[key] = value
            new.sort()
        if new:
            self._keys = new if not self._keys else sorted(self._keys + new)   # two sorted runs: one merge
            self._longest = max(self._longest, max(hi - lo for lo, hi in new))

    def put(self, lo: DataPtr, hi: DataPtr, value: V) -> None:
        key = (lo, hi)
        if key not in self._values:
            bisect.insort(self._keys, key)
            if hi - lo > self._longest:   # not ``max``: a call costs more than the test, and rules put often
                self._longest = hi - lo
        self._values[key] = value

    def copy(self) -> "Intervals[V]":
        """The same ranges and values, in a map of its own (the values are not copied)."""
        twin: Intervals[V] = Intervals()
        twin._keys, twin._values, twin._longest = list(self._keys), dict(self._values), self._longest
        return twin

    def get(self, lo: DataPtr, hi: DataPtr) -> V | None:
        return self._values.get((lo, hi))

    def __contains__(self, key: tuple[DataPtr, DataPtr]) -> bool:
        return key in self._values

    def __len__(self) -> int:
        return len(self._values)

    def items(self) -> Iterator[tuple[tuple[DataPtr, DataPtr], V]]:
        return ((key, self._values[key]) for key in self._keys)

    def overlapping(self, lo: DataPtr, hi: DataPtr) -> list[tuple[tuple[DataPtr, DataPtr], V]]:
        keys, found = self._keys, []
        i = bisect.bisect_left(keys, (hi,))
        while i:
            i -= 1
            key = keys[i]
            if key[0] + self._longest <= lo:
                break                    # this range and every one starting earlier end before lo
            if key[1] > lo:
                found.append((key, self._values[key]))
        return found

    def touches(self, lo: DataPtr, hi: DataPtr) -> bool:
        """Does a range overlap ``[lo, hi)``? (It stops at the first: the nearest start is tried first.)"""
        keys = self._keys
        i = bisect.bisect_left(keys, (hi,))
        while i:
            i -= 1
            key = keys[i]
            if key[0] + self._longest <= lo:
                return False
            if key[1] > lo:
                return True
        return False

    def discard(self, lo: DataPtr, hi: DataPtr) -> None:
        """Forget the range ``[lo, hi)`` itself, if held."""
        key = (lo, hi)
        if key in self._values:
            del self._values[key]
            del self._keys[bisect.bisect_left(self._keys, key)]

    def clear(self, lo: DataPtr, hi: DataPtr) -> None:
        """Forget every range that starts in ``[lo, hi)``."""
        keys = self._keys
        if not keys:   # most maps a rule clears at each free are empty
            return
        first = bisect.bisect_left(keys, (lo,))
        if first == len(keys) or keys[first][0] >= hi:
            return
        last = bisect.bisect_left(keys, (hi,), first)
        for key in keys[first:last]:
            del self._values[key]
        del self._keys[first:last]
