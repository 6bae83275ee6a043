"""Which blocks of memory the program took and gave back, from which pool, held by which tensor.

The CUDA runtime reports each allocation and free by address only (``hooks``).
The ledger matches an allocation to the tensor that got its block (an op's
result, or the first op that uses it: code below the dispatcher allocates too),
sizes it from that tensor's storage, rounded to the caching allocator's 512
bytes, and books it to the pool it came from: the default pool, the open
capture's, or a graph pool eager allocations are routed to. The free of a
block it knows becomes a ``Free`` into that pool. Where no allocator reports
frees (the CPU dry run), the dropped last reference to a storage a ``set_`` or
``resize_`` let go is the sign instead (``CaptureRecorder._mutation``,
``MutationWatch.resizing``).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch

from gpu_demo.guard.record import hooks
from gpu_demo.guard.record.cuda_device import block_bytes
from gpu_demo.guard.record.handles import Handle, HandleTable
from gpu_demo.guard.record.journal import Journal
from gpu_demo.guard.record.memory_watch import Ranges
from gpu_demo.guard.record.stream_order import StreamOrder
from simlib.memory import DEFAULT_POOL
from simlib.trace import Alloc, Free

UNOWNED_KEPT = 1 << 14   # blocks the runtime handed out that no op has used yet, remembered (``Pending``)


@dataclass
class Pending:
    """Allocations the runtime reported, not yet matched to a tensor: ``pointers`` during the
    current op; ``unowned`` before it (block address -> the pool it came from), blocks no op's
    result got. Code that allocates below the dispatcher (Inductor's ``empty_strided_cuda``, C++
    extensions) hands such a block to the first op that uses it, often as an input or an
    ``out=``: that op's argument claims it (``CaptureRecorder._arg``)."""

    pointers: list[int] = field(default_factory=list)
    unowned: dict[int, str] = field(default_factory=dict)
    unmatched: int = 0   # blocks freed or forgotten while unowned (scratch)


class AllocationLedger:
    """The blocks a recording saw, and the allocations not yet matched to a tensor."""

    def __init__(self, journal: Journal, handles: HandleTable, order: StreamOrder) -> None:
        self.pending = Pending()
        self.blocks: dict[int, tuple[int, Handle]] = {}  # block address -> (bytes, handle of the first tensor seen on it)
        self.allocated_from: dict[int, str] = {}   # block address -> pool of its Alloc (``free``)
        self.made_on: dict[int, str] = {}   # storage address -> stream of the op that last made it
        self.releasing: dict[int, tuple[int, str]] = {}   # blocks a mutation is letting go -> (bytes, label)
        self.held: dict[int, torch.UntypedStorage] | None = None   # block address -> storage (``holding_storages``)
        self.eager_pool: str | None = None   # the pool eager allocations are routed to (``CaptureBook.on_pool_routing``)
        self.capture_pool = ""               # the open capture's pool (set when ``CaptureBook`` opens one)
        self.on_allocated: Callable[[int], Any] | None = None   # see ``route``
        self.watched_frees = Ranges()   # standing aside: the blocks whose free is still recorded
        self._journal = journal
        self._handles = handles
        self._order = order

    @property
    def unmatched(self) -> int:
        """Allocations no tensor was found for (scratch an op took, blocks no op used)."""
        return self.pending.unmatched + len(self.pending.unowned)

    @contextmanager
    def holding_storages(self) -> Iterator[None]:
        """Keep every storage a launch inside touches alive until the block ends.

        The dry run needs it. A CPU storage that dies leaves no ``Free`` record
        (no allocator reports it), so when malloc hands its address to a new
        tensor the checker sees one buffer where there are two: a block freed
        by one logical stream and taken by the other looks like a race, and a
        warm-up's dead buffer reused by the capture like state frozen at
        warm-up. The CUDA caching allocator reports both (and never moves a
        block between streams), so a real capture needs no holding. Outside a
        capture a ``set_`` or ``resize_`` still lets its block go (with a
        ``Free``); inside one nothing is let go, so the dry run shows what the
        host froze but not how the allocator reuses blocks (rule 4).
        """
        held, self.held = self.held, {}
        try:
            yield
        finally:
            self.held = held

    def route(self) -> None:
        """While recording, or while eager allocations are routed into a graph pool (standing
        aside too: a capture into that pool may use the blocks), the runtime's allocation
        reports go straight onto ``pending`` (``hooks`` calls this ``list.append`` itself: no
        Python frame per allocation, the most frequent report); otherwise nowhere, since no op
        of ours would claim them."""
        if self._journal.recording or self.eager_pool is not None:
            self.on_allocated = self.pending.pointers.append
        else:
            self.on_allocated = None
            self.unclaimed()   # blocks taken since the last recorded op that it did not get
        hooks.reroute()

    def on_freed(self, ptr: int) -> None:
        pending = self.pending
        if pending.pointers and ptr in pending.pointers:  # scratch an op took and gave back
            pending.pointers.remove(ptr)
            pending.unmatched += 1
            return
        if pending.unowned and pending.unowned.pop(ptr, None) is not None:   # no op used it
            pending.unmatched += 1
            return
        block = self.blocks.pop(ptr, None)
        releasing = self.releasing.get(ptr)   # a mutation letting the block go names it
        if releasing is not None:
            self.free(ptr, *releasing)
        elif block is not None and (self._journal.recording or self.watched_frees.touches(ptr, block[0])):
            self.free(ptr, block[0], block[1].label)

    def claim(self, results: list[torch.Tensor]) -> None:
        """``Alloc`` for each block the runtime handed out during this op, sized by the
        result tensor that got it; a block no result got is unowned (``unclaimed``).
        (A launching op claims its outputs' blocks, and any unowned block an argument
        uses, in ``CaptureRecorder._arg``.)"""
        pending = self.pending.pointers
        if not pending:
            return
        stream = None
        for t in results:
            storage = t.untyped_storage()
            ptr = storage.data_ptr()
            if ptr in pending:
                pending.remove(ptr)
                nbytes = block_bytes(storage.nbytes(), "cuda" if t.is_cuda else "cpu")
                handle = self._handles.handle(t)
                self.blocks[ptr] = (nbytes, handle)
                stream = stream or self._order.stream()
                pool = self.pool()
                self._journal.add(Alloc, handle.id, handle.label, ptr, nbytes, stream, pool)
                self.allocated_from[ptr] = pool
        self.unclaimed()

    def unclaimed(self) -> None:
        """The op is over (or the pool allocations come from changes): blocks taken since that
        no result got are unowned, booked to the pool they came from, until an op uses one or the
        runtime takes it back (an op's scratch). The oldest are forgotten past ``UNOWNED_KEPT``."""
        pending = self.pending
        if pending.pointers:
            pool = self.pool()
            for ptr in pending.pointers:
                pending.unowned[ptr] = pool
            pending.pointers.clear()
            while len(pending.unowned) > UNOWNED_KEPT:
                del pending.unowned[next(iter(pending.unowned))]
                pending.unmatched += 1

    def free(self, ptr: int, nbytes: int, label: str) -> None:
        """A ``Free`` into the pool the block came from (its ``Alloc``'s; a block allocated
        before the recording saw it came from the default pool)."""
        stream = self.made_on.get(ptr) or self._order.stream()
        self._journal.add(Free, label, ptr, nbytes, stream, self.allocated_from.pop(ptr, DEFAULT_POOL),
                          self._journal.graph)

    def forget_unwatched(self) -> None:
        """Standing aside with no runtime report (``StandingAside.stand_aside``): the frees of blocks
        outside ``watched_frees`` go unseen, so what was known of them can no longer be trusted (a
        later record would give a block's old size and label to whatever took its address)."""
        watched = self.watched_frees
        self.blocks = {ptr: b for ptr, b in self.blocks.items() if watched.touches(ptr, b[0])}
        self.allocated_from = {ptr: pool for ptr, pool in self.allocated_from.items() if ptr in self.blocks}
        pending = self.pending   # a graph pool's blocks stay in it: their addresses cannot go elsewhere
        routed = {ptr: pool for ptr, pool in pending.unowned.items() if pool != DEFAULT_POOL}
        pending.unmatched += len(pending.unowned) - len(routed)
        pending.unowned = routed

    def freed_since(self, start: int, ptr: int) -> bool:
        return any(type(r) is Free and r.ptr == ptr for r in self._journal.trace.records[start:])

    def pool(self) -> str:
        """The pool an allocation now comes from: the open capture's (its own, or the one it shares)."""
        if self._journal.graph is None:
            return self.eager_pool or DEFAULT_POOL
        return self.capture_pool
