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

Streams get readable names (``gpu_demo.record.naming``); ``gpu_demo.record.annotate``
marks stay optional labels on top. ``gpu_demo.record.capture.record_capture``
runs the whole protocol under a recorder, for real or as the CPU dry run.
"""

from __future__ import annotations

import itertools
import time
import weakref
from collections import defaultdict
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Iterator, Sequence

import torch
from torch._C import DisableTorchFunction
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode

from gpu_demo.protocol.cuda_errors import cuda_error_name, first_error, one_line
from gpu_demo.record import annotate, hooks, patches
from gpu_demo.record.annotate import MAIN
from gpu_demo.record.annotate import marks as _marks
from gpu_demo.record.call_site import user_site
from gpu_demo.record.cuda_device import CACHING_ALLOCATOR_BLOCK, Device, block_bytes, cuda_device
from gpu_demo.record.dispatch_mode import QuickDispatchMode
from gpu_demo.record.host_reads import HostReadWatch
from gpu_demo.record.memory_watch import MemoryWatch, Ranges, install_at_bottom, uninstall
from gpu_demo.record.naming import StreamNames, rename_in_place, renamed_copy
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
from gpu_demo.record.triton_access import KernelAccess
from simlib.memory import DEFAULT_POOL, graph_pool
from simlib.trace import (
    Alloc,
    Arg,
    Call,
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

aten = torch.ops.aten
# The recorder's own metadata reads go to ``TensorBase`` directly: an armed ``HostReadWatch``
# wraps ``torch.Tensor``'s readers, and the recorder's reads are not the program's.
_numel = torch._C.TensorBase.numel
_shape = torch._C.TensorBase.shape.__get__
_stride = torch._C.TensorBase.stride
_contiguous = torch._C.TensorBase.is_contiguous
_itemsize = torch._C.TensorBase.element_size
_now = time.perf_counter_ns
_Tensor = torch.Tensor

_OUT = tuple(f"out{i}" for i in range(8))   # output argument names, made once
RECORDS_CAP = 1 << 15   # records held before ``records_full`` is called (a whole process feeds its checker)
SWEEP_AT = 1 << 16   # handles kept before dead tensors' are dropped (then twice the live ones)
UNOWNED_KEPT = 1 << 14   # blocks the runtime handed out that no op has used yet, remembered (``_Pending``)
# The field order ``CaptureRecorder._add`` writes each hot record in (after step, t_us).
POSITIONAL: dict[type[Record], tuple[str, ...]] = {
    Launch: ("id", "kernel", "label", "role", "stream", "args", "graph", "deps", "pdl", "scalars", "site"),
    View: ("tensor", "label", "base", "ptr", "numel", "shape", "graph"),
    Alloc: ("tensor", "label", "ptr", "nbytes", "stream", "pool"),
    Free: ("label", "ptr", "nbytes", "stream", "pool", "graph"),
    EventOp: ("op", "event", "stream", "graph", "deps"),
}
STORAGE_RESIZE = "untyped_storage().resize_"   # the op name a storage's resize_ is recorded under
STORAGE_SWAP = "storage_swap"   # a tensor object's storage changed with no op the dispatcher showed
SWAPPED_UNSEEN = ("its storage changed between two uses with no recorded op (x.data = ..., or a set_ or "
                  "resize_ inside a C++ extension)")


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


@dataclass
class _OpenCapture:
    graph: int
    inputs: tuple[int, ...]
    by_hand: bool                  # opened by ``capturing()``, which also writes its end
    cuda_graph: object | None = None
    pool: str = ""                 # ``Capture.pool``: "" its own, else the shared pool's name


@dataclass(slots=True)
class _Handle:
    """What the recorder knows of one Python tensor object (``CaptureRecorder._handle``)."""

    ref: weakref.ref
    id: int
    label: str   # its ``annotate`` name, else its base's (a view), else ``t<id>`` (``_label``)
    # (pointer, elements, shape) at its last recorded use: a use that finds others had its
    # storage changed under it (``CaptureRecorder._watch``). None: not seen in this recording span.
    seen: tuple[int, int, tuple[int, ...]] | None = None


@dataclass
class _Pending:
    """Allocations the runtime reported, not yet matched to a tensor: ``pointers`` during the
    current op; ``unowned`` before it (block address -> the pool it came from), blocks no op's
    result got. Code that allocates below the dispatcher (Inductor's ``empty_strided_cuda``, C++
    extensions) hands such a block to the first op that uses it, often as an input or an
    ``out=``: that op's argument claims it (``CaptureRecorder._arg``)."""

    pointers: list[int] = field(default_factory=list)
    unowned: dict[int, str] = field(default_factory=dict)
    unmatched: int = 0   # blocks freed or forgotten while unowned (scratch)


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
        self.trace = Trace(meta=dict(meta or {}))
        self.graph: int | None = None
        self.device = device or cuda_device()
        self.eager = eager
        self.capture_ended: list[Callable[[int], None]] = []
        self.replayed: list[Callable[[int], None]] = []
        self.streams = StreamNames()
        self._handles: dict[int, _Handle] = {}   # id(tensor) -> handle (see ``_handle``)
        self._sweep_at = SWEEP_AT
        self._mutated: set[int] = set()          # tensor ids mutated in the open capture
        self._host_reads = HostReadWatch()
        self._tensor_ids = itertools.count(1)
        self._launch_ids = itertools.count()
        self._graph_ids = itertools.count()
        self._event_ids = itertools.count()
        self._steps = itertools.count()
        self._t0 = time.perf_counter_ns()
        self._open: _OpenCapture | None = None
        self._graph_of: dict[int, int] = {}          # id(CUDAGraph) -> graph id
        self._replays: dict[int, int] = defaultdict(int)
        self._frontier: dict[str, tuple[int, ...]] = {}
        self._held: dict[int, torch.UntypedStorage] | None = None   # block address -> storage
        self._late_names: dict[int, str] = {}
        self._copies: dict[int, tuple[Record, Record]] = {}   # id(record) -> (it, its renamed copy) (``_finished``)
        self._copies_for: tuple[dict[str, str], dict[int, str]] | None = None   # the names those copies have
        self._made_on: dict[int, str] = {}  # storage address -> stream of the op that last made it
        self._events: dict[int, int] = {}   # raw cudaEvent_t -> event id in records
        self._event_deps: dict[int, tuple[int, ...]] = {}
        self._pending = _Pending()
        self._allocated_from: dict[int, str] = {}   # block address -> pool of its Alloc (``_free``)
        self._pool_names: dict[Any, str] = {}        # a CUDAGraph.pool() handle -> its pool name
        self._eager_pool: str | None = None          # the pool eager allocations are routed to (``on_pool_routing``)
        self.on_allocated: Callable[[int], Any] | None = None   # see ``_route_allocations``
        self._stream_keys: dict[int, str] = {}   # raw stream -> its key (``_stream``), until a capture begins or ends
        self._marked: set[int] = set()           # raw streams an ``annotate`` mark has named
        self._blocks: dict[int, tuple[int, _Handle]] = {}  # block address -> (bytes, handle of the first tensor seen on it)
        self._releasing: dict[int, tuple[int, str]] = {}   # blocks a mutation is letting go -> (bytes, label)
        self._busy = 0   # >0 while the recorder's own code or an op's internals run
        self._dispatching = False   # ``eager=False``: on the dispatch stack now (``_enter_dispatch``)
        self._watch: MemoryWatch | None = None   # standing aside (``stand_aside``): the calls it records
        self._watched_frees = Ranges()
        self._watching = 0          # >0 while a call the watch picked runs
        self.records_full: Callable[[], None] | None = None   # called at an op once ``RECORDS_CAP`` are held
        self._context = ExitStack()
        self._route_allocations()

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
        self._context.callback(self._host_reads.disarm)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._context.__exit__(*exc_info)
        if self._watch is not None:
            uninstall(self._watch)
        if self.eager:
            super().__exit__(*exc_info)
        else:
            self._leave_dispatch()
        self.trace.records = self._finished(self.trace.records, in_place=True)
        unmatched = self._pending.unmatched + len(self._pending.unowned)
        if unmatched:
            self.trace.meta["allocations_without_a_tensor"] = unmatched

    def snapshot(self, graph: int | None = None) -> Trace:
        """The trace so far with final names; with ``graph``, only that graph's records
        and the records of no graph (eager work, host syncs)."""
        records = self.trace.records
        if graph is not None:
            records = [r for r in records if getattr(r, "graph", None) in (None, graph)]
        return Trace(records=self._finished(records), meta=dict(self.trace.meta))

    def for_check(self, records: list[Record]) -> list[Record]:
        """``records`` (some of this recording's) as a check of the recording so far reads them:
        with late tensor names (copies where one applies), and stream keys as they are (a rule
        compares streams, never reads their names: ``naming.renamed_text`` renames what it found)."""
        return self._finished(records, streams={})

    def named(self, tensor: torch.Tensor, name: str) -> None:
        """A tensor got its name after the op that made it was recorded: records
        made before that show a placeholder, replaced by the name on exit."""
        handle = self._known(tensor)
        if handle is not None:
            handle.label = name
            self._late_names[handle.id] = name

    def _finished(self, records: list[Record], *, in_place: bool = False,
                  streams: dict[str, str] | None = None) -> list[Record]:
        """``records`` with late names and final stream names (or ``streams``' renaming).
        ``in_place`` renames the records themselves (the finished trace: nobody holds them
        yet), else renamed copies (``snapshot``: the recording goes on with the originals)."""
        streams = self.streams.final() if streams is None else streams
        names = self._late_names
        if not names and not streams:
            return list(records)
        if in_place:
            for record in records:
                rename_in_place(record, streams, names)
            return records
        old = self._copies if self._copies_for == (streams, names) else {}   # names changed: all stale
        self._copies_for, copies = (streams, dict(names)), {}
        self._copies = copies
        out = []
        for r in records:   # a record never changes once written: its copy from the last call stands
            kept = old.get(id(r))
            copy = kept[1] if kept is not None and kept[0] is r else renamed_copy(r, streams, names)
            copies[id(r)] = (r, copy)
            out.append(copy)
        return out

    # -- captures ----------------------------------------------------------------

    @contextmanager
    def capturing(self, inputs: Sequence[torch.Tensor] = ()) -> Iterator[int]:
        """Bracket a capture by hand: ``Capture`` begin/end records, graph id on records inside.

        ``torch.cuda.graph`` captures are bracketed without this; a
        ``torch.cuda.graph`` inside joins the capture opened here. ``inputs``
        are the graph's static inputs (checker rule 5 watches them).
        """
        graph = self._begin(MAIN, tuple(t.data_ptr() for t in inputs), by_hand=True)
        try:
            yield graph
        except BaseException as exc:
            self._end(exc)
            raise
        self._end(None)

    @contextmanager
    def calling(self, index: int, phase: str) -> Iterator[None]:
        """One call of the code under check (``phase``: ``warmup``, ``capture`` or ``eager``),
        bracketed by ``Call`` records: the frozen-value rules compare calls op by op."""
        self._emit(Call, op="begin", index=index, phase=phase)
        try:
            yield
        finally:
            self._emit(Call, op="end", index=index, phase=phase)

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
        held, self._held = self._held, {}
        try:
            yield
        finally:
            self._held = held

    def on_capture_begin(self, cuda_graph: object, pool: object = None) -> None:
        """``pool``: the memory pool handle ``capture_begin`` was given (another graph's
        ``pool()``), ``None`` for the graph's own."""
        raw = self.device.current_stream()
        stream = self.streams.began_capture(raw) if raw is not None else MAIN
        if self._open is not None and self._open.by_hand and self._open.cuda_graph is None:
            self._open.cuda_graph = cuda_graph
            self._graph_of[id(cuda_graph)] = self._open.graph
            self._own_pool(cuda_graph, self._open.graph)
            return
        key = None if pool is None else _pool_key(pool)
        shared = self._pool_names.get(key, "") if key is not None else ""
        graph = self._begin(stream, (), by_hand=False, cuda_graph=cuda_graph, pool=shared)
        if key is not None and not shared:   # a fresh handle (graph_pool_handle()): this graph's pool
            self._pool_names[key] = graph_pool(graph)
        self._own_pool(cuda_graph, graph, shared)

    def _own_pool(self, cuda_graph: object, graph: int, shared: str = "") -> None:
        """Remember which pool name ``cuda_graph.pool()`` stands for (a later capture may share it)."""
        try:
            key = _pool_key(cuda_graph.pool())
        except Exception:   # a stand-in graph (tests), or a torch without pool()
            return
        self._pool_names.setdefault(key, shared or graph_pool(graph))

    def on_capture_end(self, cuda_graph: object, error: BaseException | None) -> None:
        if self._open is not None and not self._open.by_hand:
            opened = self._open
            self._end(error)
            if error is None:   # ``pool()`` answers only once a capture has ended
                self._own_pool(cuda_graph, opened.graph, opened.pool)

    def on_pool_routing(self, pool: object, begin: bool) -> None:
        """Eager allocations go to graph pool ``pool`` from now on (``begin``), or no longer:
        their blocks are that pool's, named as a capture into it will be."""
        self._unclaimed()   # what was taken so far came from the pool before this one
        if not begin:
            self._eager_pool = None
            return
        key = _pool_key(pool)
        self._eager_pool = self._pool_names.setdefault(key, f"mempool{len(self._pool_names)}")

    def on_replay(self, cuda_graph: object) -> None:
        graph = self._graph_of.get(id(cuda_graph))
        if graph is not None and (self._recording() or self._watch is not None):
            self.replay(graph, self._replays[graph])

    # -- standing aside (``gpu_demo.record.memory_watch``) -----------------------------

    def stand_aside(self, reads: Iterable[tuple[int, int]], frees: Iterable[tuple[int, int]]) -> None:
        """From now on record only captures, replays, the calls that touch ``reads`` (address
        ranges) and the frees of blocks that touch ``frees``; called again, the ranges change."""
        if self._watch is None:
            self._watch = MemoryWatch(self._record_call)
            install_at_bottom(self._watch)
            if self.eager:
                self.eager, self._dispatching = False, True
                self._leave_dispatch()
                self._route_allocations()
        self._watch.ranges = Ranges(reads)
        self._watched_frees = Ranges(frees)

    def late_names(self) -> dict[int, str]:
        """The names ``label()`` gave tensors after their first records (tensor id -> name)."""
        return dict(self._late_names)

    def _record_call(self, func: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        """A call the watch picked: run with the recorder on the dispatch stack, op by op."""
        if self.graph is not None or self._watching:
            return func(*args, **kwargs)   # recorded already
        self._watching += 1
        entered = _get_current_dispatch_mode() is not self
        if entered:
            TorchDispatchMode.__enter__(self)
        try:
            return func(*args, **kwargs)
        finally:
            if entered:
                TorchDispatchMode.__exit__(self, None, None, None)
            self._watching -= 1

    def _begin(self, stream: str, inputs: tuple[int, ...], *, by_hand: bool, cuda_graph: object = None,
               pool: str = "") -> int:
        self._unclaimed()   # blocks taken before the capture are not its pool's
        graph = next(self._graph_ids)
        self._emit(Capture, op="begin", graph=graph, stream=stream, inputs=inputs, pool=pool)
        self._open = _OpenCapture(graph, inputs, by_hand, cuda_graph, pool)
        if cuda_graph is not None:
            self._graph_of[id(cuda_graph)] = graph
        self.graph, self._frontier, self._mutated, self._stream_keys = graph, {}, set(), {}
        if not self.eager:   # what tensors went through since the last capture was not watched
            for handle in self._handles.values():
                handle.seen = None
        self._host_reads.arm(self._host_read)   # a shape read may find a storage changed under it
        self._route_allocations()
        self._enter_dispatch()
        return graph

    def _end(self, error: BaseException | None) -> None:
        self._unclaimed()   # blocks taken during the capture are its pool's
        opened, self._open = self._open, None
        self.graph, self._mutated, self._stream_keys = None, set(), {}
        self._route_allocations()
        self._host_reads.disarm()
        self._leave_dispatch()
        message = None if error is None else one_line(first_error(error))
        self._emit(Capture, op="end", graph=opened.graph, stream=MAIN if opened.by_hand else self._stream(),
                   inputs=opened.inputs, error=message, pool=opened.pool)
        for callback in self.capture_ended:
            callback(opened.graph)

    def _enter_dispatch(self) -> None:
        """``eager=False``: onto the dispatch stack of the thread whose capture is opening."""
        if not self.eager and not self._dispatching:
            TorchDispatchMode.__enter__(self)
            self._dispatching = True

    def _leave_dispatch(self) -> None:
        """``eager=False``: off the dispatch stack once the capture is over. A mode the
        program entered during the capture and has not left sits above it: then it
        stays (recording nothing) until a later capture ends with it on top."""
        if self._dispatching and _get_current_dispatch_mode() is self:
            TorchDispatchMode.__exit__(self, None, None, None)
            self._dispatching = False

    def replay(self, graph: int, index: int) -> None:
        self._replays[graph] = index + 1
        self._emit(Replay, graph=graph, index=index, stream=self._stream())
        for callback in self.replayed:
            callback(graph)

    def fault(self, exc: BaseException) -> None:
        self._emit(Fault, error=cuda_error_name(str(exc)) or type(exc).__name__, launch=None, detail=one_line(exc))

    # -- what the program says (gpu_demo.record.annotate) --------------------------------

    def stream_event(self, op: str, event: int, stream: str | None) -> None:
        if self.device.traced and op in ("record", "wait"):
            return  # the CUDA runtime reports the real event (on_event_recorded/waited)
        self._event(op, event, stream)

    def host_sync(self, op: str, what: str) -> None:
        if not self.device.traced:  # else the runtime reports it (on_synchronized)
            self._emit(HostSync, op=op, label=what, stream=annotate.current_stream())

    # -- what the CUDA runtime says (gpu_demo.record.hooks) -------------------------------

    def on_event_created(self, event: int) -> None:
        self._events[event] = next(self._event_ids)

    def on_event_deleted(self, event: int) -> None:
        self._events.pop(event, None)

    def on_event_recorded(self, event: int, stream: int) -> None:
        self._event("record", self._event_id(event), self._stream_key(stream))

    def on_event_waited(self, event: int, stream: int) -> None:
        self._event("wait", self._event_id(event), self._stream_key(stream))

    def _route_allocations(self) -> None:
        """While recording, the runtime's allocation reports go straight onto ``_pending``
        (``hooks`` calls this ``list.append`` itself: no Python frame per allocation, the
        most frequent report); otherwise nowhere, since no op of ours would claim them."""
        if self._recording():
            self.on_allocated = self._pending.pointers.append
        else:
            self.on_allocated = None
            self._unclaimed()   # blocks taken since the last recorded op that it did not get
        hooks.reroute()

    def on_freed(self, ptr: int) -> None:
        pending = self._pending
        if pending.pointers and ptr in pending.pointers:  # scratch an op took and gave back
            pending.pointers.remove(ptr)
            pending.unmatched += 1
            return
        if pending.unowned and pending.unowned.pop(ptr, None) is not None:   # no op used it
            pending.unmatched += 1
            return
        block = self._blocks.pop(ptr, None)
        releasing = self._releasing.get(ptr)   # a mutation letting the block go names it
        if releasing is not None:
            self._free(ptr, *releasing)
        elif block is not None and (self._recording() or self._watched_frees.touches(ptr, block[0])):
            self._free(ptr, block[0], block[1].label)

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
        self._add(EventOp, op, event, stream, self.graph, deps)

    # -- what the wrapped methods say (gpu_demo.record.patches) --------------------------

    def on_triton_launch(self, kernel: str, args: Sequence[tuple[str, Any]],
                         access: KernelAccess | None = None) -> None:
        if self._busy or not (self._recording() or (self._watch is not None and self._watch.touched(args))):
            return  # launched by an op the dispatcher already showed, or on memory no rule follows
        if access is not None and access.unknown:
            self.trace.meta.setdefault("triton_access_unknown", {})[kernel] = access.unknown
        with self._quiet():
            given = [(name, tensor, access.of(name) if access else "rw")
                     for name, value in args if (tensor := tensor_behind(value)) is not None]
            frozen = [self._arg(*each) for each in given]
            if access is not None and access.extents:
                frozen = _bounded(frozen, given, access.extents, dict(args))
            scalars = tuple((name, text) for name, value in args if (text := frozen_scalar(value)) is not None)
            self._launch(f"triton:{kernel}", kernel, tuple(frozen), skips_empty=False, scalars=scalars)

    @contextmanager
    def resizing(self, storage: torch.UntypedStorage) -> Iterator[None]:
        """``storage.resize_``: a ``Mutation`` of each tensor seen on it, and a ``Free``
        of its block if the resize let the block go."""
        if self._busy or not self._recording() or not _has_memory(storage):
            yield
            return
        with self._quiet():
            ptr, nbytes = storage.data_ptr(), storage.nbytes()
            on_it = [t for t in self._live_tensors() if ptr and t.untyped_storage().data_ptr() == ptr]
            before = [(t, t.data_ptr(), _numel(t), tuple(_shape(t))) for t in on_it]
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

    # -- what the host reads (gpu_demo.record.host_reads) --------------------------------

    def _host_read(self, op: str, t: torch.Tensor) -> None:
        """A read of ``t``'s metadata in a capture: a ``storage_swap`` first if its storage
        changed since its last use (``x.data = ...`` before ``if x.shape[0] == 0``), then a
        ``HostRead`` if it was mutated in this capture."""
        if self.graph is None or self._busy:
            return
        handle = self._known(t)
        if handle is None:
            return
        seen = handle.seen
        if seen is not None and (seen[0] != t.data_ptr() or seen[1] != _numel(t)):
            with self._quiet():
                self._mutated_now(STORAGE_SWAP, t, seen, why=SWAPPED_UNSEEN)
        if handle.id not in self._mutated:
            return
        with self._quiet():
            self._emit(HostRead, op=op, tensor=handle.id, label=handle.label, shape=tuple(_shape(t)),
                       stream=self._stream(), graph=self.graph)

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
        if not (self.eager or self.graph is not None or self._watching):
            return plan.call(*args, **kwargs)
        self._busy += 1   # the recorder's own tensor reads are not the program's (``_quiet``)
        try:
            with DisableTorchFunction():
                if plan.action is LAUNCH:   # most ops: straight there
                    return self._op(plan, args, kwargs)
                return self._dispatch(plan, args, kwargs)
        finally:
            self._busy -= 1

    def _dispatch(self, plan: OpPlan, args, kwargs):  # noqa: ANN001
        action = plan.action
        if action is MUTATE:
            return self._mutation(plan, args, kwargs)
        if action is VIEW:
            return self._views(plan, args, kwargs)
        if action is ITEM:
            self._emit(HostSync, op="item", label=self._label(args[0]), stream=self._stream())
            return plan.call(*args, **kwargs)
        out = plan.call(*args, **kwargs)
        if self._pending.pointers:
            self._claim_allocations(made_by(out, tensors_of(plan, args, kwargs)))
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
        stream = self._stream()
        made = made_by(out, given)
        if made:
            frozen += [arg(_OUT[i] if i < len(_OUT) else f"out{i}", t, "w", stream) for i, t in enumerate(made)]
        if self._pending.pointers:
            self._unclaimed()
        role = copy_role([t for _, t, a in given if a == "r"], [t for _, t, a in given if a != "r"] + made) \
            if plan.copies else None
        self._launch(plan.kernel, plan.opname, tuple(frozen), stream=stream, pdl=plan.pdl,
                     scalars=scalars_of(plan.names, args, kwargs), role=role,
                     site=user_site(2))   # from the op's caller: this frame and ``__torch_dispatch__`` are ours
        if plan.writes:
            self._changed_inside(plan, given, frozen)
        return out

    # -- storage changed under a tensor object (``Mutation(op="storage_swap")``) ----------
    # ``_arg`` compares each argument as it is now with its last recorded use: a different
    # pointer or size with no recorded op in between is a ``storage_swap`` (identities, not op names).

    def _changed_inside(self, plan: OpPlan, given: list[tuple[str, torch.Tensor, str]], frozen: list[Arg]) -> None:
        """A tensor the op writes whose storage the op itself changed: an ``out=`` result
        resized to fit is the op's documented effect; any other change (a ``set_`` inside a
        custom op, which the dispatcher shows as one op) is a ``storage_swap``."""
        for (name, t, access), a in zip(given, frozen):
            if access == "r" or (t.data_ptr() == a.ptr and _numel(t) == a.numel):
                continue
            if name.split("[", 1)[0] in plan.outs:
                self._handles[id(t)].seen = (t.data_ptr(), _numel(t), tuple(_shape(t)))
            else:
                self._mutated_now(STORAGE_SWAP, t, (a.ptr, a.numel, a.shape),
                                  why=f"{plan.opname} changed its storage inside the op (the dispatcher shows it "
                                      "as one op)")

    def _launch(self, kernel: str, opname: str, args: tuple[Arg, ...], *, skips_empty: bool = True,
                stream: str | None = None, pdl: bool = False, scalars: tuple[tuple[str, str], ...] = (),
                role: str | None = None, site: str | None = None) -> None:
        """``role``: what the launch is (``H2D``) when not the ``annotate`` mark's role; ``site``:
        the user's line that issued it, when the caller knows how far up it is (``user_site``)."""
        stream, marked = stream or self._stream(), _marks.role
        label = f"{marked}/{opname}" if marked else opname
        role = role or marked
        if skips_empty and writes_only_empty(args):
            self._emit(SkippedLaunch, kernel=kernel, label=label, role=role, stream=stream, graph=self.graph,
                       reason="every output has zero elements", args=args)
            return
        launch = next(self._launch_ids)
        deps = self._frontier.get(stream, ())
        self._frontier[stream] = (launch,)
        self.trace.records.append(Launch(next(self._steps), (_now() - self._t0) / 1000, launch, kernel, label,
                                         role, stream, args, self.graph, deps, pdl, scalars,
                                         user_site() if site is None else site))   # ``_add``, inlined

    def _views(self, plan: OpPlan, args, kwargs):  # noqa: ANN001
        out = plan.call(*args, **kwargs)
        base = self._handle(args[0])
        for view in tensors_in(out):
            if view is args[0]:   # an op that hands back its own input made no new view (not its own base)
                continue
            handle = self._handle(view)
            handle.label = annotate.label_of(view) or base.label
            self._add(View, handle.id, handle.label, base.id, view.data_ptr(), _numel(view),
                      tuple(_shape(view)), self.graph)
        return out

    def _mutation(self, plan: OpPlan, args, kwargs):  # noqa: ANN001
        tensor = args[0]
        old = (tensor.data_ptr(), _numel(tensor), tuple(_shape(tensor)))
        storage = tensor.untyped_storage()
        ptr, nbytes, ref = storage.data_ptr(), storage.nbytes(), StorageWeakRef(storage)
        block = (block_bytes(nbytes, storage.device.type), self._label(tensor))
        del storage
        if self._held is not None and self.graph is None:
            self._held.pop(ptr, None)  # the program lets it go; a capture lets nothing go
        start = len(self.trace.records)
        self._releasing[ptr] = block
        try:
            out = plan.call(*args, **kwargs)
        finally:
            self._releasing.pop(ptr, None)
        self._claim_allocations([tensor])
        self._mutated_now(plan.opname, tensor, old)
        # The runtime reports a freed CUDA block itself; elsewhere the dropped last
        # reference is the only sign that the block is free.
        if ref.expired() and nbytes and not self._freed_since(start, ptr):
            self._free(ptr, *block)
        return out

    def _mutated_now(self, op: str, tensor: torch.Tensor, old: Sequence[Any], why: str | None = None) -> None:
        handle = self._handle(tensor)
        new = (tensor.data_ptr(), _numel(tensor), tuple(_shape(tensor)))
        handle.seen = new
        self._emit(
            Mutation, op=op, tensor=handle.id, label=handle.label,
            old_ptr=old[0], old_numel=old[1], old_shape=tuple(old[2]),
            new_ptr=new[0], new_numel=new[1], new_shape=new[2],
            graph=self.graph, why=annotate.current_why() or why or "",
        )
        if self.graph is not None:
            self._mutated.add(handle.id)
            self._host_reads.arm(self._host_read)  # from now on a read of its shape may decide what is captured

    def _arg(self, name: str, t: torch.Tensor, access: str, made_on: str | None = None) -> Arg:
        """``t`` as a launch freezes it. Its storage's block is noted for a later ``Free``, with an
        ``Alloc`` if the runtime handed the block out and no op claimed it yet (``_Pending``).
        ``made_on``: ``t`` is a new result of an op issued to that stream (which wrote its block
        last); else the op was given ``t``, and a pointer or size other than at its last recorded
        use is a ``storage_swap`` (its storage changed under it, by no op the dispatcher showed)."""
        handle = self._handles.get(id(t))               # ``_handle``, inlined
        if handle is None or handle.ref() is not t:
            handle = self._new_handle(t)
        storage = t.untyped_storage()
        block, ptr, nbytes = storage.data_ptr(), t.data_ptr(), storage.nbytes()
        if self._held is not None:
            self._held[block] = storage
        blocks = self._blocks
        if block and block not in blocks:   # ``block_bytes``, inlined
            blocks[block] = (-(-nbytes // CACHING_ALLOCATOR_BLOCK) * CACHING_ALLOCATOR_BLOCK if t.is_cuda else nbytes,
                             handle)
        if made_on is not None and block:
            self._made_on[block] = made_on
        pending, pool = self._pending, None
        if pending.pointers and block in pending.pointers:   # handed out since the last op
            pending.pointers.remove(block)
            pool = self._pool()
        elif pending.unowned and block in pending.unowned:   # earlier, and no op has used it since
            pool = pending.unowned.pop(block)
        if pool is not None:
            self._add(Alloc, handle.id, handle.label, block, blocks[block][0], made_on or self._stream(), pool)
        left = nbytes - (ptr - block) if ptr else 0   # an empty view's pointer is 0: nothing behind it
        numel, shape, seen = _numel(t), tuple(_shape(t)), handle.seen
        if made_on is not None or seen is None:
            handle.seen = (ptr, numel, shape)
        elif seen[0] != ptr or seen[1] != numel:
            self._mutated_now(STORAGE_SWAP, t, seen, why=SWAPPED_UNSEEN)   # and ``seen`` is now
        return Arg(name, handle.id, handle.label, ptr, numel, shape,
                   numel * _itemsize(t) if _contiguous(t) else extent_bytes(t),   # ``extent_bytes``, inlined
                   access, left if left > 0 else 0)

    # -- memory ------------------------------------------------------------------

    def _claim_allocations(self, results: list[torch.Tensor]) -> None:
        """``Alloc`` for each block the runtime handed out during this op, sized by the
        result tensor that got it; a block no result got is unowned (``_unclaimed``).
        (A launching op claims its outputs' blocks, and any unowned block an argument
        uses, in ``_arg``.)"""
        pending = self._pending.pointers
        if not pending:
            return
        stream = None
        for t in results:
            storage = t.untyped_storage()
            ptr = storage.data_ptr()
            if ptr in pending:
                pending.remove(ptr)
                nbytes = block_bytes(storage.nbytes(), "cuda" if t.is_cuda else "cpu")
                handle = self._handle(t)
                self._blocks[ptr] = (nbytes, handle)
                stream = stream or self._stream()
                self._add(Alloc, handle.id, handle.label, ptr, nbytes, stream, self._pool())
        self._unclaimed()

    def _unclaimed(self) -> None:
        """The op is over (or the pool allocations come from changes): blocks taken since that
        no result got are unowned, booked to the pool they came from, until an op uses one or the
        runtime takes it back (an op's scratch). The oldest are forgotten past ``UNOWNED_KEPT``."""
        pending = self._pending
        if pending.pointers:
            pool = self._pool()
            for ptr in pending.pointers:
                pending.unowned[ptr] = pool
            pending.pointers.clear()
            while len(pending.unowned) > UNOWNED_KEPT:
                del pending.unowned[next(iter(pending.unowned))]
                pending.unmatched += 1

    def _free(self, ptr: int, nbytes: int, label: str) -> None:
        """A ``Free`` into the pool the block came from (its ``Alloc``'s; a block allocated
        before the recording saw it came from the default pool)."""
        stream = self._made_on.get(ptr) or self._stream()
        self._add(Free, label, ptr, nbytes, stream, self._allocated_from.pop(ptr, DEFAULT_POOL), self.graph)

    def _freed_since(self, start: int, ptr: int) -> bool:
        return any(type(r) is Free and r.ptr == ptr for r in self.trace.records[start:])

    def _pool(self) -> str:
        """The pool an allocation now comes from: the open capture's (its own, or the one it shares)."""
        if self.graph is None:
            return self._eager_pool or DEFAULT_POOL
        return self._open.pool if self._open is not None and self._open.pool else graph_pool(self.graph)

    # -- small helpers -----------------------------------------------------------

    def _recording(self) -> bool:
        return self.eager or self.graph is not None or self._watching > 0

    @contextmanager
    def _quiet(self) -> Iterator[None]:
        """The recorder's own tensor reads inside are not the program's: no ``HostRead``
        for them, and no trip through torch-function modes (see ``__torch_dispatch__``)."""
        self._busy += 1
        try:
            with DisableTorchFunction():
                yield
        finally:
            self._busy -= 1

    def _stream(self) -> str:
        """The stream work issued now goes to: the current CUDA stream (provisional
        key, see ``StreamNames``), or on a CPU the ``annotate`` mark (``main`` if none)."""
        raw = self.device.current_stream()
        if raw is None:
            return annotate.current_stream()
        key, mark = self._stream_keys.get(raw), _marks.stream
        if key is None or (mark is not None and raw not in self._marked):
            key = self._stream_keys[raw] = self.streams.saw(raw, capturing=self.graph is not None, mark=mark)
            if mark is not None:
                self._marked.add(raw)
        return key

    def _stream_key(self, raw: int) -> str:
        return self.streams.saw(raw, capturing=self.graph is not None)

    def _handle(self, t: torch.Tensor) -> _Handle:
        """The recorder's handle on tensor object ``t``, made on first sight.

        Keyed by ``id(t)`` and checked against a weak reference (an id is reused
        once its object is gone): a ``WeakIdKeyDictionary`` costs ten times as
        much per look-up, and the recorder looks up every argument of every op.
        """
        handle = self._handles.get(id(t))
        if handle is None or handle.ref() is not t:
            handle = self._new_handle(t)
        return handle

    def _new_handle(self, t: torch.Tensor) -> _Handle:
        if len(self._handles) >= self._sweep_at:   # the handles of dead tensors, now and then
            self._handles = {key: h for key, h in self._handles.items() if h.ref() is not None}
            self._sweep_at = max(SWEEP_AT, 2 * len(self._handles))
        number = next(self._tensor_ids)
        handle = self._handles[id(t)] = _Handle(weakref.ref(t), number, annotate.label_of(t) or f"t{number}")
        return handle

    def _known(self, t: torch.Tensor) -> _Handle | None:
        handle = self._handles.get(id(t))
        return handle if handle is not None and handle.ref() is t else None

    def _live_tensors(self) -> list[torch.Tensor]:
        """Every tensor object seen and still alive, in the order first seen."""
        handles = sorted(self._handles.values(), key=lambda h: h.id)
        return [t for t in (h.ref() for h in handles) if t is not None]

    def _label(self, t: torch.Tensor) -> str:
        """The name ``annotate.label`` gave ``t``, else its base's (a view), else ``t<id>``
        (kept on its handle: made with it, renamed by ``named``)."""
        return self._handle(t).label

    def _emit(self, kind: type[Record], **fields: Any) -> None:
        t_us = (time.perf_counter_ns() - self._t0) / 1000
        self.trace.records.append(kind(step=next(self._steps), t_us=t_us, **fields))

    def _add(self, kind: type[Record], *fields: Any) -> None:
        """``_emit`` for the records made once or more per op, with the fields after
        ``step, t_us`` in ``kind``'s order (``POSITIONAL``): a keyword call costs a
        record twice as much."""
        t_us = (time.perf_counter_ns() - self._t0) / 1000
        record = kind(next(self._steps), t_us, *fields)
        self.trace.records.append(record)
        if kind is Alloc:
            self._allocated_from[record.ptr] = record.pool


def _pool_key(pool: object) -> Any:
    """A pool handle as a dict key (``CUDAGraph.pool()`` returns a tuple of two ints)."""
    return tuple(pool) if isinstance(pool, (list, tuple)) else pool


def _bounded(frozen: list[Arg], given: list[tuple[str, torch.Tensor, str]], extents: dict[str, str],
             values: dict[str, Any]) -> list[Arg]:
    """A Triton launch's pointer arguments with the extent their kernel's mask bounds them to
    (``triton_access``: ``n`` elements for ``mask=offs < n``) instead of the tensor's own size."""
    out = []
    for a, (name, t, _) in zip(frozen, given):
        size = values.get(extents.get(name, ""))
        out.append(replace(a, nbytes=size * t.element_size()) if type(size) is int and size >= 0 else a)
    return out


def _has_memory(storage: torch.UntypedStorage) -> bool:
    """False for a tracing tensor's storage (``torch.compile``'s fake ones), which has no pointer."""
    try:
        storage.data_ptr()
    except RuntimeError:
        return False
    return True
