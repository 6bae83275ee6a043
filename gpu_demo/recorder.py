"""Record what a real PyTorch program launches as a ``simlib.trace.Trace``.

``CaptureRecorder`` is a ``TorchDispatchMode``: every aten (or custom) op the
program issues passes through it, and it writes down what the host froze at
that moment, the way a kernel launch freezes its arguments:

* each compute op becomes a ``Launch`` on the logical stream it was issued on,
  with one ``Arg`` per tensor (stable id per Python tensor object, label,
  ``data_ptr``, numel, shape, bytes, ``r``/``w``/``rw``). An op whose outputs
  all have zero elements launches no kernel in PyTorch: it becomes a
  ``SkippedLaunch``, still with the arguments the host froze;
* view ops become ``View`` records (new handle, its base, pointer, shape) and
  the view inherits its base's label;
* host-side metadata changes (``set_``, ``resize_``, ...) become ``Mutation``
  records with the old and new pointer, size and shape;
* ``.item()`` becomes a ``HostSync``; allocations (``empty``) are not recorded;
* the model's fork/join events (``gpu_demo.streams``) become ``EventOp``
  records, and each captured launch lists the launches it depends on: the
  previous launch on its stream plus whatever its stream waited for.

The caching allocator is below the dispatcher, so allocations are not
recorded; a ``Free`` is written when a mutation drops a storage's last
reference (``dispose_tensor`` does), with the stream of the op that made it.

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
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, Callable, Iterator, Sequence

import torch
from simlib.spec import MoEConfig
from simlib.trace import (
    Arg,
    Capture,
    EventOp,
    Fault,
    Free,
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

from . import annotate, graphs
from .annotate import MAIN
from .kernels import PDL_OPS
from .outcomes import classify_capture_failure, cuda_error_name, first_error, one_line
from .settings import RunSettings
from .streams import dry_capture

aten = torch.ops.aten

_METADATA_MUTATIONS = {
    aten.set_, aten.resize_, aten.resize_as_, aten.as_strided_, aten.squeeze_,
    aten.unsqueeze_, aten.transpose_, aten.t_, aten.swapdims_, aten.swapaxes_, aten.detach_,
}
_NO_LAUNCH = {aten.empty, aten.empty_like, aten.empty_strided, aten.new_empty, aten.new_empty_strided}
_OVERWRITES = {aten.copy_, aten.fill_, aten.zero_, aten.normal_, aten.uniform_, aten.random_}


class CaptureRecorder(TorchDispatchMode):
    """Writes every op issued inside ``with recorder:`` into ``recorder.trace``."""

    def __init__(self, meta: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.trace = Trace(meta=dict(meta or {}))
        self.graph: int | None = None
        self._ids: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self._inherited: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self._tensor_ids = itertools.count(1)
        self._launch_ids = itertools.count()
        self._graph_ids = itertools.count()
        self._steps = itertools.count()
        self._t0 = time.perf_counter()
        self._frontier: dict[str, tuple[int, ...]] = {}
        self._held: list[torch.UntypedStorage] | None = None
        self._late_names: dict[int, str] = {}
        self._made_on: dict[int, str] = {}  # storage address -> stream of the op that last made it
        self._event_deps: dict[int, tuple[int, ...]] = {}
        self._listening = annotate.listening(self)

    def __enter__(self) -> "CaptureRecorder":
        super().__enter__()
        self._listening.__enter__()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._listening.__exit__(*exc_info)
        super().__exit__(*exc_info)
        self.trace.records = [self._renamed(r) for r in self.trace.records]

    def named(self, tensor: torch.Tensor, name: str) -> None:
        """A tensor got its name after the op that made it was recorded: records
        made before that show a placeholder, replaced by the name on exit."""
        if tensor in self._ids:
            self._late_names[self._ids[tensor]] = name

    def _renamed(self, record: Record) -> Record:
        names = self._late_names
        if isinstance(record, (Launch, SkippedLaunch)) and any(a.tensor in names for a in record.args):
            args = tuple(replace(a, label=names[a.tensor]) if a.tensor in names else a for a in record.args)
            return replace(record, args=args)
        if isinstance(record, (Mutation, View)) and record.tensor in names:
            return replace(record, label=names[record.tensor])
        return record

    # -- what the program tells us outside dispatch ---------------------------

    @contextmanager
    def capturing(self, inputs: Sequence[torch.Tensor] = (), *, hold_storages: bool = False) -> Iterator[int]:
        """Bracket a capture: ``Capture`` begin/end records, graph id on records inside.

        ``hold_storages`` keeps every storage the capture touches alive until it
        ends. The dry run needs it: the CPU allocator would hand a block freed
        by one logical stream straight to the other, an address reuse the CUDA
        caching allocator never makes (its blocks stay with their stream), and
        the checker would report it as a race.
        """
        graph, pointers = next(self._graph_ids), tuple(t.data_ptr() for t in inputs)
        self._emit(Capture, op="begin", graph=graph, stream=MAIN, inputs=pointers)
        self.graph, self._frontier = graph, {}
        self._held = [] if hold_storages else None
        try:
            yield graph
        except BaseException as exc:
            self.graph = self._held = None
            self._emit(Capture, op="end", graph=graph, stream=MAIN, inputs=pointers, error=one_line(first_error(exc)))
            raise
        self.graph = self._held = None
        self._emit(Capture, op="end", graph=graph, stream=MAIN, inputs=pointers)

    def replay(self, graph: int, index: int) -> None:
        self._emit(Replay, graph=graph, index=index, stream=MAIN)

    def fault(self, exc: BaseException) -> None:
        self._emit(Fault, error=cuda_error_name(str(exc)) or type(exc).__name__, launch=None, detail=one_line(exc))

    def stream_event(self, op: str, event: int, stream: str | None) -> None:
        if op == "record":
            deps = self._frontier.get(stream, ())
            self._event_deps[event] = deps
        else:
            deps = self._event_deps.get(event, ())
            if op == "wait":
                self._frontier[stream] = tuple(sorted({*self._frontier.get(stream, ()), *deps}))
        self._emit(EventOp, op=op, event=event, stream=stream, graph=self.graph, deps=deps)

    def host_sync(self, op: str, what: str) -> None:
        self._emit(HostSync, op=op, label=what, stream=annotate.current_stream())

    # -- dispatch --------------------------------------------------------------

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001 (torch's signature)
        kwargs = kwargs or {}
        packet = func.overloadpacket
        if packet in _METADATA_MUTATIONS:
            return self._mutation(func, args, kwargs)
        if func.is_view:
            return self._views(func, args, kwargs)
        if packet in _NO_LAUNCH or packet is aten.detach:
            return func(*args, **kwargs)
        if packet is aten._local_scalar_dense:
            self._emit(HostSync, op="item", label=self._label(args[0]), stream=annotate.current_stream())
            return func(*args, **kwargs)
        inputs = self._frozen_args(func, args, kwargs)
        out = func(*args, **kwargs)
        given = {id(a) for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)}
        results = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor) and id(t) not in given]
        outputs = tuple(self._arg(f"out{i}", t, "w") for i, t in enumerate(results))
        for t in results:
            self._made_on[t.untyped_storage().data_ptr()] = annotate.current_stream()
        self._launch(str(func), func._opname, (*inputs, *outputs))
        return out

    def _launch(self, kernel: str, opname: str, args: tuple[Arg, ...]) -> None:
        stream, role = annotate.current_stream(), annotate.current_role()
        label = f"{role}/{opname}" if role else opname
        written = [a for a in args if a.writes]
        if written and all(a.numel == 0 for a in written):
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
        released = (storage.data_ptr(), storage.nbytes(), StorageWeakRef(storage))
        del storage
        out = func(*args, **kwargs)
        self._emit(
            Mutation, op=func._opname, tensor=self._id(tensor), label=self._label(tensor),
            old_ptr=old[0], old_numel=old[1], old_shape=old[2],
            new_ptr=tensor.data_ptr(), new_numel=tensor.numel(), new_shape=tuple(tensor.shape),
            graph=self.graph, why=annotate.current_why(),
        )
        ptr, nbytes, ref = released
        if ref.expired() and nbytes:  # that was the storage's last reference: its block is free
            self._emit(Free, label=self._label(tensor), ptr=ptr, nbytes=nbytes,
                       stream=self._made_on.get(ptr, annotate.current_stream()),
                       pool="default" if self.graph is None else f"graph{self.graph}", graph=self.graph)
        return out

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
        if self._held is not None:
            self._held.append(t.untyped_storage())
        return Arg(
            name=name, tensor=self._id(t), label=self._label(t), ptr=t.data_ptr(), numel=t.numel(),
            shape=tuple(t.shape), nbytes=t.numel() * t.element_size(), access=access,
        )

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
            recorder.replay(graph_id, index)
            if on_gpu:
                try:
                    graph.replay()
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
