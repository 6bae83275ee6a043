"""Host-side changes to a tensor object: ``Mutation`` records, and the ``HostRead``s they make worth recording.

A ``set_`` or ``resize_`` changes what a tensor object points at, on the host,
with no kernel: the dispatcher shows it as an op (``CaptureRecorder._mutation``).
A storage's ``resize_`` (``patches``) and a storage swapped with no op the
dispatcher showed (``x.data = ...``, a ``set_`` inside a C++ extension or a
custom op) are found by comparing a tensor with its last recorded use
(``storage_swap``). During a capture, a read of a mutated tensor's shape, size
or length may decide what is captured (``if x.shape[0] == 0: return``): from
the first mutation on, such reads become ``HostRead`` records
(``gpu_demo.record.host_reads``).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, Sequence

import torch
from torch.multiprocessing.reductions import StorageWeakRef

from gpu_demo.guard.record import annotate, tensor_reads
from gpu_demo.guard.record.call_site import user_site, variable_name
from gpu_demo.guard.record.cuda_device import block_bytes
from gpu_demo.guard.record.handles import HandleTable
from gpu_demo.guard.record.host_reads import HostReadWatch
from gpu_demo.guard.record.journal import Journal
from gpu_demo.guard.record.ledger import AllocationLedger
from gpu_demo.guard.record.op_plans import OpPlan
from gpu_demo.guard.record.stream_order import StreamOrder
from simlib.trace import Arg, HostRead, Mutation, View

_numel, _shape = tensor_reads.numel, tensor_reads.shape   # not the program's reads: no HostRead for them

STORAGE_RESIZE = "untyped_storage().resize_"   # the op name a storage's resize_ is recorded under
STORAGE_SWAP = "storage_swap"   # a tensor object's storage changed with no op the dispatcher showed
SWAPPED_UNSEEN = ("its storage changed between two uses with no recorded op (x.data = ..., or a set_ or "
                  "resize_ inside a C++ extension)")


class MutationWatch:
    """The tensors mutated in the open capture, and the watch on their shape reads."""

    def __init__(self, journal: Journal, handles: HandleTable, order: StreamOrder, ledger: AllocationLedger) -> None:
        self.host_reads = HostReadWatch()
        self._mutated: set[int] = set()   # tensor ids mutated in the open capture
        self._journal = journal
        self._handles = handles
        self._order = order
        self._ledger = ledger

    def capture_began(self) -> None:
        self._mutated = set()
        self.host_reads.arm(self._host_read)   # a shape read may find a storage changed under it

    def capture_ended(self) -> None:
        self._mutated = set()
        self.host_reads.disarm()

    def mutation(self, plan: OpPlan, args, kwargs):  # noqa: ANN001 (an op's own arguments)
        """Run ``set_`` or ``resize_`` (``plan``) and record it: a ``Mutation``, and a ``Free`` of
        the block it let go where no allocator reports one."""
        tensor, ledger, journal = args[0], self._ledger, self._journal
        old = (tensor.data_ptr(), _numel(tensor), tuple(_shape(tensor)))
        storage = tensor.untyped_storage()
        ptr, nbytes, ref = storage.data_ptr(), storage.nbytes(), StorageWeakRef(storage)
        block = (block_bytes(nbytes, storage.device.type), self._handles.label(tensor))
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
        self.mutated_now(plan.opname, tensor, old)
        self._aliased(tensor)
        # The runtime reports a freed CUDA block itself; elsewhere the dropped last
        # reference is the only sign that the block is free.
        if ref.expired() and nbytes and not ledger.freed_since(start, ptr):
            ledger.free(ptr, *block)
        return out

    def mutated_now(self, op: str, tensor: torch.Tensor, old: Sequence[Any], why: str | None = None) -> None:
        """A ``Mutation`` of ``tensor`` from ``old`` (pointer, elements, shape) to what it is now."""
        journal = self._journal
        handle = self._handles.handle(tensor)
        if handle.label == f"t{handle.id}" and (name := variable_name(tensor)):   # no label(): the user's own name
            self._handles.named(tensor, name)
        new = (tensor.data_ptr(), _numel(tensor), tuple(_shape(tensor)))
        handle.seen = new
        journal.emit(
            Mutation, op=op, tensor=handle.id, label=handle.label,
            old_ptr=old[0], old_numel=old[1], old_shape=tuple(old[2]),
            new_ptr=new[0], new_numel=new[1], new_shape=new[2],
            graph=journal.graph, why=annotate.current_why() or why or "", site=user_site(),
        )
        if journal.graph is not None:
            self._mutated.add(handle.id)
            self.host_reads.arm(self._host_read)  # from now on a read of its shape may decide what is captured

    def _aliased(self, tensor: torch.Tensor) -> None:
        """A ``set_`` onto a storage made from another live tensor's pointer (a weak reference:
        vLLM's ``weak_ref_tensor``, ``torch._C._construct_storage_from_data_pointer``) makes a
        ``View`` of that tensor: no op links the two, and without the link a read through the
        weak reference could not be told from a read of whatever a graph later lays on the same
        bytes (rule 11 follows a result through its views). A storage shared as such
        (``x.set_(y)``) is not an alias made behind the allocator's back and links nothing."""
        storage = tensor.untyped_storage()
        ptr = storage.data_ptr()
        if not ptr:
            return
        entry = self._ledger.blocks.get(ptr)
        first = entry[1].ref() if entry is not None else None
        if first is not None and first is not tensor and first.untyped_storage().data_ptr() == ptr:
            base = first if first.untyped_storage()._cdata != storage._cdata else None
        else:   # the block's first tensor is gone or moved (its free unseen): any live one on those bytes
            base = next((t for t in self._handles.alive() if t is not tensor and _aliases(t, ptr, storage)), None)
        if base is None:
            return
        handle, journal = self._handles.handle(tensor), self._journal
        journal.add(View, handle.id, handle.label, self._handles.handle(base).id, tensor.data_ptr(), _numel(tensor),
                    tuple(_shape(tensor)), journal.graph)

    def swapped(self, tensor: torch.Tensor, seen: tuple[int, int, tuple[int, ...]]) -> None:
        """``tensor``'s storage is not what it was at its last recorded use (``seen``), and no
        recorded op changed it: a ``storage_swap``."""
        self.mutated_now(STORAGE_SWAP, tensor, seen, why=SWAPPED_UNSEEN)

    # -- storage changed under a tensor object (``Mutation(op="storage_swap")``) ----------
    # ``CaptureRecorder._arg`` compares each argument as it is now with its last recorded use: a
    # different pointer or size with no recorded op in between is a ``storage_swap`` (identities,
    # not op names).

    def changed_inside(self, plan: OpPlan, given: list[tuple[str, torch.Tensor, str]], frozen: list[Arg]) -> None:
        """A tensor the op writes whose storage the op itself changed: an ``out=`` result
        resized to fit is the op's documented effect; any other change (a ``set_`` inside a
        custom op, which the dispatcher shows as one op) is a ``storage_swap``."""
        for (name, t, access), a in zip(given, frozen):
            if access == "r" or (t.data_ptr() == a.ptr and _numel(t) == a.numel):
                continue
            if name.split("[", 1)[0] in plan.outs:
                self._handles.by_id[id(t)].seen = (t.data_ptr(), _numel(t), tuple(_shape(t)))
            else:
                self.mutated_now(STORAGE_SWAP, t, (a.ptr, a.numel, a.shape),
                                 why=f"{plan.opname} changed its storage inside the op (the dispatcher shows it "
                                     "as one op)")

    @contextmanager
    def resizing(self, storage: torch.UntypedStorage) -> Iterator[None]:
        """``storage.resize_``: a ``Mutation`` of each tensor seen on it, and a ``Free``
        of its block if the resize let the block go."""
        journal, ledger = self._journal, self._ledger
        if journal.busy or not journal.recording or not _has_memory(storage):
            yield
            return
        with journal.quiet():
            ptr, nbytes = storage.data_ptr(), storage.nbytes()
            on_it = [t for t in self._handles.live_tensors() if ptr and t.untyped_storage().data_ptr() == ptr]
            before = [(t, t.data_ptr(), _numel(t), tuple(_shape(t))) for t in on_it]
            label = self._handles.label(on_it[0]) if on_it else f"storage@{ptr:#x}"
            start = len(journal.trace.records)
            ledger.releasing[ptr] = (block_bytes(nbytes, storage.device.type), label)
        try:
            yield
        finally:
            ledger.releasing.pop(ptr, None)
        with journal.quiet():
            for t, *old in before:
                self.mutated_now(STORAGE_RESIZE, t, old)
            if nbytes and storage.data_ptr() != ptr and not ledger.freed_since(start, ptr):
                ledger.free(ptr, block_bytes(nbytes, storage.device.type), label)

    # -- what the host reads (gpu_demo.record.host_reads) --------------------------------

    def _host_read(self, op: str, t: torch.Tensor) -> None:
        """A read of ``t``'s metadata in a capture: a ``storage_swap`` first if its storage
        changed since its last use (``x.data = ...`` before ``if x.shape[0] == 0``), then a
        ``HostRead`` if it was mutated in this capture."""
        journal = self._journal
        if journal.graph is None or journal.busy:
            return
        handle = self._handles.known(t)
        if handle is None:
            return
        seen = handle.seen
        if seen is not None and (seen[0] != t.data_ptr() or seen[1] != _numel(t)):
            with journal.quiet():
                self.swapped(t, seen)
        if handle.id not in self._mutated:
            return
        with journal.quiet():
            journal.emit(HostRead, op=op, tensor=handle.id, label=handle.label, shape=tuple(_shape(t)),
                         stream=self._order.stream(), graph=journal.graph)


def _aliases(t: torch.Tensor, ptr: int, storage: torch.UntypedStorage) -> bool:
    """Is ``t``'s own storage another one starting at ``ptr`` (``storage``'s pointer)?"""
    theirs = t.untyped_storage()
    return theirs.data_ptr() == ptr and theirs._cdata != storage._cdata


def _has_memory(storage: torch.UntypedStorage) -> bool:
    """False for a tracing tensor's storage (``torch.compile``'s fake ones), which has no pointer."""
    try:
        storage.data_ptr()
    except RuntimeError:
        return False
    return True
