"""The host thread and its CUDA runtime: the API a simulated program calls.

A program is ordinary Python that calls a ``Runtime`` the way real code calls
``torch`` and ``torch.cuda``. Every call is one host step: it costs host time,
is appended to ``rt.trace``, and runs in program order. Launches are
asynchronous: the host snapshots the arguments, schedules the kernel on the
device model and moves on. Under capture, launches become graph nodes that run
only when the graph replays, with the arguments frozen at capture time.

    rt = Runtime()
    x = rt.from_host((16, 512), "x", value="x1")
    with rt.graph(label="decode") as g:
        y = rt.op("mlp", x, out_shape=(16, 512), role="shared")
    x.copy_(rt.from_host((16, 512), "x_new", value="x2"))
    g.replay()
    rt.read(y)            # -> mlp(x2)
"""

from __future__ import annotations

import heapq
import itertools
import math
from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterator, Sequence

from .device import Device, KernelFn
from .errors import (CapturedEvent, CaptureError, IllegalAddress, ShapeMismatch,
                     StorageNotAllocated, StreamCaptureImplicit, StreamCaptureInvalidated,
                     StreamCaptureIsolation, StreamCaptureUnjoined,
                     StreamCaptureUnsupported)
from .graph import CAPTURE_MODES, GLOBAL, RELAXED, Capture, CapturedGraph
from .memory import DEFAULT_POOL, CachingAllocator, Storage, graph_pool
from .stream import NEVER, Event, Stream
from .tensor import RawArg, TensorHandle
from .timing import Profile, place
from .trace import (Alloc, Arg, DeviceSpan, EventOp, Fault, Free, HostSync, Launch,
                    Mutation, Replay, SkippedLaunch, Trace, View)
from .trace import Capture as CaptureRecord
from .values import ZERO, Call, Expr, Sum, Sym, terms

if TYPE_CHECKING:
    from .schedules import Schedule

ArgLike = TensorHandle | RawArg


class Runtime:
    """One host thread driving one simulated GPU.

    ``schedule`` (``simlib.schedules.Schedule``) adds orders between graph nodes
    that every replay must honour: how the schedule explorer realises each
    order of a race. Without it, replay timing follows the profile alone.
    """

    def __init__(self, profile: Profile | None = None, *, schedule: "Schedule | None" = None) -> None:
        self.profile = profile or Profile()
        self.schedule = schedule
        self.trace = Trace(meta={"source": "simlib", "profile": self.profile.name})
        self.now = 0.0
        self.step = -1
        self.device = Device()
        self.allocator = CachingAllocator()
        self.default_stream = Stream(self, "default", legacy=True)
        self.current_stream = self.default_stream
        self.streams: dict[str, Stream] = {"default": self.default_stream}
        self.graphs: list[CapturedGraph] = []
        self._capture: Capture | None = None
        self._kernels: dict[int, tuple[KernelFn, float]] = {}   # graph node -> (fn, duration)
        self._ids = {kind: itertools.count() for kind in ("tensor", "storage", "launch", "event")}
        self._sticky: IllegalAddress | None = None

    # ------------------------------------------------------------------ host clock
    def _next_id(self, kind: str) -> int:
        return next(self._ids[kind])

    def _host(self, cost: float) -> int:
        """Start one host step: raise a sticky fault, advance the clock and the device."""
        device = self.device
        if self._sticky is not None or device.fault is not None:
            self._raise_fault()
        self.step += 1
        self.now += cost
        if device.due(self.now):
            device.advance(self.now)
            self._raise_fault()
        return self.step

    def _raise_fault(self) -> None:
        if self._sticky is not None:
            raise self._sticky
        fault = self.device.fault
        if fault is not None:
            self._sticky = IllegalAddress(
                f"{fault.detail}. The context is now unusable: every later call fails. "
                "A kernel froze a null pointer; check what the host did to that tensor "
                "before the launch (set_, resize_, dispose) and pass a live buffer.")
            self.trace.records.append(Fault(fault.launch.step, self.now, IllegalAddress.code,
                                            fault.launch.id, fault.detail))
            raise self._sticky

    def _wait_device(self, until: float) -> None:
        """The host blocks until device time ``until``."""
        self.now = max(self.now, until)
        self.device.advance(self.now)
        self._raise_fault()

    # ------------------------------------------------------------------ streams
    def Stream(self, name: str, *, blocking: bool = False) -> Stream:  # noqa: N802 (mirrors torch)
        """A new stream (``torch.cuda.Stream()``); names must be unique."""
        if name in self.streams:
            raise ValueError(f"a stream named {name!r} already exists; pick another name")
        s = Stream(self, name, blocking=blocking)
        self.streams[name] = s
        return s

    def Event(self) -> Event:  # noqa: N802 (mirrors torch)
        return Event(self, self._next_id("event"))

    @contextmanager
    def stream(self, s: Stream) -> Iterator[Stream]:
        """``with torch.cuda.stream(s):`` make ``s`` the current stream."""
        if not isinstance(s, Stream):
            raise TypeError(f"rt.stream() takes a Stream, got {type(s).__name__}")
        previous, self.current_stream = self.current_stream, s
        try:
            yield s
        finally:
            self.current_stream = previous

    def _capturing(self, s: Stream) -> Capture | None:
        cap = self._capture
        return cap if cap is not None and cap.capturing(s) else None

    def _check_capture_ok(self, s: Stream, what: str, subject: str = "") -> Capture | None:
        """Refuse work on a stream whose capture was already invalidated."""
        cap = self._capture
        if cap is None:
            return None
        if subject:
            what = f"{what} {subject!r}"
        cap = cap if cap.capturing(s) else None
        if cap is not None and cap.error is not None:
            raise StreamCaptureInvalidated(
                f"{what} on stream {s.name!r}: the capture of graph {cap.graph.label!r} was "
                f"invalidated earlier by {cap.error.code}; every captured operation fails "
                "until the capture ends. Fix the first error.")
        if cap is None and s.legacy and self._capture is not None and any(
                self.streams[n].blocking for n in self._capture.frontier):
            self._fail(StreamCaptureImplicit(
                f"{what} on the legacy default stream would implicitly wait for a blocking "
                "stream that is being captured. Issue the work on a non-blocking stream."))
        return cap

    def _fail(self, error: CaptureError) -> None:
        """Invalidate the capture in progress with its first error, and raise it."""
        if self._capture is not None and self._capture.error is None:
            self._capture.error = error
        raise error

    def _refuse_unsafe(self, what: str) -> None:
        """Fail a potentially unsafe call made while a strict-mode capture is underway."""
        cap = self._capture
        if cap is not None and cap.mode != RELAXED:
            self._fail(StreamCaptureUnsupported(
                f"{what} while graph {cap.graph.label!r} is being captured in capture mode "
                f"{cap.mode!r}: operation not permitted when stream is capturing. That mode "
                "forbids this thread's potentially unsafe calls even on a stream outside the "
                "capture. Fork the stream into the capture first (alt.wait_stream(main)) so its "
                "work is captured, or move the call out of the captured region."))

    def record_event(self, event: Event, s: Stream) -> None:
        step = self._host(self.profile.host_op_us)
        cap = self._check_capture_ok(s, "event.record()")
        if cap is not None:
            event.graph, event.nodes, event.time = cap.graph.id, cap.frontier[s.name], None
        else:
            event.graph, event.nodes, event.time = None, (), s.ready
        event.stream = s.name
        self.trace.records.append(EventOp(step, self.now, "record", event.id, s.name,
                                          event.graph, event.nodes))

    def wait_event(self, s: Stream, event: Event) -> None:
        step = self._host(self.profile.host_op_us)
        cap = self._check_capture_ok(s, "stream.wait_event()")
        if event.captured:
            active = self._capture
            if active is None or active.graph.id != event.graph:
                raise CapturedEvent(
                    f"stream {s.name!r} waits on event {event.id}, last recorded inside the "
                    f"capture of graph {event.graph}, which has ended. Record the event again "
                    "outside the capture before waiting on it.")
            # Waiting on a captured event pulls the stream into the capture (a fork).
            current = active.frontier.get(s.name, ())
            active.frontier[s.name] = tuple(dict.fromkeys(current + event.nodes))
        elif cap is not None and event.time is not None:
            self._fail(StreamCaptureIsolation(
                f"stream {s.name!r} is being captured and waits on event {event.id}, recorded "
                f"outside the capture on {event.stream!r}. A graph cannot depend on uncaptured "
                "work: record the event inside the capture, or finish that work before "
                "capture begins."))
        elif event.time is not None:
            s.waits = max(s.waits, event.time)
        self.trace.records.append(EventOp(step, self.now, "wait", event.id, s.name,
                                          event.graph, event.nodes))

    def wait_stream(self, s: Stream, other: Stream) -> None:
        """``s.wait_stream(other)``: record an event on ``other`` and wait on it."""
        event = self.Event()
        self.record_event(event, other)
        self.wait_event(s, event)

    def query_event(self, event: Event) -> bool:
        step = self._host(self.profile.host_op_us)
        self._refuse_captured_event(event, "event.query()")
        self._refuse_unsafe(f"event.query() on event {event.id}")
        self.trace.records.append(EventOp(step, self.now, "query", event.id, None, None))
        return event.time is None or event.time <= self.now

    def synchronize_event(self, event: Event) -> None:
        step = self._host(self.profile.host_op_us)
        self._refuse_captured_event(event, "event.synchronize()")
        self._refuse_unsafe(f"event.synchronize() on event {event.id}")
        self.trace.records.append(EventOp(step, self.now, "synchronize", event.id, None, None))
        if event.time is not None:
            self._wait_device(event.time)

    def _refuse_captured_event(self, event: Event, what: str) -> None:
        if event.captured:
            raise CapturedEvent(
                f"{what} on event {event.id}, last recorded inside the capture of graph "
                f"{event.graph}: a captured event marks a point in a graph, not in time, so the "
                "host cannot ask whether it happened. Query an event recorded outside capture.")

    def synchronize_stream(self, s: Stream) -> None:
        step = self._host(self.profile.host_op_us)
        if self._capturing(s) is not None:
            self._fail(StreamCaptureUnsupported(
                f"stream.synchronize() on {s.name!r} while it is being captured: there is no "
                "device work to wait for during capture. Move the sync out of the captured region."))
        self._refuse_unsafe(f"stream.synchronize() on {s.name!r}")
        self.trace.records.append(HostSync(step, self.now, "stream.synchronize", "", s.name))
        self._wait_device(s.ready)

    def synchronize(self) -> None:
        """``torch.cuda.synchronize()``: the host waits for every stream."""
        step = self._host(self.profile.host_op_us)
        if self._capture is not None:
            self._fail(StreamCaptureUnsupported(
                "torch.cuda.synchronize() while a stream is being captured; a device-wide sync "
                "is not permitted during capture. Move the sync before or after the capture."))
        self.trace.records.append(HostSync(step, self.now, "synchronize", "", None))
        self._wait_device(max(s.ready for s in self.streams.values()))

    # ------------------------------------------------------------------ memory
    def _pool_for(self, s: Stream) -> str:
        cap = self._capturing(s)
        return graph_pool(cap.graph.id) if cap is not None else DEFAULT_POOL

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
                  itemsize: int = 2) -> TensorHandle:
        """A tensor filled from host data (``torch.tensor(data, device="cuda")``).

        A copy from pageable host memory synchronises, so it is refused during capture.
        """
        if self._capture is not None:
            self._host(self.profile.host_op_us)
            if self._capturing(self.current_stream) is not None:
                self._fail(StreamCaptureUnsupported(
                    f"copying host data into {label!r} while capturing: a pageable host-to-device "
                    "copy synchronises. Create inputs before capture and copy_ into them."))
            self._refuse_unsafe(f"a synchronous host-to-device copy into {label!r}")
        t = self.empty(shape, label, itemsize=itemsize)
        v = Sym(value) if isinstance(value, str) else value
        self.launch("copy_h2d", writes=[t], fn=lambda: v, role="copy", label=f"upload {t.label}")
        return t

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

    def sleep(self, duration_us: float, label: str = "sleep") -> Launch | None:
        """``torch.cuda._sleep(cycles)``: a kernel on the current stream that only spins."""
        return self.launch("sleep", label=label, duration_us=duration_us)

    def release(self, t: TensorHandle) -> None:
        """Drop this handle's reference (``del t``); the last one frees the block."""
        step = self._host(self.profile.host_op_us)
        storage = t.storage
        t.storage = Storage(-1, f"{t.label}.released", 0, 0, storage.stream, DEFAULT_POOL)
        t.shape = (0,)
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

    # ------------------------------------------------------------------ kernels
    def launch(self, kernel: str, *, reads: Sequence[ArgLike] = (), writes: Sequence[ArgLike] = (),
               fn: KernelFn | None = None, role: str = "other", label: str | None = None,
               duration_us: float | None = None, pdl: bool = False) -> Launch | None:
        """Launch ``kernel`` on the current stream; returns its record, or None if skipped.

        The host reads every argument's pointer, size and shape *now* and freezes
        them. ``fn`` maps the values read to the values written (one per entry of
        ``writes``); by default each output is ``kernel(inputs...)``. Like PyTorch,
        an op whose outputs all have zero elements launches nothing, but a raw
        pointer argument (``raw(t, n)``) always launches.
        """
        s = self.current_stream
        step = self._host(self.profile.launch_host_us)
        cap = self._check_capture_ok(s, "launching", kernel)
        label = label or kernel
        if fn is None:
            fn = _default_fn(kernel, len(writes))
        try:
            args = [_snapshot(a, _IN[i], "r") for i, a in enumerate(reads)]
            args += [_snapshot(a, _OUT[i], "w") for i, a in enumerate(writes)]
        except StorageNotAllocated as exc:
            raise StorageNotAllocated(f"{label}: {exc.detail}") from None
        args = tuple(args)
        if writes and all(type(a) is TensorHandle and a.numel == 0 for a in writes):
            self.trace.records.append(SkippedLaunch(step, self.now, kernel, label, role, s.name,
                                                    cap.graph.id if cap else None,
                                                    "every output has zero elements", args))
            return None
        duration = self.profile.duration(role, kernel) if duration_us is None else duration_us
        if duration < 0:
            raise ValueError(f"duration_us={duration} for {kernel!r} must be >= 0")
        lid = self._next_id("launch")
        if cap is not None:
            record = Launch(step, self.now, lid, kernel, label, role, s.name, args,
                            cap.graph.id, cap.frontier[s.name], pdl)
            cap.frontier[s.name] = (lid,)
            cap.graph.nodes.append(record)
            self._kernels[lid] = (fn, duration)
            self.trace.records.append(record)
            return record
        record = Launch(step, self.now, lid, kernel, label, role, s.name, args, None, (), pdl)
        self.trace.records.append(record)
        self._run_eager(record, s, fn, duration)
        return record

    def _run_eager(self, record: Launch, s: Stream, fn: KernelFn, duration: float) -> None:
        waits = s.waits
        if s.legacy:   # the legacy stream waits for every blocking stream ...
            waits = max([waits] + [o.ready for o in self.streams.values() if o.blocking and o is not s])
        elif s.blocking:  # ... and every blocking stream waits for the legacy stream
            waits = max(waits, self.default_stream.ready)
        p = self.profile
        slot = place(self.now + p.launch_latency_us, duration, s.tail_end, s.tail_start,
                     waits if waits != NEVER else None, p.stream_gap_us, record.pdl, p)
        s.tail_start, s.tail_end, s.waits = slot.start, slot.end, NEVER
        self.trace.records.append(DeviceSpan(record.step, self.now, record.id, s.name,
                                             slot.start, slot.end, "eager"))
        self.device.schedule(record, slot, fn)

    def op(self, kernel: str, *inputs: TensorHandle, out_shape: Sequence[int], role: str = "other",
           label: str | None = None, fn: KernelFn | None = None, duration_us: float | None = None,
           pdl: bool = False) -> TensorHandle:
        """An out-of-place op: allocate the output on the current stream, then launch."""
        out = self.empty(out_shape, label or kernel)
        self.launch(kernel, reads=inputs, writes=[out], fn=fn, role=role, label=label,
                    duration_us=duration_us, pdl=pdl)
        return out

    def linear(self, name: str, x: TensorHandle, in_features: int, out_features: int, *,
               role: str = "other", label: str | None = None, fn: KernelFn | None = None,
               out: TensorHandle | None = None) -> TensorHandle:
        """``x @ W.T`` for a weight of shape (out_features, in_features), shape-checked like torch."""
        step_label = label or name
        if not x.shape:
            self._host(self.profile.host_op_us)
            raise ShapeMismatch(
                f"{step_label}: both arguments to linear need to be at least 1D, but they are 0D "
                f"and 2D; input {x.label!r} is a 0-dim tensor. Was it set_ to a scalar "
                "(dispose) before this op?")
        if len(x.shape) != 2 or x.shape[-1] != in_features:
            self._host(self.profile.host_op_us)
            rows = x.shape[0] if len(x.shape) == 2 else 1
            raise ShapeMismatch(
                f"{step_label}: mat1 and mat2 shapes cannot be multiplied "
                f"({rows}x{x.shape[-1] if x.shape else 0} and {in_features}x{out_features}); "
                f"input {x.label!r} has shape {list(x.shape)} but the weight expects "
                f"{in_features} features. Was {x.label!r} emptied (set_/dispose) before this op?")
        fn = fn or (lambda v: Call(name, (v,)))
        if out is None:
            return self.op(name, x, out_shape=(x.shape[0], out_features), role=role,
                           label=step_label, fn=fn)
        self.launch(name, reads=[x], writes=[out], role=role, label=step_label, fn=fn)
        return out

    def add(self, *tensors: TensorHandle, label: str = "add", role: str = "merge",
            pdl: bool = False) -> TensorHandle:
        """``a + b (+ c ...)`` with torch's shape check (no broadcasting modelled)."""
        if len(tensors) < 2:
            raise ValueError(f"{label}: add() needs at least two tensors, got {len(tensors)}")
        a = tensors[0]
        for b in tensors[1:]:
            if a.shape != b.shape:
                self._host(self.profile.host_op_us)
                dim = next((i for i, (p, q) in enumerate(zip(a.shape, b.shape)) if p != q),
                           min(len(a.shape), len(b.shape)))
                p = a.shape[dim] if dim < len(a.shape) else 1
                q = b.shape[dim] if dim < len(b.shape) else 1
                raise ShapeMismatch(
                    f"{label}: the size of tensor a ({p}) must match the size of tensor b ({q}) "
                    f"at dimension {dim}: {a.label!r} is {list(a.shape)}, {b.label!r} is "
                    f"{list(b.shape)}")
        return self.op(label, *tensors, out_shape=a.shape, role=role, label=label,
                       fn=lambda *vals: Sum(tuple(t for v in vals for t in terms(v))), pdl=pdl)

    def copy_(self, dst: TensorHandle, src: TensorHandle) -> TensorHandle:
        """``dst.copy_(src)``: a device copy (how new inputs reach a captured graph)."""
        if dst.numel != src.numel:
            self._host(self.profile.host_op_us)
            raise ShapeMismatch(f"copy_: {dst.label!r} has {dst.numel} elements but "
                                f"{src.label!r} has {src.numel}")
        self.launch("copy_", reads=[src], writes=[dst], fn=lambda v: v, role="copy",
                    label=f"copy {src.label} -> {dst.label}")
        return dst

    def clone(self, t: TensorHandle, label: str | None = None) -> TensorHandle:
        out = self.empty(t.shape, label or f"{t.label}.clone", itemsize=t.itemsize)
        self.launch("clone", reads=[t], writes=[out], fn=lambda v: v, role="copy",
                    label=f"clone {t.label}")
        return out

    def item(self, t: TensorHandle) -> Expr:
        """``t.item()``: copy to the host and wait, so it is illegal during capture."""
        s = self.current_stream
        step = self._host(self.profile.host_op_us)
        if self._capturing(s) is not None:
            self._fail(StreamCaptureUnsupported(
                f"{t.label!r}.item() reads a device value on the host while stream {s.name!r} is "
                "being captured; the value does not exist until replay. Keep the value on the "
                "device (use a tensor op instead) or read it after replay."))
        self.trace.records.append(HostSync(step, self.now, "item", t.label, s.name))
        self._wait_device(s.ready)
        return self.device.memory.read(t.ptr, t.nbytes)

    def read(self, t: TensorHandle) -> Expr:
        """What ``t`` holds once all device work is done (a test/notebook helper)."""
        self.synchronize()
        return self.device.memory.read(t.ptr, t.nbytes) if t.nbytes else Sym("<empty>")

    # ------------------------------------------------------------------ capture and replay
    @contextmanager
    def graph(self, stream: Stream | None = None, *, label: str = "graph",
              inputs: Sequence[TensorHandle] = (),
              capture_error_mode: str = GLOBAL) -> Iterator[CapturedGraph]:
        """``with torch.cuda.graph(g, stream=..., capture_error_mode=...)``: capture everything issued inside.

        Like PyTorch, it synchronises the device first and captures on a side
        stream of its own unless ``stream`` is given; that stream is current for
        the duration. ``inputs`` names the static input buffers that replays
        must refresh (used by the checker's stale-input rule).
        ``capture_error_mode`` says which calls are forbidden meanwhile on
        streams outside the capture (``simlib.graph.CAPTURE_MODES``).
        """
        if capture_error_mode not in CAPTURE_MODES:
            raise ValueError(f"capture_error_mode={capture_error_mode!r} is not a valid choice; use "
                             "one of: " + ", ".join(repr(m) for m in CAPTURE_MODES))
        if self._capture is not None:
            raise ValueError("simlib models one capture at a time; end the capture of "
                             f"{self._capture.graph.label!r} before starting another")
        self.synchronize()
        if stream is None:
            name = f"capture{len(self.graphs)}"
            stream = self.streams.get(name) or self.Stream(name)
        g = self._begin_capture(stream, label, capture_error_mode)
        previous, self.current_stream = self.current_stream, stream
        try:
            yield g
        except BaseException:
            self.current_stream = previous
            self._end_capture(g, inputs, failing=True)
            raise
        self.current_stream = previous
        self._end_capture(g, inputs, failing=False)

    def _begin_capture(self, stream: Stream, label: str, mode: str = GLOBAL) -> CapturedGraph:
        step = self._host(self.profile.host_op_us)
        if stream.legacy:
            raise StreamCaptureUnsupported(
                "CUDA graphs must be captured on a non-default stream (PyTorch refuses the "
                "legacy default stream, which synchronises implicitly). Capture on rt.Stream(...) "
                "or let rt.graph() create a side stream.")
        g = CapturedGraph(self, len(self.graphs), label, stream.name)
        self.graphs.append(g)
        self._capture = Capture(g, stream, {stream.name: ()}, mode=mode)
        self.trace.records.append(CaptureRecord(step, self.now, "begin", g.id, stream.name))
        return g

    def _end_capture(self, g: CapturedGraph, inputs: Sequence[TensorHandle], *, failing: bool) -> None:
        cap = self._capture
        assert cap is not None and cap.graph is g
        step = self._host(self.profile.host_op_us)
        error = cap.error
        if error is None and not failing:
            unjoined = cap.unjoined()
            if unjoined:
                error = StreamCaptureUnjoined(
                    f"capture of {g.label!r} ended on {cap.origin.name!r} while stream(s) "
                    f"{unjoined} still had captured work the origin stream never waited for. "
                    f"Join them back first: {cap.origin.name}.wait_stream({unjoined[0]}).")
        elif error is not None:
            error = StreamCaptureInvalidated(
                f"capture of {g.label!r} ended after it was invalidated by {error.code}")
        self._capture = None
        self._release_held(cap)
        g.inputs = tuple(inputs)
        g.ok = error is None and not failing
        self.trace.records.append(CaptureRecord(
            step, self.now, "end", g.id, cap.origin.name, tuple(t.ptr for t in inputs),
            error.code if error else ("aborted" if failing else None)))
        if error is not None and not failing:
            raise error

    def replay(self, g: CapturedGraph, stream: Stream | None = None) -> None:
        """``g.replay()``: run every node with the arguments frozen at capture."""
        s = stream or self.current_stream
        step = self._host(self.profile.graph_launch_us)
        if not g.ok:
            raise ValueError(f"graph {g.label!r} cannot be replayed: its capture failed")
        if self._capture is not None:
            raise ValueError("replaying a graph inside another capture is not modelled")
        p = self.profile
        start0 = max(self.now + p.launch_latency_us, s.ready)
        by_id: dict[int, tuple[Launch, float, float]] = {}
        end_all = start0
        index = g.replays
        lanes = _Lanes()
        extra = self._scheduled_deps(g)
        if extra:   # lanes follow the capture order; the schedule only delays nodes
            opened_lane = {n.id: lanes.assign(n) for n in g.nodes}
        for node in _topological(g.nodes, extra) if extra else g.nodes:
            deps = node.deps + extra.get(node.id, ()) if extra else node.deps
            same = [by_id[d] for d in deps if by_id[d][0].stream == node.stream]
            cross = [by_id[d][2] for d in deps if by_id[d][0].stream != node.stream]
            prev = max(same, key=lambda t: t[2]) if same else None
            opened = opened_lane[node.id] if extra else lanes.assign(node)
            issue = start0 + (p.graph_branch_launch_us if opened else 0.0)
            fn, duration = self._kernels[node.id]
            slot = place(issue, duration, prev[2] if prev else None,
                         prev[1] if prev else start0, max(cross) if cross else None,
                         p.graph_node_gap_us, node.pdl, p)
            by_id[node.id] = (node, slot.start, slot.end)
            end_all = max(end_all, slot.end)
            self.trace.records.append(DeviceSpan(step, self.now, node.id, node.stream, slot.start,
                                                 slot.end, "replay", index))
            self.device.schedule(node, slot, fn)
        s.tail_start, s.tail_end, s.waits = start0, end_all, NEVER
        g.replays += 1
        self.trace.records.append(Replay(step, self.now, g.id, index, s.name))

    def _scheduled_deps(self, g: CapturedGraph) -> dict[int, tuple[int, ...]]:
        """Per node of ``g``, the nodes the schedule says must finish before it starts."""
        if self.schedule is None:
            return {}
        ids = {n.id for n in g.nodes}
        extra: dict[int, tuple[int, ...]] = {}
        for first, then in self.schedule.before:
            if first in ids and then in ids:
                extra[then] = extra.get(then, ()) + (first,)
        return extra


class _Lanes:
    """How a graph executor maps the DAG onto its internal streams ("lanes").

    A replay does not keep the capture's streams. Nodes are placed in capture
    order: a node continues the lane of its first dependency that still ends a
    lane and that no earlier node continued; otherwise it starts a branch, which reuses a lane whose
    work has been joined (its last node has a successor) or opens a new one.
    Measured on an H200, the first kernel of a newly opened lane starts about
    ``graph_branch_launch_us`` after the replay begins, which is why the branch
    captured *second* starts late and issue order shows in replay time.
    """

    def __init__(self) -> None:
        self.continued: set[int] = set()
        self.joined: set[int] = set()
        self.tails: list[int | None] = []

    def assign(self, node: Launch) -> bool:
        """Place ``node``; True if it opened a new lane."""
        self.joined.update(node.deps)
        lane_of = {t: i for i, t in enumerate(self.tails) if t is not None}
        heir = next((d for d in node.deps if d not in self.continued and d in lane_of), None)
        if heir is not None:
            self.continued.add(heir)
            self.tails[lane_of[heir]] = node.id
            return False
        free = next((i for i, t in enumerate(self.tails) if t is None or t in self.joined), None)
        if free is not None:
            self.tails[free] = node.id
            return False
        self.tails.append(node.id)
        return len(self.tails) > 1


def _topological(nodes: list[Launch], extra: dict[int, tuple[int, ...]]) -> list[Launch]:
    """``nodes`` in capture order, except that each waits for its ``extra`` predecessors too."""
    index = {n.id: i for i, n in enumerate(nodes)}
    waiting = {n.id: len({*n.deps, *extra.get(n.id, ())}) for n in nodes}
    successors: dict[int, list[int]] = {}
    for n in nodes:
        for d in {*n.deps, *extra.get(n.id, ())}:
            successors.setdefault(d, []).append(n.id)
    ready = [index[n.id] for n in nodes if not waiting[n.id]]
    heapq.heapify(ready)
    order: list[Launch] = []
    while ready:
        node = nodes[heapq.heappop(ready)]
        order.append(node)
        for succ in successors.get(node.id, ()):
            waiting[succ] -= 1
            if not waiting[succ]:
                heapq.heappush(ready, index[succ])
    if len(order) < len(nodes):
        stuck = [n.label for n in nodes if waiting[n.id]]
        raise ValueError(f"the schedule's orders form a cycle with the graph's edges (nodes "
                         f"{stuck} can never start); order only nodes no path already orders")
    return order


def _check_shape(shape: Sequence[int], what: str) -> tuple[int, ...]:
    shape = tuple(shape)
    if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise ValueError(f"{what}: shape {list(shape)} must be a sequence of non-negative ints")
    return shape


_IN = [f"in{i}" for i in range(64)]
_OUT = [f"out{i}" for i in range(64)]


def _default_fn(kernel: str, outputs: int) -> KernelFn:
    """Each output is ``kernel(inputs...)``."""
    def fn(*vals: Expr) -> tuple[Expr, ...]:
        value = Call(kernel, vals)
        return (value,) * outputs
    return fn


def _snapshot(a: ArgLike, name: str, access: str) -> Arg:
    """Freeze an argument the way a kernel launch does: by value, on the host, now.

    A torch op asks for a typed data pointer and refuses a tensor that has
    elements but no storage; a raw pointer argument (``raw``) takes whatever
    ``data_ptr()`` says, 0 included. ``storage_nbytes`` is what the storage
    holds from the pointer on, so an extent past it shows in the trace.
    """
    if type(a) is TensorHandle or isinstance(a, TensorHandle):
        held = a.storage.nbytes
        if not held:
            if a.numel:
                raise StorageNotAllocated(
                    f"{a.label!r} has {a.numel} elements (shape {list(a._shape)}) but its storage "
                    "was freed (untyped_storage().resize_(0)): the tensor has a non-zero number of "
                    "elements, but its data is not allocated yet. Re-allocate it (resize_ the "
                    "storage back) before this op, or free it only after its last use.")
            return Arg(name, a.id, a.label, 0, 0, a._shape, 0, access, 0)
        itemsize = a.itemsize
        return Arg(name, a.id, a.label, a.storage.ptr + a.offset * itemsize, a.numel, a._shape,
                   a.numel * itemsize, access, held - a.offset * itemsize)
    if isinstance(a, RawArg):
        t = a.tensor
        held = t.storage.nbytes
        return Arg(name, t.id, t.label, t.ptr, a.numel, (a.numel,), a.numel * t.itemsize, access,
                   held - t.offset * t.itemsize if held else 0)
    raise TypeError(f"kernel arguments must be TensorHandle or raw(...), got {type(a).__name__}")
