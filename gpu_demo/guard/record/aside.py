"""The recorder standing aside once a program serves: what it still records, and how.

From a whole-process check's first replay on, or between the captures of a
start-up's capture loop, most eager work can matter to no rule
(``gpu_demo.guard.process``). Standing aside, the recorder leaves the
dispatch stack and keeps three watches instead:

* ``memory_watch``: a torch-function mode that hands on, to be recorded op by op
  with the recorder back on the dispatch stack (``record_call``), only the calls
  whose tensors lie on memory a rule follows (a graph's live result, what a
  graph not yet replayed reads); a view of what the last replay wrote and its
  copy-out are recorded late, or not at all (``fresh_views``). It is on the
  torch-function stack only while it watches some memory: every call a program
  makes through a mode costs a Python frame (more for ``torch.nn.functional``'s
  Python-level functions), and between a start-up's captures nothing is watched;
* ``free_watch``: the frees of the blocks graphs use outside their pools, through
  their storages' deaths;
* ``report_gate``: where the free watch covers every such block, torch's GPU-trace
  reports are switched off (the ledger would only drop them), and on again for a
  capture and for each recorded call.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, Callable, Iterable

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode

from gpu_demo.guard.record import collector, hooks, op_plans, report_gate
from gpu_demo.guard.record.free_watch import FreeWatch
from gpu_demo.guard.record.fresh_views import FreshViews
from gpu_demo.guard.record.memory_watch import MemoryWatch, Ranges, install_at_bottom, uninstall

if TYPE_CHECKING:   # the recorder owns this part and imports it
    from gpu_demo.guard.record.recorder import CaptureRecorder

Span = tuple[int, int]
_Tensor = torch.Tensor
_GETITEM, _CLONE = _Tensor.__getitem__, _Tensor.clone
CLONE_KERNEL = op_plans.plan_of(torch.ops.aten.clone.default).kernel   # what a recorded ``clone`` launches
_BASIC = (int, slice, type(None), type(Ellipsis))


def _basic(index: Any) -> bool:
    """A basic index (ints, slices, ``None``, ``...``): a view of the tensor, never a kernel."""
    if type(index) is tuple:
        return all(type(i) in _BASIC or i is Ellipsis for i in index)
    return type(index) in _BASIC


class StandingAside:
    """A recorder's watches while it stands aside (none before ``stand_aside``)."""

    def __init__(self, recorder: "CaptureRecorder") -> None:
        self.memory_watch: MemoryWatch | None = None   # the calls still recorded
        self._installed = False   # the memory watch is on the torch-function stack (it watches some memory)
        self.quiet = False   # every watched free is followed by its storage: no runtime report needed
        self._frees = FreeWatch(recorder.ledger.on_freed)
        self._recorder = weakref.ref(recorder)   # the recorder owns its parts: no reference cycle
        self._journal = recorder.journal
        self.fresh = FreshViews(lambda base, view: self._recorder().viewed(base, view))
        self.copies_recorded = False   # a copy-out ties a graph's input (rule 18): ``clone`` always recorded

    def stand_aside(self, reads: Iterable[Span], frees: Iterable[Span], *, copies_recorded: bool = False) -> None:
        """From now on record only captures, replays, the calls that touch ``reads`` (address
        ranges) and the frees of blocks that touch ``frees``; called again, the ranges change.
        ``copies_recorded``: a rule follows eager ``clone`` launches (their line, where they write).
        Where every block under ``frees`` lies on a storage a live tensor holds, its death says
        when it is freed, and torch stops making reports between captures and recorded calls;
        what the ledger knew of other blocks goes then, since their frees go unseen."""
        recorder, journal, frees = self._recorder(), self._journal, list(frees)
        if self.memory_watch is None:
            self.memory_watch = MemoryWatch(self.record_call)
            collector.release()   # the program's own garbage collection again
            journal.aside = True
            journal.settle = self.fresh.settle
            if journal.eager:
                journal.eager = False
                recorder.book.leave_dispatch(entered_eagerly=True)
                recorder.ledger.route()
        self.memory_watch.ranges = Ranges(reads)
        if bool(self.memory_watch.ranges) != self._installed:
            (install_at_bottom if not self._installed else uninstall)(self.memory_watch)
            self._installed = not self._installed
        self.copies_recorded = copies_recorded
        recorder.ledger.watched_frees = Ranges(frees)
        with journal.quiet():   # its storage reads are the recorder's, not the program's calls
            self.quiet = report_gate.GATE.available and self._frees.watch(frees, recorder.handles.alive)
        if self.quiet:
            recorder.ledger.forget_unwatched()
        hooks.reroute()

    @property
    def uncovered(self) -> list[Span]:
        """The watched frees no storage follows: why the reports stay on (none while quiet)."""
        return self._frees.uncovered

    def record_call(self, func: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        """A call the watch picked: run with the recorder on the dispatch stack, recorded op by op,
        with the runtime's reports on (its frees, events and syncs are recorded too)."""
        journal = self._journal
        if journal.graph is not None or journal.watching:
            return func(*args, **kwargs)   # recorded already
        mode, fresh = self._recorder(), self.fresh
        if func is _GETITEM and not kwargs and _basic(args[1]):   # ``out[:n]``: one view, no kernel
            view = func(*args)
            if view is not args[0] and type(view) is _Tensor and not fresh.take(args[0], view):
                fresh.settle()
                fresh.record(args[0], view)
            return view
        if func is _CLONE and not kwargs and len(args) == 1 and type(args[0]) is _Tensor:   # ``out[:n].clone()``
            if not self.copies_recorded and fresh.fresh(args[0]):
                return func(*args)   # the bytes the last replay left, copied to fresh memory: no rule's business
            fresh.settle()
            if self.quiet:
                report_gate.GATE.open()
            try:
                return mode.cloned(args[0])   # one launch: recorded without the dispatch stack
            finally:
                if self.quiet:
                    report_gate.GATE.shut()
        fresh.settle()
        journal.watching += 1
        entered = _get_current_dispatch_mode() is not mode
        if entered:
            TorchDispatchMode.__enter__(mode)
        if self.quiet:
            report_gate.GATE.open()
        try:
            return func(*args, **kwargs)
        finally:
            if self.quiet:   # as ``stand_aside`` says now: a capture inside may have changed it
                report_gate.GATE.shut()
            if entered:
                TorchDispatchMode.__exit__(mode, None, None, None)
            journal.watching -= 1

    def replayed(self, graph: int, results: Callable[[], list[Span]]) -> None:
        """Graph ``graph`` replayed: ``results()`` (its results' address ranges, asked once) are current."""
        self.fresh.replayed(graph, results)

    def leave(self) -> None:
        """The recording ended: no watch left behind."""
        self.fresh.settle()
        self._frees.stop()
        self.quiet = False
        if self._installed:
            uninstall(self.memory_watch)
            self._installed = False
