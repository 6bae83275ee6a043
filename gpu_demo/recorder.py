"""Record what a real PyTorch program does as a ``simlib.trace.Trace``.

``CaptureRecorder`` is a ``TorchDispatchMode``: every aten (or custom) op the
program issues passes through it, and it writes down what the host froze at
that moment, the way a kernel launch freezes its arguments. It needs nothing
from the program: plain ``torch.cuda.Stream``, ``wait_stream``,
``torch.cuda.graph`` and Triton code is recorded as it is.

* each compute op becomes a ``Launch`` on the CUDA stream current when it was
  issued, with one ``Arg`` per tensor (stable id per Python tensor object,
  label, ``data_ptr``, numel, shape, bytes, bytes left in its storage,
  ``r``/``w``/``rw``). An op whose outputs all have zero elements launches no
  kernel in PyTorch: it becomes a ``SkippedLaunch``, still with the arguments
  the host froze;
* a Triton kernel called directly becomes a ``Launch`` named ``triton:<name>``
  (``gpu_demo.patches``); Triton does not say what a kernel writes, so every
  tensor argument is ``rw``;
* view ops become ``View`` records (new handle, its base, pointer, shape) and
  the view inherits its base's label;
* host-side metadata changes (``set_``, ``resize_``, and a storage's
  ``resize_``) become ``Mutation`` records with the old and new pointer, size
  and shape; during a capture, a later read of such a tensor's shape, size or
  length becomes a ``HostRead`` (``gpu_demo.host_reads``);
* ``torch.cuda.graph`` captures become ``Capture`` begin/end records and
  ``CUDAGraph.replay`` a ``Replay``; records made in between carry the graph id;
* from the CUDA runtime (``gpu_demo.hooks``): event record/wait become
  ``EventOp`` records, allocations and frees ``Alloc``/``Free`` records (sized
  from the tensor that got the block, or the storage that lost it, rounded to
  the caching allocator's 512 bytes), synchronizations ``HostSync`` records;
* each captured launch lists the launches it depends on: the previous launch
  on its stream plus whatever its stream waited for through events.

Streams get readable names (``gpu_demo.stream_names``): the stream a capture
began on is ``main``, other streams in a capture ``alt``, ``alt2``...
``gpu_demo.annotate`` marks stay optional labels on top: a tensor's name,
a role, a reason for a mutation, and the logical stream on a CPU.

``record_capture(fn, inputs)`` runs the whole protocol (warm-up, capture,
replays with input refresh): on a GPU for real, on a CPU as a *dry run* in
which ``gpu_demo.streams.dry_capture`` makes the model take its capture path
while nothing is actually captured. The dry run keeps every storage the
capture touches alive (see ``CaptureRecorder.capturing``), so it shows what
the host froze but not how the caching allocator reuses freed blocks: a reuse
after free (checker rule 4) only shows in a real capture.
"""

from __future__ import annotations

import itertools
import time
from collections import defaultdict
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator, Sequence

import torch
from simlib.memory import DEFAULT_POOL, graph_pool
from simlib.spec import MoEConfig
from simlib.trace import (
    Alloc,
    Arg,
    Capture,
    EventOp,
    Fault,
    Free,
    HostRead,
    HostSync,
    Launch,
    Mutation,
    Record,
    Replay,
    SkippedLaunch,
    Trace,
    View,
)
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.weak import WeakIdKeyDictionary

from . import annotate, graphs, hooks, patches
from .annotate import MAIN
from .host_reads import HostReadMode
from .kernels import PDL_OPS
from .outcomes import classify_capture_failure, cuda_error_name, first_error, one_line
from .settings import RunSettings
from .stream_names import StreamNames
from .streams import dry_capture

aten = torch.ops.aten

_METADATA_MUTATIONS = {
    aten.set_, aten.resize_, aten.resize_as_, aten.as_strided_, aten.squeeze_,
    aten.unsqueeze_, aten.transpose_, aten.t_, aten.swapdims_, aten.swapaxes_, aten.detach_,
}
_NO_LAUNCH = {aten.empty, aten.empty_like, aten.empty_strided, aten.new_empty, aten.new_empty_strided}
_OVERWRITES = {aten.copy_, aten.fill_, aten.zero_, aten.normal_, aten.uniform_, aten.random_}
CACHING_ALLOCATOR_BLOCK = 512
STORAGE_RESIZE = "untyped_storage().resize_"


def block_bytes(nbytes: int, device_type: str) -> int:
    """Bytes of the block a storage of ``nbytes`` occupies: the CUDA caching allocator
    rounds up to 512 bytes; other devices' sizes are taken as they are."""
    if device_type != "cuda":
        return nbytes
    return -(-nbytes // CACHING_ALLOCATOR_BLOCK) * CACHING_ALLOCATOR_BLOCK


def storage_bytes_from(t: torch.Tensor) -> int:
    """Bytes of ``t``'s storage from ``t``'s first element to the storage's end."""
    return max(0, t.untyped_storage().nbytes() - t.storage_offset() * t.element_size())


@dataclass
class Device:
    """Where the recorder learns which CUDA stream is current (a seam: tests fake it).

    ``current_stream`` returns the raw ``cudaStream_t`` id, or ``None`` where
    there are no streams (a CPU); ``traced`` says the ``torch.cuda._gpu_trace``
    callbacks report events and syncs, so ``gpu_demo.annotate``'s reports of
    the same would be counted twice.
    """

    current_stream: Callable[[], int | None]
    traced: bool


def cuda_device() -> Device:
    """The real one: the current CUDA stream once CUDA is initialised."""
    def current_stream() -> int | None:
        return torch.cuda.current_stream().cuda_stream if torch.cuda.is_initialized() else None

    return Device(current_stream, torch.cuda.is_available())


@dataclass
class _OpenCapture:
    graph: int
    inputs: tuple[int, ...]
    by_hand: bool                  # opened by ``capturing()``, which also writes its end
    cuda_graph: object | None = None


@dataclass
class _Pending:
    """Allocations the runtime reported during the current op, not yet matched to a tensor."""

    pointers: list[int] = field(default_factory=list)
    unmatched: int = 0


class CaptureRecorder(TorchDispatchMode):
    """Writes every op issued inside ``with recorder:`` into ``recorder.trace``.

    ``device`` is where the current stream comes from (``cuda_device()``);
    ``eager=False`` records nothing outside captures (for whole-process
    checking, where eager work would only grow the trace). Callables in
    ``capture_ended`` are called with each graph id when its capture ends.
    """

    def __init__(self, meta: dict[str, Any] | None = None, *, device: Device | None = None,
                 eager: bool = True) -> None:
        super().__init__()
        self.trace = Trace(meta=dict(meta or {}))
        self.graph: int | None = None
        self.device = device or cuda_device()
        self.eager = eager
        self.capture_ended: list[Callable[[int], None]] = []
        self.streams = StreamNames()
        self._ids: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self._inherited: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self._mutated: WeakIdKeyDictionary = WeakIdKeyDictionary()  # mutated in the open capture
        self._tensor_ids = itertools.count(1)
        self._launch_ids = itertools.count()
        self._graph_ids = itertools.count()
        self._event_ids = itertools.count()
        self._steps = itertools.count()
        self._t0 = time.perf_counter()
        self._open: _OpenCapture | None = None
        self._graph_of: dict[int, int] = {}          # id(CUDAGraph) -> graph id
        self._replays: dict[int, int] = defaultdict(int)
        self._frontier: dict[str, tuple[int, ...]] = {}
        self._held: list[torch.UntypedStorage] | None = None
        self._late_names: dict[int, str] = {}
        self._made_on: dict[int, str] = {}  # storage address -> stream of the op that last made it
        self._events: dict[int, int] = {}   # raw cudaEvent_t -> event id in records
        self._event_deps: dict[int, tuple[int, ...]] = {}
        self._pending = _Pending()
        self._blocks: dict[int, tuple[int, str]] = {}     # block address -> (bytes, label)
        self._releasing: dict[int, tuple[int, str]] = {}  # blocks a mutation is letting go
        self._busy = 0   # >0 while the recorder's own code or an op's internals run
        self._context = ExitStack()

    def __enter__(self) -> "CaptureRecorder":
        super().__enter__()
        self._context.enter_context(annotate.listening(self))
        self._context.enter_context(hooks.listening(self))
        self._context.enter_context(patches.installed(self))
        self._context.enter_context(HostReadMode(self._host_read))
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._context.__exit__(*exc_info)
        super().__exit__(*exc_info)
        self.trace.records = self._finished(self.trace.records)
        if self._pending.unmatched:
            self.trace.meta["allocations_without_a_tensor"] = self._pending.unmatched

    def snapshot(self, graph: int | None = None) -> Trace:
        """The trace so far with final names; with ``graph``, only that graph's records
        and the records of no graph (eager work, host syncs)."""
        records = self.trace.records
        if graph is not None:
            records = [r for r in records if getattr(r, "graph", None) in (None, graph)]
        return Trace(records=self._finished(records), meta=dict(self.trace.meta))

    def named(self, tensor: torch.Tensor, name: str) -> None:
        """A tensor got its name after the op that made it was recorded: records
        made before that show a placeholder, replaced by the name on exit."""
        if tensor in self._ids:
            self._late_names[self._ids[tensor]] = name

    def _finished(self, records: list[Record]) -> list[Record]:
        """``records`` with late names and final stream names."""
        streams = self.streams.final()
        return [self._renamed(r, streams) for r in records]

    def _renamed(self, record: Record, streams: dict[str, str]) -> Record:
        names, changes = self._late_names, {}
        if isinstance(record, (Launch, SkippedLaunch)) and any(a.tensor in names for a in record.args):
            changes["args"] = tuple(replace(a, label=names[a.tensor]) if a.tensor in names else a
                                    for a in record.args)
        elif isinstance(record, (Mutation, View, HostRead, Alloc)) and record.tensor in names:
            changes["label"] = names[record.tensor]
        stream = getattr(record, "stream", None)
        if stream in streams:
            changes["stream"] = streams[stream]
        return replace(record, **changes) if changes else record

    # -- captures ----------------------------------------------------------------

    @contextmanager
    def capturing(self, inputs: Sequence[torch.Tensor] = (), *, hold_storages: bool = False) -> Iterator[int]:
        """Bracket a capture by hand: ``Capture`` begin/end records, graph id on records inside.

        ``torch.cuda.graph`` captures are bracketed without this; a
        ``torch.cuda.graph`` inside joins the capture opened here. ``inputs``
        are the graph's static inputs (checker rule 5 watches them).
        ``hold_storages`` keeps every storage the capture touches alive until it
        ends. The dry run needs it: the CPU allocator would hand a block freed
        by one logical stream straight to the other, an address reuse the CUDA
        caching allocator never makes (its blocks stay with their stream), and
        the checker would report it as a race.
        """
        graph = self._begin(MAIN, tuple(t.data_ptr() for t in inputs), by_hand=True)
        self._held = [] if hold_storages else None
        try:
            yield graph
        except BaseException as exc:
            self._end(exc)
            raise
        self._end(None)

    def on_capture_begin(self, cuda_graph: object) -> None:
        raw = self.device.current_stream()
        stream = self.streams.began_capture(raw) if raw is not None else MAIN
        if self._open is not None and self._open.by_hand and self._open.cuda_graph is None:
            self._open.cuda_graph = cuda_graph
            self._graph_of[id(cuda_graph)] = self._open.graph
            return
        self._begin(stream, (), by_hand=False, cuda_graph=cuda_graph)

    def on_capture_end(self, cuda_graph: object, error: BaseException | None) -> None:
        if self._open is not None and not self._open.by_hand:
            self._end(error)

    def on_replay(self, cuda_graph: object) -> None:
        graph = self._graph_of.get(id(cuda_graph))
        if graph is not None and self._recording():
            self.replay(graph, self._replays[graph])

    def _begin(self, stream: str, inputs: tuple[int, ...], *, by_hand: bool, cuda_graph: object = None) -> int:
        graph = next(self._graph_ids)
        self._emit(Capture, op="begin", graph=graph, stream=stream, inputs=inputs)
        self._open = _OpenCapture(graph, inputs, by_hand, cuda_graph)
        if cuda_graph is not None:
            self._graph_of[id(cuda_graph)] = graph
        self.graph, self._frontier, self._mutated = graph, {}, WeakIdKeyDictionary()
        return graph

    def _end(self, error: BaseException | None) -> None:
        opened, self._open = self._open, None
        self.graph = self._held = None
        message = None if error is None else one_line(first_error(error))
        self._emit(Capture, op="end", graph=opened.graph, stream=MAIN if opened.by_hand else self._stream(),
                   inputs=opened.inputs, error=message)
        for callback in self.capture_ended:
            callback(opened.graph)

    def replay(self, graph: int, index: int) -> None:
        self._replays[graph] = index + 1
        self._emit(Replay, graph=graph, index=index, stream=self._stream())

    def fault(self, exc: BaseException) -> None:
        self._emit(Fault, error=cuda_error_name(str(exc)) or type(exc).__name__, launch=None, detail=one_line(exc))

    # -- what the program says (gpu_demo.annotate) --------------------------------

    def stream_event(self, op: str, event: int, stream: str | None) -> None:
        if self.device.traced and op in ("record", "wait"):
            return  # the CUDA runtime reports the real event (on_event_recorded/waited)
        self._event(op, event, stream)

    def host_sync(self, op: str, what: str) -> None:
        if not self.device.traced:  # else the runtime reports it (on_synchronized)
            self._emit(HostSync, op=op, label=what, stream=annotate.current_stream())

    # -- what the CUDA runtime says (gpu_demo.hooks) -------------------------------

    def on_event_created(self, event: int) -> None:
        self._events[event] = next(self._event_ids)

    def on_event_deleted(self, event: int) -> None:
        self._events.pop(event, None)

    def on_event_recorded(self, event: int, stream: int) -> None:
        self._event("record", self._event_id(event), self._stream_key(stream))

    def on_event_waited(self, event: int, stream: int) -> None:
        self._event("wait", self._event_id(event), self._stream_key(stream))

    def on_allocated(self, ptr: int) -> None:
        self._pending.pointers.append(ptr)

    def on_freed(self, ptr: int) -> None:
        if ptr in self._pending.pointers:  # scratch an op took and gave back
            self._pending.pointers.remove(ptr)
            return
        block = self._releasing.get(ptr) or self._blocks.get(ptr)
        self._blocks.pop(ptr, None)
        if block is not None and self._recording():
            self._free(ptr, *block)

    def on_synchronized(self, op: str, stream: int | None, event: int | None) -> None:
        if self._recording():
            label = "" if event is None else f"event {self._event_id(event)}"
            self._emit(HostSync, op=op, label=label, stream=None if stream is None else self._stream_key(stream))

    def _event_id(self, raw: int) -> int:
        if raw not in self._events:
            self._events[raw] = next(self._event_ids)
        return self._events[raw]

    def _event(self, op: str, event: int, stream: str | None) -> None:
        if not self._recording():
            return
        if op == "record":
            deps = self._frontier.get(stream, ())
            self._event_deps[event] = deps
        else:
            deps = self._event_deps.get(event, ())
            if op == "wait":
                self._frontier[stream] = tuple(sorted({*self._frontier.get(stream, ()), *deps}))
        self._emit(EventOp, op=op, event=event, stream=stream, graph=self.graph, deps=deps)

    # -- what the wrapped methods say (gpu_demo.patches) --------------------------

    def on_triton_launch(self, kernel: str, args: Sequence[tuple[str, Any]]) -> None:
        if self._busy or not self._recording():
            return  # launched by an op the dispatcher already showed
        with self._quiet():
            frozen = tuple(self._arg(name, value, "rw") for name, value in args if isinstance(value, torch.Tensor))
            self._launch(f"triton:{kernel}", kernel, frozen, skips_empty=False)

    @contextmanager
    def resizing(self, storage: torch.UntypedStorage) -> Iterator[None]:
        """``storage.resize_``: a ``Mutation`` of each tensor seen on it, and a ``Free``
        of its block if the resize let the block go."""
        if self._busy or not self._recording():
            yield
            return
        with self._quiet():
            ptr, nbytes = storage.data_ptr(), storage.nbytes()
            on_it = [t for t in list(self._ids.keys()) if ptr and t.untyped_storage().data_ptr() == ptr]
            before = [(t, t.data_ptr(), t.numel(), tuple(t.shape)) for t in on_it]
            label = self._label(on_it[0]) if on_it else f"storage@{ptr:#x}"
            start = len(self.trace.records)
            self._releasing[ptr] = (block_bytes(nbytes, storage.device.type), label)
        try:
            yield
        finally:
            self._releasing.pop(ptr, None)
        with self._quiet():
            for t, *old in before:
                self._mutated_now(STORAGE_RESIZE, t, old)
            if nbytes and storage.data_ptr() != ptr and not self._freed_since(start, ptr):
                self._free(ptr, block_bytes(nbytes, storage.device.type), label)

    # -- what the host reads (gpu_demo.host_reads) --------------------------------

    def _host_read(self, op: str, t: torch.Tensor) -> None:
        if self.graph is None or self._busy or t not in self._mutated:
            return
        with self._quiet():
            self._emit(HostRead, op=op, tensor=self._id(t), label=self._label(t), shape=tuple(t.shape),
                       stream=self._stream(), graph=self.graph)

    # -- dispatch ----------------------------------------------------------------

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001 (torch's signature)
        kwargs = kwargs or {}
        if not self._recording():
            out = func(*args, **kwargs)
            self._pending.pointers.clear()
            return out
        with self._quiet():
            packet = func.overloadpacket
            if packet in _METADATA_MUTATIONS:
                return self._mutation(func, args, kwargs)
            if func.is_view:
                return self._views(func, args, kwargs)
            if packet is aten._local_scalar_dense:
                self._emit(HostSync, op="item", label=self._label(args[0]), stream=self._stream())
                return func(*args, **kwargs)
            inputs = [] if packet in _NO_LAUNCH or packet is aten.detach else self._frozen_args(func, args, kwargs)
            out = func(*args, **kwargs)
            given = {id(a) for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)}
            results = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor) and id(t) not in given]
            self._claim_allocations(results)
            if packet in _NO_LAUNCH or packet is aten.detach:
                return out
            outputs = tuple(self._arg(f"out{i}", t, "w") for i, t in enumerate(results))
            for t in results:
                self._made_on[t.untyped_storage().data_ptr()] = self._stream()
            self._launch(str(func), func._opname, (*inputs, *outputs))
            return out

    def _launch(self, kernel: str, opname: str, args: tuple[Arg, ...], *, skips_empty: bool = True) -> None:
        stream, role = self._stream(), annotate.current_role()
        label = f"{role}/{opname}" if role else opname
        written = [a for a in args if a.writes]
        if skips_empty and written and all(a.numel == 0 for a in written):
            self._emit(SkippedLaunch, kernel=kernel, label=label, role=role, stream=stream, graph=self.graph,
                       reason="every output has zero elements", args=args)
            return
        launch = next(self._launch_ids)
        deps = self._frontier.get(stream, ())
        self._frontier[stream] = (launch,)
        self._emit(
            Launch, id=launch, kernel=kernel, label=label, role=role,
            stream=stream, args=args, graph=self.graph, deps=deps, pdl=kernel in PDL_OPS,
        )

    def _views(self, func, args, kwargs):  # noqa: ANN001
        out = func(*args, **kwargs)
        base = args[0]
        for view in tree_flatten(out)[0]:
            self._inherited[view] = self._label(base)
            self._emit(View, tensor=self._id(view), label=self._label(view), base=self._id(base),
                       ptr=view.data_ptr(), numel=view.numel(), shape=tuple(view.shape), graph=self.graph)
        return out

    def _mutation(self, func, args, kwargs):  # noqa: ANN001
        tensor = args[0]
        old = (tensor.data_ptr(), tensor.numel(), tuple(tensor.shape))
        storage = tensor.untyped_storage()
        ptr, nbytes, ref = storage.data_ptr(), storage.nbytes(), StorageWeakRef(storage)
        block = (block_bytes(nbytes, storage.device.type), self._label(tensor))
        del storage
        start = len(self.trace.records)
        self._releasing[ptr] = block
        try:
            out = func(*args, **kwargs)
        finally:
            self._releasing.pop(ptr, None)
        self._claim_allocations([tensor])
        self._mutated_now(func._opname, tensor, old)
        # The runtime reports a freed CUDA block itself; elsewhere the dropped last
        # reference is the only sign that the block is free.
        if ref.expired() and nbytes and not self._freed_since(start, ptr):
            self._free(ptr, *block)
        return out

    def _mutated_now(self, op: str, tensor: torch.Tensor, old: Sequence[Any]) -> None:
        self._emit(
            Mutation, op=op, tensor=self._id(tensor), label=self._label(tensor),
            old_ptr=old[0], old_numel=old[1], old_shape=tuple(old[2]),
            new_ptr=tensor.data_ptr(), new_numel=tensor.numel(), new_shape=tuple(tensor.shape),
            graph=self.graph, why=annotate.current_why(),
        )
        if self.graph is not None:
            self._mutated[tensor] = True

    def _frozen_args(self, func, args, kwargs) -> list[Arg]:  # noqa: ANN001
        frozen: list[Arg] = []
        for i, spec in enumerate(func._schema.arguments):
            value = args[i] if i < len(args) else kwargs.get(spec.name)
            writes = spec.alias_info is not None and spec.alias_info.is_write
            access = ("w" if spec.name == "out" or func.overloadpacket in _OVERWRITES else "rw") if writes else "r"
            if isinstance(value, torch.Tensor):
                frozen.append(self._arg(spec.name, value, access))
            elif isinstance(value, (list, tuple)):
                frozen += [
                    self._arg(f"{spec.name}[{j}]", t, access) for j, t in enumerate(value) if isinstance(t, torch.Tensor)
                ]
        return frozen

    def _arg(self, name: str, t: torch.Tensor, access: str) -> Arg:
        storage = t.untyped_storage()
        if self._held is not None:
            self._held.append(storage)
        if storage.data_ptr():
            self._blocks[storage.data_ptr()] = (block_bytes(storage.nbytes(), storage.device.type), self._label(t))
        return Arg(
            name=name, tensor=self._id(t), label=self._label(t), ptr=t.data_ptr(), numel=t.numel(),
            shape=tuple(t.shape), nbytes=t.numel() * t.element_size(), access=access,
            storage_nbytes=storage_bytes_from(t),
        )

    # -- memory ------------------------------------------------------------------

    def _claim_allocations(self, results: list[torch.Tensor]) -> None:
        """``Alloc`` for each block the runtime handed out during this op, sized by the
        result tensor that got it; a block no result got (scratch) has no known size."""
        pending = self._pending.pointers
        for t in results:
            storage = t.untyped_storage()
            ptr = storage.data_ptr()
            if ptr in pending:
                pending.remove(ptr)
                nbytes = block_bytes(storage.nbytes(), storage.device.type)
                self._blocks[ptr] = (nbytes, self._label(t))
                self._emit(Alloc, tensor=self._id(t), label=self._label(t), ptr=ptr, nbytes=nbytes,
                           stream=self._stream(), pool=self._pool())
        self._pending.unmatched += len(pending)
        pending.clear()

    def _free(self, ptr: int, nbytes: int, label: str) -> None:
        self._emit(Free, label=label, ptr=ptr, nbytes=nbytes, stream=self._made_on.get(ptr, self._stream()),
                   pool=self._pool(), graph=self.graph)

    def _freed_since(self, start: int, ptr: int) -> bool:
        return any(type(r) is Free and r.ptr == ptr for r in self.trace.records[start:])

    def _pool(self) -> str:
        return DEFAULT_POOL if self.graph is None else graph_pool(self.graph)

    # -- small helpers -----------------------------------------------------------

    def _recording(self) -> bool:
        return self.eager or self.graph is not None

    @contextmanager
    def _quiet(self) -> Iterator[None]:
        """The recorder's own tensor reads inside are not the program's."""
        self._busy += 1
        try:
            yield
        finally:
            self._busy -= 1

    def _stream(self) -> str:
        """The stream work issued now goes to: the current CUDA stream (provisional
        key, see ``StreamNames``), or on a CPU the ``annotate`` mark (``main`` if none)."""
        raw = self.device.current_stream()
        if raw is None:
            return annotate.current_stream()
        return self.streams.saw(raw, capturing=self.graph is not None, mark=annotate.marked_stream())

    def _stream_key(self, raw: int) -> str:
        return self.streams.saw(raw, capturing=self.graph is not None)

    def _id(self, t: torch.Tensor) -> int:
        if t not in self._ids:
            self._ids[t] = next(self._tensor_ids)
        return self._ids[t]

    def _label(self, t: torch.Tensor) -> str:
        return annotate.label_of(t) or self._inherited.get(t) or f"t{self._id(t)}"

    def _emit(self, kind: type[Record], **fields: Any) -> None:
        t_us = round((time.perf_counter() - self._t0) * 1e6, 3)
        self.trace.records.append(kind(step=next(self._steps), t_us=t_us, **fields))


def record_capture(
    fn: Callable[..., Any],
    inputs: Sequence[torch.Tensor],
    *,
    replays: int = 3,
    refresh: str = "fresh",
    meta: dict[str, Any] | None = None,
) -> Trace:
    """Record warm-up, capture and ``replays`` replays of ``fn(*inputs)``.

    ``inputs`` are the captured input buffers. Before each replay they are
    refreshed per ``refresh`` (``fresh`` random values, ``stale``: untouched,
    ``same_as_eager``: the values the warm-up saw). On a GPU the capture and
    replays are real; a capture error ends the recording (``Capture`` end with
    ``error``, ``meta["capture_error"]``) and a replay fault adds a ``Fault``.
    Without CUDA it is a dry run: the capture runs under ``dry_capture()`` and
    the replays are ``Replay`` records only.
    """
    on_gpu = any(t.is_cuda for t in inputs)
    warm_values = [t.clone() for t in inputs]
    recorder = CaptureRecorder({"recorder": "gpu_demo.recorder", "mode": "cuda" if on_gpu else "dry_run",
                                "torch": torch.__version__, **(meta or {})})
    with recorder:
        try:
            if on_gpu:
                graphs.warm_up(lambda: fn(*inputs))
                graph = torch.cuda.CUDAGraph()
                with recorder.capturing(inputs) as graph_id, torch.cuda.graph(graph):
                    fn(*inputs)
            else:
                fn(*inputs)
                with recorder.capturing(inputs, hold_storages=True) as graph_id, dry_capture():
                    fn(*inputs)
        except Exception as exc:  # a capture that fails is a result, not a crash
            recorder.trace.meta["capture_error"] = classify_capture_failure(first_error(exc))
            return recorder.trace
        for index in range(replays):
            _refresh(inputs, warm_values, refresh)
            if not on_gpu:
                recorder.replay(graph_id, index)
                continue
            try:
                graph.replay()  # recorded by the recorder's CUDAGraph.replay wrapper
                torch.cuda.synchronize()
            except RuntimeError as exc:
                recorder.fault(exc)
                break
    return recorder.trace


def _refresh(inputs: Sequence[torch.Tensor], warm_values: Sequence[torch.Tensor], how: str) -> None:
    if how == "stale":
        return
    for t, warm in zip(inputs, warm_values):
        t.copy_(warm if how == "same_as_eager" else torch.randn_like(t))


def record_moe(config: MoEConfig, settings: RunSettings) -> Trace:
    """Record the MoE stack of ``config`` (dry run unless ``settings`` picks CUDA)."""
    from .moe import MoEStack

    model = MoEStack(config, settings)
    generator = torch.Generator().manual_seed(settings.seed + 1)
    residual = settings.random(config.tokens, config.hidden, generator=generator)
    annotate.label(residual, "residual")
    with torch.no_grad():
        return record_capture(
            model, [residual], replays=config.replays, refresh=config.inputs,
            meta={"config": config.to_dict(), "settings": settings.to_dict()},
        )
