"""Frees of the blocks graphs use, seen without the runtime's reports: their storages' deaths.

Standing aside, the recorder still needs the free of each block a graph uses
outside its pool (a static input, a weight: rule 10), and nothing else the
runtime reports. The caching allocator frees such a block when the storage on
it dies, and PyTorch keeps one Python object per storage for as long as the
storage lives (views and tensors the program dropped included), so a weak
reference to that object, with a callback, fires when the block is freed: no
report per allocation for that. (A storage resized in place moves without
dying: ``MutationWatch.resizing`` sees that.) Where a watched span lies on no
storage a live tensor holds (the block is gone already, or only C++ holds it),
the watch does not cover it, and the reports must stay on.
"""

from __future__ import annotations

import bisect
import functools
import weakref
from typing import Callable, Iterable

import torch

from gpu_demo.guard.record.memory_watch import Ranges

Span = tuple[int, int]


class FreeWatch:
    """Calls ``on_freed(block address)`` when a storage under the watched spans dies.

    Asked again at every capture's end, it looks only at what changed since: new spans, spans
    no storage covered, and spans whose storage died or stopped being followed."""

    def __init__(self, on_freed: Callable[[int], object]) -> None:
        self.covers = False   # every span of the last ``watch`` lies on a storage followed
        self.uncovered: list[Span] = []   # the last ``watch``'s spans on no storage followed: why the reports stay on
        self._on_freed = on_freed
        self._refs: dict[int, tuple[weakref.ref | None, int]] = {}   # block -> (its storage, None once freed; bytes)
        self._ptrs: list[int] = []   # ``_refs``' keys, sorted
        self._spans: set[Span] = set()   # the last ``watch``'s spans
        self._cover: dict[Span, int] = {}   # each covered span -> the block that covers it
        self._dead: list[int] = []   # blocks freed since the last ``watch``

    def watch(self, spans: Iterable[Span], tensors: Callable[[], Iterable[torch.Tensor]]) -> bool:
        """Follow the storages under ``spans``, found among ``tensors()`` (asked only for spans not
        followed yet); whether every span lies on one (``covers``)."""
        spans = list(spans)
        now = set(spans)
        if self._spans - now:   # some no longer watched: the storages only they lie on go too
            wanted = Ranges(spans)
            dropped = [p for p, (ref, nbytes) in self._refs.items() if ref is None or not wanted.touches(p, nbytes)]
        else:
            dropped = [p for p in self._dead if p in self._refs and self._refs[p][0] is None]
        self._dead = []
        for ptr in dropped:
            del self._refs[ptr]   # a block there now is another storage
        if dropped:
            self._ptrs = sorted(self._refs)
        refs, cover = self._refs, self._cover
        again = [span for span in now if cover.get(span) not in refs]   # new, uncovered, or their block went
        for span in list(cover):
            if span not in now or cover[span] not in refs:
                del cover[span]
        missing = [span for span in again if not self._covers(span)]
        if missing:
            lost = Ranges(missing)
            for t in tensors():
                try:
                    storage = t.untyped_storage()
                    ptr, nbytes = storage.data_ptr(), storage.nbytes()
                except (RuntimeError, NotImplementedError):   # no storage (a tracing tensor)
                    continue
                if ptr and ptr not in refs and lost.touches(ptr, nbytes):
                    refs[ptr] = (weakref.ref(storage, functools.partial(self._died, ptr)), nbytes)
            self._ptrs = sorted(refs)
        self.uncovered = [span for span in missing if not self._covers(span)]
        self._spans = now
        self.covers = not self.uncovered
        return self.covers

    def stop(self) -> None:
        """Follow nothing (the recording ended): no callback fires from now on."""
        self._refs.clear()
        self._ptrs = []
        self._spans, self._cover, self._dead = set(), {}, []
        self.covers = False
        self.uncovered = []

    def _covers(self, span: Span) -> bool:
        """Does a followed block hold all of ``span`` (noted in ``_cover``)?"""
        lo, hi = span
        i = bisect.bisect_right(self._ptrs, lo) - 1
        if i >= 0 and self._ptrs[i] + self._refs[self._ptrs[i]][1] >= hi:
            self._cover[span] = self._ptrs[i]
            return True
        return False

    def _died(self, ptr: int, ref: weakref.ref) -> None:
        kept = self._refs.get(ptr)
        if kept is not None and kept[0] is ref:
            self._refs[ptr] = (None, kept[1])
            self._dead.append(ptr)
            self._on_freed(ptr)
