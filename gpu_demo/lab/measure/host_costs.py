"""What the host spends on one eager forward of the MoE layer, per op kind.

An eager forward is host-bound: the GPU waits while Python, the dispatcher and
the CUDA runtime issue one op after another. ``python -m gpu_demo bench
--host-costs`` profiles a few eager forwards of the bench's eager variant with
``torch.profiler`` and splits the host's time into what the simulator's eager
program (``simlib.programs.eager_program``) charges:

* every *top-level* aten op of the forward (one the module calls, not one
  that another op calls), in order, with its kind (``KINDS``), role, the
  kernels it launched and their device time. Its *dispatch* time is its
  duration minus the CUDA launch calls inside it;
* ``launch_us``: the host time of one kernel launch call;
* Python: the time outside every top-level op, as a cost per op (the median
  gap between two ops) and, for the rest, a cost per ``nn.Module`` call.

Times come from forwards profiled with nothing but an annotation around
each; a second, annotated pass (roles, and every module call marked by global
forward hooks) says which role issued each op and where module calls begin.

The profiler slows the host down, so every cost is scaled by the ratio of
the forward's unprofiled host time (issued as ``bench`` issues it, whose
CUDA events give ``eager_latency``) to its profiled host time: one factor for
all, taking the profiler's overhead as proportional to the time it watches.
Raw profiled medians are kept next to the scaled costs (``profiled_*``).
"""

from __future__ import annotations

import statistics
import time
from collections import Counter, defaultdict
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch

from gpu_demo.guard.record import annotate
from gpu_demo.lab.measure import profiling
from gpu_demo.lab.measure.benchmark import Bench, latency_stats
from gpu_demo.lab.moe.settings import RunSettings
from simlib.programs.spec import MoEConfig

FORWARD = "gpu_demo.eager_forward"   # the annotation around each profiled forward
MODULE = "module: "                   # prefix of the annotation around each nn.Module call

# Op kinds by aten name; an op not listed is ``elementwise`` if it launched a
# kernel and ``host_only`` (allocation, set_, a no-op .to()) if it did not.
KINDS: dict[str, frozenset[str]] = {
    "matmul": frozenset({"linear", "mm", "bmm", "matmul", "addmm", "baddbmm"}),
    "indexing": frozenset({"index_select", "index_copy_", "index_copy", "index", "index_put_", "gather",
                           "scatter", "scatter_add_", "masked_select", "take"}),
    "reduction": frozenset({"sum", "mean", "cumsum", "softmax", "_softmax", "topk", "sort", "rms_norm",
                            "layer_norm", "amax", "max", "argmax"}),
    "view": frozenset({"view", "reshape", "_unsafe_view", "unsqueeze", "squeeze", "chunk", "split", "narrow",
                       "slice", "select", "t", "transpose", "permute", "expand", "as_strided", "alias",
                       "detach", "unbind", "flatten", "view_as"}),
}


def kind_of(name: str, launches: int) -> str:
    base = name.removeprefix("aten::")
    for kind, names in KINDS.items():
        if base in names:
            return kind
    return "elementwise" if launches else "host_only"


@dataclass(frozen=True)
class OpSample:
    """One top-level op of one profiled forward."""

    name: str
    role: str
    dur_us: float                   # the whole op, its launch calls included
    gap_before_us: float            # host time since the previous op ended (or the forward began)
    module_calls: int               # nn.Module calls entered in that gap
    launch_us: tuple[float, ...]    # host time of each kernel launch call inside the op
    kernel_us: tuple[float, ...]    # device time of each kernel it launched

    @property
    def kind(self) -> str:
        return kind_of(self.name, len(self.kernel_us))

    @property
    def dispatch_us(self) -> float:
        return self.dur_us - sum(self.launch_us)


@dataclass(frozen=True)
class ProfiledForward:
    """One profiled forward: its top-level ops and its host span."""

    ops: tuple[OpSample, ...]
    span_us: float
    module_calls: int

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(op.name for op in self.ops)

    @property
    def outside_ops_us(self) -> float:
        return self.span_us - sum(op.dur_us for op in self.ops)


def forwards(timeline: profiling.Timeline) -> list[ProfiledForward]:
    """Every ``FORWARD`` window of ``timeline``, in order, as top-level ops."""
    kernel_us: dict[int, float] = defaultdict(float)
    for k in timeline.kernels:
        kernel_us[k.correlation] += k.dur_us
    launches = sorted(((call, kernel_us[c]) for c, call in timeline.launches.items() if c in kernel_us),
                      key=lambda pair: pair[0].start_us)
    windows = sorted((start, end) for name, start, end in timeline.annotations if name == FORWARD)
    modules = sorted(start for name, start, _ in timeline.annotations if name.startswith(MODULE))
    roles = [(name, start, end) for name, start, end in timeline.annotations
             if name != FORWARD and not name.startswith(MODULE)]
    out = []
    for start, end in windows:
        ops: list[OpSample] = []
        last_end = start
        for op in timeline.cpu_ops:
            if not start <= op.start_us <= end or op.start_us < last_end:
                continue   # outside this forward, or called by the op before it
            inside = [(call, us) for call, us in launches if op.start_us <= call.start_us <= op.end_us]
            ops.append(OpSample(
                name=op.name, role=_innermost(roles, op.start_us), dur_us=op.dur_us,
                gap_before_us=op.start_us - last_end,
                module_calls=sum(1 for m in modules if last_end <= m < op.start_us),
                launch_us=tuple(call.dur_us for call, _ in inside), kernel_us=tuple(us for _, us in inside)))
            last_end = op.end_us
        out.append(ProfiledForward(tuple(ops), end - start, sum(1 for m in modules if start <= m <= end)))
    return out


def _innermost(annotations: list[tuple[str, float, float]], ts: float) -> str:
    around = [(end - start, name) for name, start, end in annotations if start <= ts <= end]
    return min(around)[1] if around else ""


def summarize(profiled: list[ProfiledForward], annotated: list[ProfiledForward], unprofiled_host_us: float) -> dict[str, Any]:
    """The op sequence and the host cost per kind, scaled to the unprofiled forward.

    Each op's profiled times are medians over the forwards; a kind's cost is
    the mean over its ops, so that the costs add up to the forward they came
    from.

    Times come from ``profiled`` (forwards profiled without role or module
    annotations, which cost host time of their own); each op's role and the
    module calls before it come from ``annotated``, a second pass that must
    issue the same ops. Forwards whose op sequence differs from the most
    common one are left out (``forwards_used`` says how many remain).
    """
    if not any(f.ops for f in profiled):
        raise ValueError(f"the profile holds no eager forward with aten ops (no {FORWARD!r} annotation "
                         "around them); profile each forward inside record_function(FORWARD)")
    sequence = Counter(f.names for f in profiled).most_common(1)[0][0]
    used = [f for f in profiled if f.names == sequence]
    labels = next((f for f in reversed(annotated) if f.names == sequence), None)
    if labels is None:
        raise ValueError("the annotated forwards issued other aten ops than the profiled ones, so roles and "
                         f"module calls cannot be matched by position: {sequence} vs "
                         f"{[f.names for f in annotated]}")
    profiled_us = statistics.median(f.span_us for f in used)
    scale = unprofiled_host_us / profiled_us
    n_ops, module_calls = len(sequence), labels.module_calls
    ops = [_op_entry([f.ops[i] for f in used], labels.ops[i]) for i in range(n_ops)]
    kinds: dict[str, dict[str, Any]] = {}
    for kind in sorted({op["kind"] for op in ops}):
        of_kind = [op for op in ops if op["kind"] == kind]
        kinds[kind] = {
            "ops": len(of_kind),
            "launches": sum(len(op["kernel_us"]) for op in of_kind),
            "dispatch_us": _us(scale * statistics.fmean(op["profiled_dispatch_us"] for op in of_kind)),
            "aten_ops": sorted({op["name"] for op in of_kind}),
        }
    launches = sum(k["launches"] for k in kinds.values())
    launch_total = sum(op["profiled_launch_us"] for op in ops)
    per_op = scale * statistics.median(op.gap_before_us for f in used for op in f.ops)
    outside = scale * statistics.median(f.outside_ops_us for f in used)
    rest = max(0.0, outside - n_ops * per_op)
    return {
        "forwards_used": len(used),
        "profiled_forward_us": _us(profiled_us),
        "profiler_scale": round(scale, 6),
        "ops_per_forward": n_ops,
        "launches_per_forward": launches,
        "module_calls_per_forward": module_calls,
        "launch_us": _us(scale * launch_total / launches) if launches else 0.0,
        "python": {
            "outside_ops_us": _us(outside),
            "per_op_us": _us(per_op),
            "per_module_call_us": _us(rest / module_calls) if module_calls else 0.0,
        },
        "kinds": kinds,
        "ops": ops,
    }


def _op_entry(samples: list[OpSample], label: OpSample) -> dict[str, Any]:
    """One position of the sequence: what it is, and its raw profiled medians."""
    last = samples[-1]
    launches = len(last.kernel_us)
    same = [s for s in samples if len(s.kernel_us) == launches]
    return {
        "name": last.name, "kind": last.kind, "role": label.role, "module_calls": label.module_calls,
        "kernel_us": [_us(statistics.median(s.kernel_us[i] for s in same)) for i in range(launches)],
        "profiled_dispatch_us": _us(statistics.median(s.dispatch_us for s in samples)),
        "profiled_launch_us": _us(statistics.median(sum(s.launch_us) for s in samples)),
        "profiled_gap_before_us": _us(statistics.median(s.gap_before_us for s in samples)),
    }


def _us(value: float) -> float:
    return round(value, 3)


@contextmanager
def annotating_modules() -> Iterator[None]:
    """Wrap every ``nn.Module`` call in a ``record_function`` named ``MODULE + class``."""
    open_calls: list[torch.autograd.profiler.record_function] = []

    def enter(module: torch.nn.Module, _args: Any) -> None:
        call = torch.autograd.profiler.record_function(MODULE + type(module).__name__)
        call.__enter__()
        open_calls.append(call)

    def leave(_module: torch.nn.Module, _args: Any, _out: Any) -> None:
        open_calls.pop().__exit__(None, None, None)

    hooks = [torch.nn.modules.module.register_module_forward_pre_hook(enter),
             torch.nn.modules.module.register_module_forward_hook(leave)]
    try:
        yield
    finally:
        for hook in hooks:
            hook.remove()


def host_times(call: Callable[[], object], repeats: int, synchronize: Callable[[], None]) -> list[float]:
    """Host time (us) of each of ``repeats`` calls, the device idle at the start of each."""
    samples = []
    for _ in range(repeats):
        synchronize()
        start = time.perf_counter()
        call()
        samples.append((time.perf_counter() - start) * 1e6)
    synchronize()
    return samples


def bench_times(call: Callable[[], object], static_in: torch.Tensor, inputs: list[torch.Tensor],
                repeats: int, cuda: bool) -> tuple[list[float], list[float] | None]:
    """Host time and, on a GPU, CUDA-event time (us) of the same ``repeats`` calls,
    issued the way ``bench`` times eager: a new input copied in before each, no
    synchronisation in between."""
    host, events = [], []
    for i in range(repeats):
        static_in.copy_(inputs[i % len(inputs)])
        if cuda:
            events.append((torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)))
            events[-1][0].record()
        start = time.perf_counter()
        call()
        host.append((time.perf_counter() - start) * 1e6)
        if cuda:
            events[-1][1].record()
    if not cuda:
        return host, None
    torch.cuda.synchronize()
    return host, [s.elapsed_time(e) * 1000.0 for s, e in events]


def run_host_costs(config: MoEConfig, settings: RunSettings, profiled: int = 10,
                   timed: int = 300) -> dict[str, Any]:
    """Time ``timed`` unprofiled eager forwards, profile ``profiled`` more, summarize.

    The costs are scaled to the host time of forwards issued as ``bench``
    issues them, whose CUDA-event time is ``eager_latency``. Runs on a CPU too
    (no kernels, no CUDA events there), which the tests use.
    """
    bench = Bench(config, settings, timed)
    cuda = settings.torch_device.type == "cuda"
    synchronize = torch.cuda.synchronize if cuda else (lambda: None)
    with torch.no_grad():
        model, static_in = bench.model(), bench.static_input()

        def forward() -> None:
            model(static_in)

        host_times(forward, 3, synchronize)   # warm-up: lazy init, cuBLAS handles
        synced = latency_stats(host_times(forward, timed, synchronize))
        host, events = bench_times(forward, static_in, bench.inputs, timed, cuda)
        synchronize()

        def annotated() -> None:
            synchronize()
            with torch.profiler.record_function(FORWARD):
                forward()

        plain = profiling.profile(lambda: [annotated() for _ in range(profiled)])
        with annotate.profiling_roles(), annotating_modules():
            labelled = profiling.profile(lambda: [annotated() for _ in range(2)])
    host_stats = latency_stats(host)
    return {
        "config": bench.config.to_dict(), "settings": settings.to_dict(),
        "forwards_timed": timed, "forwards_profiled": profiled,
        "eager_host_us": host_stats, "eager_latency": latency_stats(events) if events else None,
        "eager_host_synced_us": synced,
        **summarize(forwards(plain), forwards(labelled), host_stats["median_us"]),
    }


def format_summary(data: dict[str, Any]) -> list[list[str]]:
    """Rows for the CLI's table: each kind, the launch call, Python, and the totals."""
    rows = [[kind, str(k["ops"]), str(k["launches"]), f"{k['dispatch_us']:.2f}"] for kind, k in data["kinds"].items()]
    python = data["python"]
    rows += [["launch call", "", str(data["launches_per_forward"]), f"{data['launch_us']:.2f}"],
             ["python per op", str(data["ops_per_forward"]), "", f"{python['per_op_us']:.2f}"],
             ["python per module call", str(data["module_calls_per_forward"]), "",
              f"{python['per_module_call_us']:.2f}"],
             ["eager forward (host, device idle at start)", "", "", f"{data['eager_host_synced_us']['median_us']:.2f}"],
             ["eager forward (host, as bench issues it)", "", "", f"{data['eager_host_us']['median_us']:.2f}"]]
    if data["eager_latency"] is not None:
        rows.append(["eager forward (CUDA events)", "", "", f"{data['eager_latency']['median_us']:.2f}"])
    return rows
