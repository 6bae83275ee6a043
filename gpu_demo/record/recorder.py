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
  length becomes a ``HostRead`` (``gpu_demo.record.host_reads``);
* ``torch.cuda.graph`` captures become ``Capture`` begin/end records and
  ``CUDAGraph.replay`` a ``Replay``; records made in between carry the graph id;
* from the CUDA runtime (``gpu_demo.record.hooks``): event record/wait become
  ``EventOp`` records, allocations and frees ``Alloc``/``Free`` records (sized
  from the tensor that got the block, or the storage that lost it, rounded to
  the caching allocator's 512 bytes), synchronizations ``HostSync`` records;
* each captured launch lists the launches it depends on: the previous launch
  on its stream plus whatever its stream waited for through events.

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
import time
from contextlib import ExitStack
from dataclasses import replace
from typing import Any, Callable, Iterable, Sequence

import torch
from torch._C import DisableTorchFunction
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode

from gpu_demo.record import annotate, hooks, patches
from gpu_demo.record.annotate import marks as _marks
from gpu_demo.record.call_site import user_site
from gpu_demo.record.capture_book import CaptureBook
from gpu_demo.record.cuda_device import CACHING_ALLOCATOR_BLOCK, Device, block_bytes, cuda_device
from gpu_demo.record.dispatch_mode import QuickDispatchMode
from gpu_demo.record.handles import HandleTable
from gpu_demo.record.journal import Journal
from gpu_demo.record.ledger import AllocationLedger
from gpu_demo.record.memory_watch import MemoryWatch, Ranges, install_at_bottom, uninstall
from gpu_demo.record.mutations import MutationWatch
from gpu_demo.record.naming import StreamNames
from gpu_demo.record.op_plans import (
    ITEM,
    LAUNCH,
    MUTATE,
    PLANS,
    VIEW,
    OpPlan,
    collective_scalars,
    copy_role,
    frozen_scalar,
    made_by,
    plan_of,
    scalars_of,
    tensor_behind,
    tensors_in,
    tensors_of,
    writes_only_empty,
)
from gpu_demo.record.stream_order import StreamOrder
from gpu_demo.record.triton_access import KernelAccess
from simlib.trace import Alloc, Arg, HostSync, Launch, Record, SkippedLaunch, Trace, View

# The recorder's own metadata reads go to ``TensorBase`` directly: an armed ``HostReadWatch``
# wraps ``torch.Tensor``'s readers, and the recorder's reads are not the program's.
_numel = torch._C.TensorBase.numel
_shape = torch._C.TensorBase.shape.__get__
_stride = torch._C.TensorBase.stride
_contiguous = torch._C.TensorBase.is_contiguous
_itemsize = torch._C.TensorBase.element_size
_now = time.perf_counter_ns

_OUT = tuple(f"out{i}" for i in range(8))   # output argument names, made once
RECORDS_CAP = 1 << 15   # records held before ``records_full`` is called (a whole process feeds its checker)


def extent_bytes(t: torch.Tensor) -> int:
    """The bytes ``t`` can touch from its data pointer (``Arg.nbytes``): 0 without elements, else
    ``(1 + sum((size_i - 1) * stride_i)) * itemsize``. Not ``numel * itemsize``: an expanded
    (stride 0) view has more elements than bytes behind it, a strided one spans more bytes."""
    if _contiguous(t):
        return _numel(t) * _itemsize(t)
    last = 0
    for size, stride in zip(_shape(t), _stride(t)):
        if not size:
            return 0
        last += (size - 1) * stride
    return (last + 1) * _itemsize(t)


class CaptureRecorder(QuickDispatchMode):
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
        self._memory_watch: MemoryWatch | None = None          # standing aside: the calls it still records
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
        self.ledger.route()

    graph = property(lambda self: self.journal.graph, doc="The capture open now (its id), else ``None``.")
    eager = property(lambda self: self.journal.eager, doc="Whether ops outside captures are recorded.")
    on_allocated = property(lambda self: self.ledger.on_allocated,
                            doc="What takes the runtime's allocation reports now (``hooks``): see ``ledger.route``.")

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
        self._context.callback(self.watch.host_reads.disarm)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._context.__exit__(*exc_info)
        if self._memory_watch is not None:
            uninstall(self._memory_watch)
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

    def for_check(self, records: list[Record]) -> list[Record]:
        """``records`` (some of this recording's) as a check of the recording so far reads them:
        with late tensor names (copies where one applies), and stream keys as they are (a rule
        compares streams, never reads their names: ``naming.renamed_text`` renames what it found)."""
        return self.handles.finished(records, {})

    def late_names(self) -> dict[int, str]:
        """The names ``label()`` gave tensors after their first records (tensor id -> name)."""
        return dict(self.handles.late_names)

    # -- standing aside (``gpu_demo.record.memory_watch``) -----------------------------

    def stand_aside(self, reads: Iterable[tuple[int, int]], frees: Iterable[tuple[int, int]]) -> None:
        """From now on record only captures, replays, the calls that touch ``reads`` (address
        ranges) and the frees of blocks that touch ``frees``; called again, the ranges change."""
        if self._memory_watch is None:
            self._memory_watch = MemoryWatch(self._record_call)
            install_at_bottom(self._memory_watch)
            self.journal.aside = True
            if self.journal.eager:
                self.journal.eager = False
                self.book.leave_dispatch(entered_eagerly=True)
                self.ledger.route()
        self._memory_watch.ranges = Ranges(reads)
        self.ledger.watched_frees = Ranges(frees)

    def _record_call(self, func: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        """A call the watch picked: run with the recorder on the dispatch stack, recorded op by op."""
        journal = self.journal
        if journal.graph is not None or journal.watching:
            return func(*args, **kwargs)   # recorded already
        journal.watching += 1
        entered = _get_current_dispatch_mode() is not self
        if entered:
            TorchDispatchMode.__enter__(self)
        try:
            return func(*args, **kwargs)
        finally:
            if entered:
                TorchDispatchMode.__exit__(self, None, None, None)
            journal.watching -= 1

    def on_triton_launch(self, kernel: str, args: Sequence[tuple[str, Any]],
                         access: KernelAccess | None = None) -> None:
        """A Triton kernel launched directly (``patches``), not from inside an op the dispatcher showed."""
        journal, watch = self.journal, self._memory_watch
        if journal.busy or not (journal.recording or (watch is not None and watch.touched(args))):
            return  # launched by an op the dispatcher already showed, or on memory no rule follows
        if access is not None and access.unknown:
            self.trace.meta.setdefault("triton_access_unknown", {})[kernel] = access.unknown
        with journal.quiet():
            given = [(name, tensor, access.of(name) if access else "rw")
                     for name, value in args if (tensor := tensor_behind(value)) is not None]
            frozen = [self._arg(*each) for each in given]
            if access is not None and access.extents:
                frozen = _bounded(frozen, given, access.extents, dict(args))
            scalars = tuple((name, text) for name, value in args if (text := frozen_scalar(value)) is not None)
            self._launch(f"triton:{kernel}", kernel, tuple(frozen), skips_empty=False, scalars=scalars)

    # -- dispatch ----------------------------------------------------------------

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001 (torch's signature)
        """Record ``func`` as its ``OpPlan`` says, and run it.

        Torch-function modes are off inside: plain PyTorch runs an op's aten
        call below them, so neither the aten op the recorder calls nor its own
        reads of the arguments may reach them (each trip through a mode costs
        about ten times the read).
        """
        kwargs = kwargs or {}
        plan = PLANS.get(id(func)) or plan_of(func)
        journal = self.journal
        if not (journal.eager or journal.graph is not None or journal.watching):
            return plan.call(*args, **kwargs)
        journal.busy += 1   # the recorder's own tensor reads are not the program's (``Journal.quiet``)
        try:
            with DisableTorchFunction():
                if plan.action is LAUNCH:   # most ops: straight there
                    return self._op(plan, args, kwargs)
                return self._dispatch(plan, args, kwargs)
        finally:
            journal.busy -= 1

    def _dispatch(self, plan: OpPlan, args, kwargs):  # noqa: ANN001
        action = plan.action
        if action is MUTATE:
            return self._mutation(plan, args, kwargs)
        if action is VIEW:
            return self._views(plan, args, kwargs)
        if action is ITEM:
            self.journal.emit(HostSync, op="item", label=self.handles.label(args[0]), stream=self.order.stream())
            return plan.call(*args, **kwargs)
        out = plan.call(*args, **kwargs)
        if self.ledger.pending.pointers:
            self.ledger.claim(made_by(out, tensors_of(plan, args, kwargs)))
        return out

    def _op(self, plan: OpPlan, args, kwargs):  # noqa: ANN001
        """An op that launches a kernel: its arguments frozen before it runs, its results after."""
        if self.records_full is not None and len(self.trace.records) >= RECORDS_CAP:
            self.records_full()
        given = tensors_of(plan, args, kwargs)
        arg = self._arg
        frozen = [arg(name, t, access) for name, t, access in given]
        if plan.collective:   # its results are its buffers; recorded first, since it may never return
            self._launch(plan.kernel, plan.opname, tuple(frozen), scalars=collective_scalars(plan, args, kwargs))
            return plan.call(*args, **kwargs)
        out = plan.call(*args, **kwargs)
        stream = self.order.stream()
        made = made_by(out, given)
        if made:
            frozen += [arg(_OUT[i] if i < len(_OUT) else f"out{i}", t, "w", stream) for i, t in enumerate(made)]
        if self.ledger.pending.pointers:
            self.ledger.unclaimed()
        role = copy_role([t for _, t, a in given if a == "r"], [t for _, t, a in given if a != "r"] + made) \
            if plan.copies else None
        self._launch(plan.kernel, plan.opname, tuple(frozen), stream=stream, pdl=plan.pdl,
                     scalars=scalars_of(plan.names, args, kwargs), role=role,
                     site=user_site(2))   # from the op's caller: this frame and ``__torch_dispatch__`` are ours
        if plan.writes:
            self.watch.changed_inside(plan, given, frozen)
        return out

    def _launch(self, kernel: str, opname: str, args: tuple[Arg, ...], *, skips_empty: bool = True,
                stream: str | None = None, pdl: bool = False, scalars: tuple[tuple[str, str], ...] = (),
                role: str | None = None, site: str | None = None) -> None:
        """``role``: what the launch is (``H2D``) when not the ``annotate`` mark's role; ``site``:
        the user's line that issued it, when the caller knows how far up it is (``user_site``)."""
        stream, marked = stream or self.order.stream(), _marks.role
        label = f"{marked}/{opname}" if marked else opname
        role = role or marked
        journal = self.journal
        if skips_empty and writes_only_empty(args):
            journal.emit(SkippedLaunch, kernel=kernel, label=label, role=role, stream=stream, graph=journal.graph,
                         reason="every output has zero elements", args=args)
            return
        launch, frontier = next(self._launch_ids), self.order.frontier
        deps = frontier.get(stream, ())
        frontier[stream] = (launch,)
        journal.trace.records.append(Launch(next(journal.steps), (_now() - journal.t0) / 1000, launch, kernel, label,
                                            role, stream, args, journal.graph, deps, pdl, scalars,
                                            user_site() if site is None else site))   # ``Journal.add``, inlined

    def _views(self, plan: OpPlan, args, kwargs):  # noqa: ANN001
        out = plan.call(*args, **kwargs)
        handles = self.handles
        base = handles.handle(args[0])
        for view in tensors_in(out):
            if view is args[0]:   # an op that hands back its own input made no new view (not its own base)
                continue
            handle = handles.handle(view)
            handle.label = annotate.label_of(view) or base.label
            self.journal.add(View, handle.id, handle.label, base.id, view.data_ptr(), _numel(view),
                             tuple(_shape(view)), self.journal.graph)
        return out

    def _mutation(self, plan: OpPlan, args, kwargs):  # noqa: ANN001
        tensor, ledger, journal = args[0], self.ledger, self.journal
        old = (tensor.data_ptr(), _numel(tensor), tuple(_shape(tensor)))
        storage = tensor.untyped_storage()
        ptr, nbytes, ref = storage.data_ptr(), storage.nbytes(), StorageWeakRef(storage)
        block = (block_bytes(nbytes, storage.device.type), self.handles.label(tensor))
        del storage
        if ledger.held is not None and journal.graph is None:
            ledger.held.pop(ptr, None)  # the program lets it go; a capture lets nothing go
        start = len(journal.trace.records)
        ledger.releasing[ptr] = block
        try:
            out = plan.call(*args, **kwargs)
        finally:
            ledger.releasing.pop(ptr, None)
        ledger.claim([tensor])
        self.watch.mutated_now(plan.opname, tensor, old)
        # The runtime reports a freed CUDA block itself; elsewhere the dropped last
        # reference is the only sign that the block is free.
        if ref.expired() and nbytes and not ledger.freed_since(start, ptr):
            ledger.free(ptr, *block)
        return out

    def _arg(self, name: str, t: torch.Tensor, access: str, made_on: str | None = None) -> Arg:
        """``t`` as a launch freezes it. Its storage's block is noted for a later ``Free``, with an
        ``Alloc`` if the runtime handed the block out and no op claimed it yet (``ledger.Pending``).
        ``made_on``: ``t`` is a new result of an op issued to that stream (which wrote its block
        last); else the op was given ``t``, and a pointer or size other than at its last recorded
        use is a ``storage_swap`` (its storage changed under it, by no op the dispatcher showed)."""
        handle = self.handles.by_id.get(id(t))   # ``HandleTable.handle``, inlined
        if handle is None or handle.ref() is not t:
            handle = self.handles.new(t)
        ledger = self.ledger
        storage = t.untyped_storage()
        block, ptr, nbytes = storage.data_ptr(), t.data_ptr(), storage.nbytes()
        if ledger.held is not None:
            ledger.held[block] = storage
        blocks = ledger.blocks
        if block and block not in blocks:   # ``block_bytes``, inlined
            blocks[block] = (-(-nbytes // CACHING_ALLOCATOR_BLOCK) * CACHING_ALLOCATOR_BLOCK if t.is_cuda else nbytes,
                             handle)
        if made_on is not None and block:
            ledger.made_on[block] = made_on
        pending, pool = ledger.pending, None
        if pending.pointers and block in pending.pointers:   # handed out since the last op
            pending.pointers.remove(block)
            pool = ledger.pool()
        elif pending.unowned and block in pending.unowned:   # earlier, and no op has used it since
            pool = pending.unowned.pop(block)
        if pool is not None:
            self.journal.add(Alloc, handle.id, handle.label, block, blocks[block][0], made_on or self.order.stream(),
                             pool)
            ledger.allocated_from[block] = pool
        left = nbytes - (ptr - block) if ptr else 0   # an empty view's pointer is 0: nothing behind it
        numel, shape, seen = _numel(t), tuple(_shape(t)), handle.seen
        if made_on is not None or seen is None:
            handle.seen = (ptr, numel, shape)
        elif seen[0] != ptr or seen[1] != numel:
            self.watch.swapped(t, seen)   # and ``seen`` is now
        return Arg(name, handle.id, handle.label, ptr, numel, shape,
                   numel * _itemsize(t) if _contiguous(t) else extent_bytes(t),   # ``extent_bytes``, inlined
                   access, left if left > 0 else 0)


def _bounded(frozen: list[Arg], given: list[tuple[str, torch.Tensor, str]], extents: dict[str, str],
             values: dict[str, Any]) -> list[Arg]:
    """A Triton launch's pointer arguments with the extent their kernel's mask bounds them to
    (``triton_access``: ``n`` elements for ``mask=offs < n``) instead of the tensor's own size."""
    out = []
    for a, (name, t, _) in zip(frozen, given):
        size = values.get(extents.get(name, ""))
        out.append(replace(a, nbytes=size * t.element_size()) if type(size) is int and size >= 0 else a)
    return out
