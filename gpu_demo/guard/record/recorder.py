"""Record what a real PyTorch program does as a ``simlib.trace.Trace``.

``CaptureRecorder`` is a ``TorchDispatchMode``: every aten (or custom) op the
program issues passes through it, and it writes down what the host froze at
that moment, the way a kernel launch freezes its arguments. It needs nothing
from the program: plain ``torch.cuda.Stream``, ``wait_stream``,
``torch.cuda.graph`` and Triton code is recorded as it is.

* each compute op becomes a ``Launch`` on the CUDA stream current when it was
  issued, with one ``Arg`` per tensor (stable id per Python tensor object,
  label, ``data_ptr``, numel, shape, the bytes it spans from its pointer (sizes
  and strides: ``extent_bytes``), bytes left in its storage,
  ``r``/``w``/``rw``). An op whose outputs all have zero elements launches no
  kernel in PyTorch: it becomes a ``SkippedLaunch``, still with the arguments
  the host froze;
* a Triton kernel called directly becomes a ``Launch`` named ``triton:<name>``
  (``gpu_demo.record.patches``); Triton does not say what a kernel writes, so each
  tensor argument's access is read off the kernel's source
  (``gpu_demo.record.triton_access``), ``rw`` where the source cannot be read (then
  ``meta["triton_access_unknown"]`` says why, per kernel). A host-side
  tensor descriptor stands for its ``base`` tensor;
* view ops become ``View`` records (new handle, its base, pointer, shape) and
  the view inherits its base's label;
* host-side metadata changes (``set_``, ``resize_``, and a storage's
  ``resize_``) become ``Mutation`` records with the old and new pointer, size
  and shape; during a capture, a later read of such a tensor's shape, size or
  length becomes a ``HostRead`` (``gpu_demo.record.host_reads``); a ``set_``
  onto a storage made from another tensor's pointer (a weak reference) is
  also a ``View`` of that tensor;
* ``torch.cuda.graph`` captures become ``Capture`` begin/end records and
  ``CUDAGraph.replay`` a ``Replay``; records made in between carry the graph id;
* from the CUDA runtime (``gpu_demo.record.hooks``): event record/wait become
  ``EventOp`` records, allocations and frees ``Alloc``/``Free`` records (sized
  from the tensor that got the block, or the storage that lost it, rounded to
  the caching allocator's 512 bytes), synchronizations ``HostSync`` records;
* each captured launch lists the launches it depends on: the previous launch
  on its stream plus whatever its stream waited for through events.
* at a capture's end, a ``HostState`` for each host int or flag the captured
  call changed on an object the capturing code reaches
  (``gpu_demo.guard.record.host_state``); the generators registered with the
  graph in its ``Capture`` end record, and a random op's generator in its
  launch's scalars (``generators``); once a graph exists, a ``Rebind`` when a
  module's tensor attribute is made to name another tensor (``rebinds``);
  the elements of a tensor-list argument name their list (``Arg.element_of``).

The mode is thin, as PyTorch's CUDA sanitizer's is: it freezes each op's
arguments and writes its launch (the per-op path, with what it would call
inlined where that was measured to matter); the bookkeeping lives in its parts,
which all write into one ``journal``: ``handles`` (tensor objects, labels),
``ledger`` (blocks, pools, ``Alloc``/``Free``), ``capture_book`` (graphs, their
pools, replays), ``stream_order`` (streams, events, what a launch depends on)
and ``mutations`` (``Mutation`` and ``HostRead`` records).

Streams get readable names (``gpu_demo.record.naming``); ``gpu_demo.record.annotate``
marks stay optional labels on top. ``gpu_demo.record.capture.record_capture``
runs the whole protocol under a recorder, for real or as the CPU dry run.
"""

from __future__ import annotations

import itertools
from contextlib import ExitStack
from typing import Any, Callable

from gpu_demo.guard.record import annotate, collector, hooks, patches, raw_launches, rebinds
from gpu_demo.guard.record.aside import StandingAside
from gpu_demo.guard.record.capture_book import CaptureBook
from gpu_demo.guard.record.cuda_device import Device, cuda_device
from gpu_demo.guard.record.handles import HandleTable
from gpu_demo.guard.record.journal import Journal
from gpu_demo.guard.record.ledger import AllocationLedger
from gpu_demo.guard.record.mutations import MutationWatch
from gpu_demo.guard.record.naming import StreamNames
from gpu_demo.guard.record.ops import OpRecorder
from gpu_demo.guard.record.stream_order import StreamOrder
from simlib.trace import Trace


class CaptureRecorder(OpRecorder):
    """Writes every op issued inside ``with recorder:`` into ``recorder.trace``.

    ``device`` is where the current stream comes from (``cuda_device()``);
    ``eager=False`` records nothing outside captures (for whole-process
    checking, where eager work would only grow the trace), and is on the
    dispatch stack only while a capture is open, so eager work outside pays
    for no dispatch mode. Callables in ``capture_ended`` are called with each
    graph id when its capture ends, those in ``replayed`` with a graph's id after
    its ``Replay`` record.
    """

    def __init__(self, meta: dict[str, Any] | None = None, *, device: Device | None = None,
                 eager: bool = True) -> None:
        super().__init__()
        self.journal = Journal(Trace(meta=dict(meta or {})), eager)
        self.trace = self.journal.trace
        self.device = device or cuda_device()
        self.streams = StreamNames()
        self.handles = HandleTable()
        self.order = StreamOrder(self.journal, self.device, self.streams)
        self.ledger = AllocationLedger(self.journal, self.handles, self.order)
        self.watch = MutationWatch(self.journal, self.handles, self.order, self.ledger)
        self.book = CaptureBook(self.journal, self.handles, self.order, self.ledger, self.watch, self)
        self._launch_ids = itertools.count()
        self._context = ExitStack()
        self.records_full: Callable[[], None] | None = None   # called at an op once ``RECORDS_CAP`` are held
        self.aside = StandingAside(self)   # once a program serves (``stand_aside``)
        # What the program, the runtime and the wrapped methods report goes straight to the part
        # that keeps it: no frame of the recorder's in between (a free comes once or more per op).
        book, order, ledger = self.book, self.order, self.ledger
        self.capture_ended, self.replayed = book.capture_ended, book.replayed
        self.capturing, self.replay, self.fault = book.capturing, book.replay, book.fault
        self.on_capture_begin, self.on_capture_end = book.on_capture_begin, book.on_capture_end
        self.on_pool_routing, self.on_replay = book.on_pool_routing, book.on_replay
        self.stream_event, self.host_sync, self.on_synchronized = order.stream_event, order.host_sync, order.on_synchronized
        self.on_event_created, self.on_event_deleted = order.on_event_created, order.on_event_deleted
        self.on_event_recorded, self.on_event_waited = order.on_event_recorded, order.on_event_waited
        self.on_freed, self.holding_storages = ledger.on_freed, ledger.holding_storages
        self.resizing, self.named, self.calling = self.watch.resizing, self.handles.named, self.journal.calling
        self.rebinds = rebinds.RebindLog(self.journal, self.handles, book.host.module_names)
        book.capture_ended.append(self.rebinds.graph_captured)
        self.stand_aside = self.aside.stand_aside
        self.ledger.route()

    graph = property(lambda self: self.journal.graph, doc="The capture open now (its id), else ``None``.")
    eager = property(lambda self: self.journal.eager, doc="Whether ops outside captures are recorded.")
    on_allocated = property(lambda self: self.ledger.on_allocated,
                            doc="What takes the runtime's allocation reports now (``hooks``): see ``ledger.route``.")
    quiet = property(lambda self: self.aside.quiet and not self.journal.recording and self.ledger.eager_pool is None,
                     doc="No runtime report needed now (``hooks``, ``report_gate``): see ``aside``; "
                         "allocations routed into a graph pool are reported.")

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        """Off while ``torch.compile`` compiles, on while what it compiled runs: so Dynamo
        compiles under the recorder (it skips compiling under any other mode) and its
        fake tensors never reach it, while the compiled code's ops and CUDA-graph
        captures are recorded as they run."""
        return True

    def __enter__(self) -> "CaptureRecorder":
        if self.eager:
            super().__enter__()
        self._context.enter_context(annotate.listening(self))
        self._context.enter_context(hooks.listening(self))
        self._context.enter_context(patches.installed(self))
        self._context.enter_context(rebinds.listening(self.rebinds))
        self._context.callback(self.watch.host_reads.disarm)
        collector.hold()   # until it stands aside (``aside``) or stops
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._context.__exit__(*exc_info)
        if self.aside.memory_watch is None:   # still recording every op
            collector.release()
        self.aside.leave()
        if self.eager:
            super().__exit__(*exc_info)
        else:
            self.book.leave_dispatch()
        self.trace.records = self.handles.finished(self.trace.records, self.streams.final(), in_place=True)
        if self.ledger.unmatched:
            self.trace.meta["allocations_without_a_tensor"] = self.ledger.unmatched

    def snapshot(self, graph: int | None = None) -> Trace:
        """The trace so far with final names; with ``graph``, only that graph's records
        and the records of no graph (eager work, host syncs)."""
        records = self.trace.records
        if graph is not None:
            records = [r for r in records if getattr(r, "graph", None) in (None, graph)]
        return Trace(records=self.handles.finished(records, self.streams.final()), meta=dict(self.trace.meta))

    on_triton_launch = raw_launches.on_triton_launch

    def late_names(self) -> dict[int, str]:
        """The names ``label()`` gave tensors after their first records (tensor id -> name)."""
        return dict(self.handles.late_names)
