"""Views of what the last replay wrote, taken standing aside: recorded late, or not at all.

A server copies each result out right after its replay (``out[:n].clone()``).
Recording that view and that copy cost a served step more than the rest of
the check, and neither can matter to a rule while no replay comes between: the
view is of the result's current epoch (rule 13 reports a view read after a
later replay), the bytes are the ones the replay left (rule 11 needs another
graph's replay in between), and the copy writes fresh memory. So the memory
watch hands such a view here (``take``) and runs a ``clone`` of it unrecorded
(``fresh``). Before the next record that could read it (a replay, a capture's
begin, any other recorded call: ``settle``), each view the program still holds
is recorded as it was taken, and one it let go of only where the program still
holds a view of the same pointer and shape recorded before (rule 13 compares
such views epoch by epoch).

Only a basic-index view (``out[:n]``) of a tensor that is no view itself (the
graph's own output: a view of a view keeps its base's epoch), lying wholly on
the results of the graph replayed last (``current``), is taken.
"""

from __future__ import annotations

import sys
import weakref
from typing import Callable

import torch

from gpu_demo.guard.record import tensor_reads
from gpu_demo.guard.record.memory_watch import Ranges

Geometry = tuple[int, tuple[int, ...]]
_is_view, _ptr, _shape = torch._C.TensorBase._is_view, tensor_reads.data_ptr, tensor_reads.shape
# References to a taken view while ``settle`` looks at it: its pair in the list, the loop's name, getrefcount's argument.
_OURS = 3
HELD_SWEEP = 4096   # geometries of held views kept before the dead ones' are dropped


class FreshViews:
    """The views taken since the last replay, and where the last replay's results lie."""

    def __init__(self, record_view: Callable[[torch.Tensor, torch.Tensor], None]) -> None:
        self.current = Ranges()   # the results of the graph replayed last (``replayed``)
        self._views: list[tuple[torch.Tensor, torch.Tensor]] = []   # (view, base), taken since
        self._held: dict[Geometry, weakref.ref] = {}   # a view the program held at a settle, per geometry
        self._record = record_view
        self._results: dict[int, Ranges] = {}

    def replayed(self, graph: int, results: Callable[[], list[tuple[int, int]]]) -> None:
        """Graph ``graph`` replayed (its records settled before): its results are current now."""
        ranges = self._results.get(graph)
        if ranges is None:
            ranges = self._results[graph] = Ranges(results())
        self.current = ranges

    def take(self, base: torch.Tensor, view: torch.Tensor) -> bool:
        """Keep ``view`` of ``base`` unrecorded until the next ``settle``, if it lies on the current
        results and ``base`` is no view; False: record it now."""
        current = self.current
        if not current or _is_view(base):
            return False
        ptr = _ptr(base)
        nbytes = tensor_reads.extent_bytes(base)
        if ptr == 0 or not current.holds(ptr, nbytes):
            return False
        self._views.append((view, base))
        return True

    def fresh(self, t: torch.Tensor) -> bool:
        """Is ``t`` a view taken since the last replay (reading it reads the current epoch)?"""
        for view, _ in self._views:
            if view is t:
                return True
        return False

    def record(self, base: torch.Tensor, view: torch.Tensor) -> None:
        """Record ``view`` of ``base`` now; while the program holds it, later views of its geometry count."""
        self._record(base, view)
        held = self._held
        if len(held) >= HELD_SWEEP:
            self._held = held = {geometry: ref for geometry, ref in held.items() if ref() is not None}
        held[(_ptr(view), tuple(_shape(view)))] = weakref.ref(view)

    def settle(self) -> None:
        """Record the views taken since the last replay that a rule could still need."""
        if not self._views:
            return
        views, self._views = self._views, []
        held = self._held
        for view, base in views:
            if sys.getrefcount(view) > _OURS:   # the program holds it: a later read may be of an old epoch
                self.record(base, view)
            else:
                geometry = (_ptr(view), tuple(_shape(view)))
                ref = held.get(geometry)
                if ref is not None:
                    if ref() is not None:   # an earlier one of this geometry is held: this epoch's counts
                        self._record(base, view)
                    else:
                        del held[geometry]
