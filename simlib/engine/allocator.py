"""Storages and the caching allocator.

A ``Storage`` owns a block of device addresses; tensor handles point into it.
The ``CachingAllocator`` hands out concrete addresses the way PyTorch's does
in the respects that matter here:

* sizes round up to 512 bytes; a zero-byte storage has address 0;
* a freed block is cached, not returned, and is handed out again to the next
  request of the same rounded size *on the same stream* (no other stream may
  reuse it, exactly like PyTorch), lowest address first;
* while a stream is captured, its allocations come from the graph's private
  pool, and blocks freed during the capture go back to that pool, so a stale
  pointer frozen in one node can alias a newer tensor written by another.

* ``record_stream``: a block freed while other streams have recorded uses is
  not handed out again until the work those streams had queued when it was
  freed is done (PyTorch records an event on each and polls them at the next
  allocation). During a capture the allocator may not poll events, so such a
  block is *held* until the capture ends: it is not handed out again inside
  the capture at all. When the capture ends, the uses recorded during it are
  dropped (the capture joined those streams back, so their captured work is
  ordered before anything that follows), and uses recorded before it wait for
  their streams' work queued at that moment (PyTorch's
  ``needs_events_deferred_until_no_capture``, default allocator settings).

Which block a request gets is the allocator's choice, not the program's: on a
GPU the next request may take another block (another size class, another
stream's list) and leave a freed one untouched for a while. ``reuse_default=False``
is that world: a block freed in the default pool is never handed out again, so
a replay that reads a freed block still finds the old bytes. A freed-block
hazard goes wrong in one world and stays hidden in the other; ``explore``
(``simlib.engine.schedules``) runs both. Graph pools reuse
their blocks either way: a capture lays them out once.

Not modelled: splitting and merging blocks (a freed block is reused only for
the same rounded size), the small/large pool split, and returning memory to
the driver.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from ..memory import DEFAULT_POOL

GRANULARITY = 512
_POOL_BASE = {DEFAULT_POOL: 0x7F00_0000_0000}
_GRAPH_POOL_BASE = 0x7E00_0000_0000
_GRAPH_POOL_STRIDE = 0x0001_0000_0000


def round_size(nbytes: int) -> int:
    return -(-nbytes // GRANULARITY) * GRANULARITY


@dataclass
class Storage:
    """A device block shared by every tensor handle (view) that points into it."""

    id: int
    label: str
    ptr: int
    nbytes: int
    stream: str
    pool: str
    refs: int = 0
    freed: bool = False
    # record_stream: stream name -> recorded while a capture was underway
    stream_uses: dict[str, bool] | None = None

    def __repr__(self) -> str:
        state = "freed" if self.freed else f"refs={self.refs}"
        return f"<Storage {self.label!r} {hex(self.ptr)} {self.nbytes}B {self.pool}/{self.stream} {state}>"


@dataclass
class CachingAllocator:
    """Per-pool bump allocation plus per-(pool, stream, size) free lists.

    ``_pending`` holds blocks freed with recorded stream uses, each with the
    device time at which the work of those streams is done; an allocation at
    host time ``now`` first returns every block whose time has come.
    """

    reuse_default: bool = True   # hand a block freed in the default pool out again (the module doc)
    _next: dict[str, int] = field(default_factory=dict)
    _cached: dict[tuple[str, str, int], list[int]] = field(default_factory=dict)
    _pending: list[tuple[float, int, int, str, str]] = field(default_factory=list)

    def allocate(self, nbytes: int, stream: str, pool: str, now: float = 0.0) -> int:
        if nbytes < 0:
            raise ValueError(f"cannot allocate {nbytes} bytes; sizes must be >= 0")
        if nbytes == 0:
            return 0
        if self._pending:
            self._settle(now)
        size = round_size(nbytes)
        cached = self._cached.get((pool, stream, size)) if self.reuse_default or pool != DEFAULT_POOL else None
        if cached:
            return heapq.heappop(cached)
        ptr = self._next.get(pool, _pool_base(pool))
        self._next[pool] = ptr + size
        return ptr

    def cached(self, nbytes: int, stream: str, pool: str, now: float = 0.0) -> bool:
        """Would ``allocate`` reuse a cached block (rather than ask the driver, cudaMalloc)?"""
        if self._pending:
            self._settle(now)
        return nbytes == 0 or ((self.reuse_default or pool != DEFAULT_POOL)
                               and bool(self._cached.get((pool, stream, round_size(nbytes)))))

    def release(self, ptr: int, nbytes: int, stream: str, pool: str) -> None:
        if ptr == 0:
            return
        heapq.heappush(self._cached.setdefault((pool, stream, round_size(nbytes)), []), ptr)

    def release_after(self, until: float, ptr: int, nbytes: int, stream: str, pool: str) -> None:
        """Cache the block once device time ``until`` has passed (record_stream's events)."""
        if ptr:
            heapq.heappush(self._pending, (until, ptr, nbytes, stream, pool))

    def _settle(self, now: float) -> None:
        pending = self._pending
        while pending and pending[0][0] <= now:
            _, ptr, nbytes, stream, pool = heapq.heappop(pending)
            self.release(ptr, nbytes, stream, pool)


def _pool_base(pool: str) -> int:
    if pool in _POOL_BASE:
        return _POOL_BASE[pool]
    return _GRAPH_POOL_BASE + int(pool.removeprefix("graph")) * _GRAPH_POOL_STRIDE
