"""Tensors and their memory: allocation from the caching allocator, views, host-side
metadata changes (``set_``, ``resize_``, freeing a storage) and frees.

No kernel runs here except the fill or upload of ``zeros`` and ``from_host``;
every change is a host step and a trace record, which is what the checker
reads to tell what a capture froze.
"""

from __future__ import annotations

import math
from typing import Sequence

from ...memory import DEFAULT_POOL
from ...trace import Alloc, Free, Mutation, View
from ..allocator import Storage
from ..errors import StreamCaptureUnsupported
from ..graph import Capture
from ..stream import Stream
from ..tensor import TensorHandle
from ..values import ZERO, Expr, Sym


class TensorCalls:
    """Creating, viewing, changing and releasing tensors.

    Mixed into ``simlib.engine.runtime.Runtime``, whose state (``trace``, ``streams``, ``_capture``, ...)
    and host clock (``_host``) it uses.
    """

    def _pool_for(self, s: Stream) -> str:
        cap = self._capturing(s)
        return cap.graph.pool() if cap is not None else DEFAULT_POOL

    def empty(self, shape: Sequence[int], label: str | None = None, *, itemsize: int = 2) -> TensorHandle:
        """``torch.empty``: a new storage on the current stream (no kernel runs)."""
        shape = _check_shape(shape, "empty")
        if itemsize <= 0:
            raise ValueError(f"itemsize={itemsize} must be a positive number of bytes")
        step = self._host(self.profile.host_op_us)
        return self._new_tensor(step, shape, label, itemsize)

    def _new_tensor(self, step: int, shape: tuple[int, ...], label: str | None,
                    itemsize: int) -> TensorHandle:
        tid = self._next_id("tensor")
        label = label or f"t{tid}"
        storage = self._allocate(step, tid, label, math.prod(shape) * itemsize)
        return TensorHandle(self, tid, label, storage, shape, 0, itemsize)

    def _allocate(self, step: int, tid: int, label: str, nbytes: int) -> Storage:
        """A block from the caching allocator on the current stream (the graph's pool if captured)."""
        s = self.current_stream
        pool = self._pool_for(s)
        if self._capture is not None and pool == DEFAULT_POOL and not self.allocator.cached(
                nbytes, s.name, pool, self.now):
            self._refuse_unsafe(f"allocating {label!r} ({nbytes} bytes) on stream {s.name!r}, "
                                "which is not being captured, needs a new block (cudaMalloc)")
        ptr = self.allocator.allocate(nbytes, s.name, pool, self.now)
        if nbytes:
            self.trace.records.append(Alloc(step, self.now, tid, label, ptr, nbytes, s.name, pool))
        return Storage(self._next_id("storage"), label, ptr, nbytes, s.name, pool, refs=1)

    def zeros(self, shape: Sequence[int], label: str | None = None, *, itemsize: int = 2) -> TensorHandle:
        t = self.empty(shape, label, itemsize=itemsize)
        self.launch("fill_", writes=[t], fn=lambda: ZERO, role="fill", label=f"zero {t.label}")
        return t

    def from_host(self, shape: Sequence[int], label: str | None = None, *, value: Expr | str,
                  itemsize: int = 2, pinned: bool = False) -> TensorHandle:
        """A new device tensor filled from host data.

        ``pinned=False`` is ``torch.tensor(data, device="cuda")``: a copy from
        pageable host memory synchronises, so it is refused during capture.
        ``pinned=True`` is ``torch.tensor(data).pin_memory().to("cuda",
        non_blocking=True)``: an asynchronous host-to-device copy (role ``h2d``),
        legal under capture, where it becomes a node that copies from the
        capture's host buffer on every replay: replays get ``value`` as it was
        at capture, whatever the host computes now.
        """
        if self._capture is not None and not pinned:
            self._host(self.profile.host_op_us)
            if self._capturing(self.current_stream) is not None:
                self._fail(StreamCaptureUnsupported(
                    f"copying host data into {label!r} while capturing: a pageable host-to-device "
                    "copy synchronises. Create inputs before capture and copy_ into them."))
            self._refuse_unsafe(f"a synchronous host-to-device copy into {label!r}")
        t = self.empty(shape, label, itemsize=itemsize)
        v = Sym(value) if isinstance(value, str) else value
        self.launch("copy_h2d", writes=[t], fn=lambda: v, role="h2d" if pinned else "copy",
                    label=f"upload {t.label}")
        return t

    def weak_ref(self, t: TensorHandle, label: str | None = None) -> TensorHandle:
        """A handle on ``t``'s storage that holds no reference (vLLM's ``weak_ref_tensors``).

        Serving engines keep a graph's output this way so that the block counts
        as free in the pool: the next capture into that pool may take it. The
        handle still reads the address, whatever lives there by then.
        """
        step = self._host(self.profile.host_op_us)
        tid = self._next_id("tensor")
        w = TensorHandle(self, tid, label or f"{t.label}.weak", t.storage, t.shape, t.offset, t.itemsize)
        self._weak.add(tid)
        cap = self._capture
        self.trace.records.append(View(step, self.now, tid, w.label, t.id, w.ptr, w.numel, w.shape,
                                       cap.graph.id if cap else None))
        return w

    def view(self, t: TensorHandle, shape: tuple[int, ...], *, offset: int = 0,
             label: str | None = None) -> TensorHandle:
        """A new handle on ``t``'s storage (``t.view``/slicing)."""
        shape = _check_shape(shape, "view")
        end = (t.offset + offset + math.prod(shape)) * t.itemsize
        reshape_of_freed = not t.storage.nbytes and not offset and math.prod(shape) == t.numel
        if (offset < 0 or end > t.storage.nbytes) and not reshape_of_freed:
            raise ValueError(
                f"view of {t.label!r} with offset {offset} and shape {shape} ends at byte {end}, "
                f"past its storage of {t.storage.nbytes} bytes")
        step = self._host(self.profile.host_op_us)
        t.storage.refs += 1
        tid = self._next_id("tensor")
        v = TensorHandle(self, tid, label or f"{t.label}.view", t.storage, shape,
                         t.offset + offset, t.itemsize)
        cap = self._capture
        self.trace.records.append(View(step, self.now, tid, v.label, t.id, v.ptr, v.numel,
                                       v.shape, cap.graph.id if cap else None))
        return v

    def set_(self, t: TensorHandle, source: TensorHandle | None = None, *, why: str = "") -> TensorHandle:
        """``t.set_(source)``: repoint ``t`` on the host; ``None`` makes it empty (pointer 0).

        ``t`` takes ``source``'s storage, offset and shape, so ``set_`` to a 0-dim
        tensor (``torch.empty([])``) leaves ``t`` one element in a tiny block.
        """
        step = self._host(self.profile.host_op_us)
        old = (t.ptr, t.numel, t.shape)
        old_storage = t.storage
        if source is None:
            t.storage = Storage(self._next_id("storage"), f"{t.label}.empty", 0, 0,
                                self.current_stream.name, DEFAULT_POOL, refs=1)
            t.shape, t.offset = (0,), 0
        else:
            source.storage.refs += 1
            t.storage, t.shape, t.offset = source.storage, source.shape, source.offset
        cap = self._capture
        self.trace.records.append(Mutation(step, self.now, "set_", t.id, t.label, *old,
                                           t.ptr, t.numel, t.shape,
                                           cap.graph.id if cap else None, why))
        self._drop(old_storage, step)
        return t

    def resize_(self, t: TensorHandle, shape: tuple[int, ...]) -> TensorHandle:
        """``t.resize_(shape)``: grows into a new storage when the old one is too small."""
        shape = _check_shape(shape, "resize_")
        step = self._host(self.profile.host_op_us)
        old = (t.ptr, t.numel, t.shape)
        old_storage = t.storage
        nbytes = (t.offset + math.prod(shape)) * t.itemsize
        if nbytes > old_storage.nbytes:
            fresh = self._new_tensor(step, (math.prod(shape),), t.label, t.itemsize)
            t.storage, t.offset = fresh.storage, 0
        t.shape = shape
        cap = self._capture
        self.trace.records.append(Mutation(step, self.now, "resize_", t.id, t.label, *old,
                                           t.ptr, t.numel, t.shape,
                                           cap.graph.id if cap else None))
        if t.storage is not old_storage:
            self._drop(old_storage, step)
        return t

    def resize_storage_(self, t: TensorHandle, nbytes: int, *, why: str = "") -> TensorHandle:
        """``t.untyped_storage().resize_(nbytes)``: free the block, or give a freed storage a new one.

        Every handle on the storage keeps its shape (FSDP frees parameters this
        way). After ``resize_(0)`` they all have pointer 0 but still their
        elements: a torch op refuses them on the host (``StorageNotAllocated``),
        while a raw-pointer kernel launches with pointer 0 and faults on the
        device. ``resize_(n)`` of a freed storage allocates a fresh, uninitialised
        block on the current stream (resizing a live block is not modelled).
        """
        if not isinstance(nbytes, int) or isinstance(nbytes, bool) or nbytes < 0:
            raise ValueError(f"resize_storage_: nbytes={nbytes!r} must be a non-negative int")
        storage = t.storage
        if nbytes and storage.nbytes and nbytes != storage.nbytes:
            raise ValueError(
                f"resize_storage_: {t.label!r}'s storage holds {storage.nbytes} bytes; simlib models "
                f"resizing a storage to 0 (free) or a freed one back up, not to {nbytes} bytes")
        step = self._host(self.profile.host_op_us)
        old = (t.ptr, t.numel, t.shape)
        if not nbytes and storage.nbytes:
            self._free_block(storage, step)
            storage.ptr, storage.nbytes = 0, 0
        elif nbytes and not storage.nbytes:
            fresh = self._allocate(step, t.id, storage.label, nbytes)
            storage.ptr, storage.nbytes, storage.stream, storage.pool = (
                fresh.ptr, fresh.nbytes, fresh.stream, fresh.pool)
        cap = self._capture
        self.trace.records.append(Mutation(step, self.now, "untyped_storage().resize_", t.id,
                                           t.label, *old, t.ptr, t.numel, t.shape,
                                           cap.graph.id if cap else None, why))
        return t

    def record_stream(self, t: TensorHandle, s: Stream) -> None:
        """``t.record_stream(s)``: the caching allocator will not reuse ``t``'s block for others
        until the work ``s`` has queued when the block is freed is done.

        A use on the block's own stream is ignored, as in PyTorch. Freed during a
        capture, the block is not handed out again before the capture ends (see
        ``simlib.memory``), which is what makes it the fix for a reuse-after-free
        race inside a graph.
        """
        if not isinstance(s, Stream):
            raise TypeError(f"record_stream() takes a Stream, got {type(s).__name__}")
        self._host(self.profile.host_op_us)
        storage = t.storage
        if storage.nbytes and s.name != storage.stream:
            uses = storage.stream_uses if storage.stream_uses is not None else {}
            uses[s.name] = uses.get(s.name, False) or self._capture is not None
            storage.stream_uses = uses

    def release(self, t: TensorHandle) -> None:
        """Drop this handle's reference (``del t``); the last one frees the block."""
        self._release(t, self._host(self.profile.host_op_us))

    def _release(self, t: TensorHandle, step: int) -> None:
        """``t`` lets go of its storage at host step ``step``."""
        storage = t.storage
        t.storage = Storage(-1, f"{t.label}.released", 0, 0, storage.stream, DEFAULT_POOL)
        t.shape = (0,)
        if t.id in self._weak:
            return              # a weak handle holds no reference to drop
        self._drop(storage, step)

    def _drop(self, storage: Storage, step: int) -> None:
        storage.refs -= 1
        if storage.refs > 0 or storage.freed or storage.nbytes == 0:
            return
        storage.freed = True
        self._free_block(storage, step)

    def _free_block(self, storage: Storage, step: int) -> None:
        """The host frees ``storage``'s block: back to its pool now, or, with recorded stream
        uses, once their work is done (held until the end of a capture in progress)."""
        ptr, nbytes, stream, pool = storage.ptr, storage.nbytes, storage.stream, storage.pool
        uses, storage.stream_uses = storage.stream_uses, None
        cap = self._capture
        if not uses:
            self.allocator.release(ptr, nbytes, stream, pool)
        elif cap is not None:
            cap.held.append((ptr, nbytes, stream, pool, uses))
        else:
            until = max(self.streams[u].ready for u in uses)
            self.allocator.release_after(until, ptr, nbytes, stream, pool)
        self.trace.records.append(Free(step, self.now, storage.label, ptr, nbytes, stream, pool,
                                       cap.graph.id if cap else None))

    def _release_held(self, cap: Capture) -> None:
        """At the end of a capture: uses recorded during it are done (the capture joined those
        streams); uses from before wait for what their streams have queued now."""
        for ptr, nbytes, stream, pool, uses in cap.held:
            before = [self.streams[u].ready for u, during in uses.items() if not during]
            if before:
                self.allocator.release_after(max(before), ptr, nbytes, stream, pool)
            else:
                self.allocator.release(ptr, nbytes, stream, pool)


def _check_shape(shape: Sequence[int], what: str) -> tuple[int, ...]:
    shape = tuple(shape)
    if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise ValueError(f"{what}: shape {list(shape)} must be a sequence of non-negative ints")
    return shape
