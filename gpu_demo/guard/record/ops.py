"""What each op freezes: the recorder's dispatch path (``OpRecorder``, under ``CaptureRecorder``).

Every op the program issues passes through ``__torch_dispatch__``, which freezes
each argument as the launch would (``_arg``) and writes the launch, a view or a
host-side change of metadata. It is the per-op path: what it would call is
inlined where that was measured to matter; the bookkeeping is the parts'
(``journal``, ``handles``, ``ledger``, ``order``, ``watch``), as PyTorch's CUDA
sanitizer keeps its ``EventHandler`` apart from its dispatch mode.
"""

from __future__ import annotations

import time
from typing import Callable, Iterator

import torch
from torch._C import DisableTorchFunction

from gpu_demo.guard.record import annotate, op_plans, tensor_reads
from gpu_demo.guard.record.annotate import marks as _marks
from gpu_demo.guard.record.call_site import user_site
from gpu_demo.guard.record.cuda_device import CACHING_ALLOCATOR_BLOCK
from gpu_demo.guard.record.dispatch_mode import QuickDispatchMode
from gpu_demo.guard.record.handles import HandleTable
from gpu_demo.guard.record.journal import Journal
from gpu_demo.guard.record.ledger import AllocationLedger
from gpu_demo.guard.record.mutations import MutationWatch
from gpu_demo.guard.record.op_plans import LAUNCH, PLANS, OpPlan, made_by, scalars_of, tensors_of, writes_only_empty
from gpu_demo.guard.record.stream_order import StreamOrder
from simlib.trace import Alloc, Arg, HostSync, Launch, SkippedLaunch, View

_numel, _shape, _contiguous, _itemsize = tensor_reads.numel, tensor_reads.shape, tensor_reads.contiguous, tensor_reads.itemsize
_now = time.perf_counter_ns

_OUT, _CLONE = tuple(f"out{i}" for i in range(8)), torch.ops.aten.clone.default   # output argument names, made once
RECORDS_CAP = 1 << 15   # records held before ``records_full`` is called (a whole process feeds its checker)


class OpRecorder(QuickDispatchMode):
    """The dispatch path over the recorder's parts, which ``CaptureRecorder`` makes and names."""

    journal: Journal
    handles: HandleTable
    ledger: AllocationLedger
    order: StreamOrder
    watch: MutationWatch
    records_full: Callable[[], None] | None          # called at an op once ``RECORDS_CAP`` records are held
    _launch_ids: Iterator[int]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001 (torch's signature)
        """Record ``func`` as its ``OpPlan`` says, and run it.

        Torch-function modes are off inside: plain PyTorch runs an op's aten
        call below them, so neither the aten op the recorder calls nor its own
        reads of the arguments may reach them (each trip through a mode costs
        about ten times the read).
        """
        kwargs = kwargs or {}
        plan = PLANS.get(id(func)) or op_plans.plan_of(func)
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
        if action is op_plans.MUTATE:
            return self.watch.mutation(plan, args, kwargs)
        if action is op_plans.VIEW:
            return self._views(plan, args, kwargs)
        if action is op_plans.ITEM:
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
        if plan.lists:   # ``torch.stack(outs)``: each element names its list (checker rule 13)
            for a in frozen:
                if "[" in a.name:
                    a.element_of = a.name.split("[", 1)[0]
        if plan.collective:   # its results are its buffers; recorded first, since it may never return
            self._launch(plan.kernel, plan.opname, tuple(frozen), scalars=op_plans.collective_scalars(plan, args, kwargs))
            return plan.call(*args, **kwargs)
        out = plan.call(*args, **kwargs)
        stream = self.order.stream()
        if made := made_by(out, given):
            frozen += [arg(_OUT[i] if i < len(_OUT) else f"out{i}", t, "w", stream) for i, t in enumerate(made)]
        if self.ledger.pending.pointers:
            self.ledger.unclaimed()
        role = op_plans.copy_role([t for _, t, a in given if a == "r"], [t for _, t, a in given if a != "r"] + made) \
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
        for view in op_plans.tensors_in(out):
            if view is not args[0]:   # an op that hands back its own input made no new view (not its own base)
                self.viewed(args[0], view)
        return out

    def cloned(self, t: torch.Tensor) -> torch.Tensor:
        """``t.clone()`` the memory watch picked, recorded as the dispatch path would, off the stack."""
        self.journal.busy += 1
        try:
            with DisableTorchFunction():
                return self._op(PLANS.get(id(_CLONE)) or op_plans.plan_of(_CLONE), (t,), {})
        finally:
            self.journal.busy -= 1

    def viewed(self, base: torch.Tensor, view: torch.Tensor) -> None:
        """A ``View`` of ``base``: ``view``, on its memory (also called for a basic index the
        memory watch picked, ``StandingAside.record_call``, without the dispatch stack)."""
        handles = self.handles
        of = handles.handle(base)
        handle = handles.handle(view)
        handle.label = annotate.label_of(view) or of.label
        self.journal.add(View, handle.id, handle.label, of.id, view.data_ptr(), _numel(view), tuple(_shape(view)),
                         self.journal.graph)

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
                   numel * _itemsize(t) if _contiguous(t) else tensor_reads.extent_bytes(t),   # ``extent_bytes``, inlined
                   access, left if left > 0 else 0)
