"""Replay latency of one MoE layer: eager, one stream, two streams, and PDL.

Timing: CUDA events around each replay, after warm-up, the captured input
buffer refreshed from one of several input sets before every replay (so the
caches do not see one input over and over). A short device-side sleep is
queued before each start event so that the host is always ahead of the
device: the numbers are the device-side time of a replay, not the host's
launch overhead (``calibrate`` measures that separately). Eager latency is
measured without the sleep, since host launch gaps are what eager costs.

Overlap: the best a second stream can do is hide the shorter branch entirely,
so ``ideal = single - min(shared, routed)`` where each branch's cost is the
latency of a graph of that branch alone minus the latency of a graph holding
one trivial kernel (the floor every graph pays). For each dual-stream
configuration, ``overlap efficiency = (single - dual) / (single - ideal)``.
"""

from __future__ import annotations

import statistics
import tempfile
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Callable

import torch

from gpu_demo.guard.protocol import capture_replay
from gpu_demo.guard.protocol.metric import relative_error
from gpu_demo.lab.measure import profiling
from gpu_demo.lab.moe import kernels
from gpu_demo.lab.moe.model import MoEStack
from gpu_demo.lab.moe.settings import RunSettings
from simlib.programs.spec import ROUTED_STREAMS, MoEConfig

SLEEP_CYCLES = 100_000  # about 50 us at the H200's boost clock: keeps the host ahead


def latency_stats(samples_us: list[float]) -> dict[str, float | int]:
    ordered = sorted(samples_us)
    return {
        "median_us": round(statistics.median(ordered), 3),
        "p10_us": round(ordered[len(ordered) // 10], 3),
        "p90_us": round(ordered[(9 * len(ordered)) // 10], 3),
        "samples": len(ordered),
    }


def time_calls(call: Callable[[], object], static_in: torch.Tensor, input_sets: list[torch.Tensor],
               replays: int, host_ahead: bool) -> list[float]:
    """Device time (us) of ``call()`` per iteration, by CUDA events."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(replays)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(replays)]
    for i in range(replays):
        static_in.copy_(input_sets[i % len(input_sets)])
        if host_ahead:
            torch.cuda._sleep(SLEEP_CYCLES)
        starts[i].record()
        call()
        ends[i].record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) * 1000.0 for s, e in zip(starts, ends)]


class Bench:
    """Builds, captures and times the variants of one configuration."""

    def __init__(self, config: MoEConfig, settings: RunSettings, replays: int, input_sets: int = 4) -> None:
        # Only the sizes come from ``config``: the variants are the correct
        # program (plain shared expert, shared first) on one layer.
        self.config = config.with_(layers=1, order="shared_first", shared_mode="plain", dispose="always",
                                   clone=False, inputs="fresh", capture_fault="none", pdl=False,
                                   routed_stream="main")
        self.settings, self.replays = settings, replays
        generator = torch.Generator().manual_seed(settings.seed + 3)
        self.inputs = [settings.random(config.tokens, config.hidden, generator=generator) for _ in range(input_sets)]

    def static_input(self) -> torch.Tensor:
        return self.inputs[0].clone()

    def graph(self, fn: Callable[[torch.Tensor], torch.Tensor], static_in: torch.Tensor,
              debug: bool = False) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
        capture_replay.warm_up(lambda: fn(static_in))
        graph = torch.cuda.CUDAGraph(keep_graph=debug)  # keep the cudaGraph_t for debug_dump
        if debug:
            graph.enable_debug_mode()
        with torch.cuda.graph(graph):
            out = fn(static_in)
        return graph, out

    def time_graph(self, graph: torch.cuda.CUDAGraph, static_in: torch.Tensor) -> dict[str, Any]:
        graph.replay()  # first replay uploads the graph
        samples = time_calls(graph.replay, static_in, self.inputs, self.replays, host_ahead=True)
        return latency_stats(samples)

    def model(self, **changes: Any) -> MoEStack:
        dual_stream = changes.pop("dual_stream", True)
        return MoEStack(self.config.with_(**changes), self.settings, dual_stream=dual_stream)

    def kernels(self, graph: torch.cuda.CUDAGraph, replays: int = 5) -> dict[str, Any]:
        """What the profiler shows for a few replays: kernels, busy time, gaps."""
        timeline = profiling.profile(lambda: [graph.replay() for _ in range(replays)])
        groups = timeline.per_launch()[-replays:]
        if not groups:
            return {"profiler": "recorded no kernels"}
        return {
            "kernels_per_replay": len(groups[-1]),
            "streams_used": len({k.stream for k in groups[-1]}),
            "kernel_time_us": profiling.median([sum(k.dur_us for k in g) for g in groups]),
            "span_us": profiling.median([g[-1].end_us - g[0].start_us for g in groups]),
            "same_stream_gap_median_us": profiling.median([x for g in groups for x in profiling.same_stream_gaps(g)]),
            "sink_start_minus_predecessor_end_us": profiling.median([profiling.sink_gap(g) for g in groups]),
            "first_kernel_start_by_stream_us": _stream_starts(groups),
            "max_blocks": max(k.blocks for k in groups[-1]),
            "occupancy_pct_median": profiling.median(
                [float(k.occupancy_pct) for k in groups[-1] if k.occupancy_pct is not None]),
        }


def run_bench(config: MoEConfig, settings: RunSettings, replays: int = 300) -> dict[str, Any]:
    """Every measurement of the module docstring, as one JSON-ready dict."""
    bench = Bench(config, settings, replays)
    base = bench.config
    latency: dict[str, Any] = {}
    diagnostics: dict[str, Any] = {}

    with torch.no_grad():
        eager_model, static_in = bench.model(), bench.static_input()
        capture_replay.warm_up(lambda: eager_model(static_in))
        latency["eager"] = latency_stats(time_calls(lambda: eager_model(static_in), static_in, bench.inputs,
                                                    bench.replays, host_ahead=False))

        variants = {
            "graph_single_stream": {"dual_stream": False},
            "graph_dual_shared_first": {"order": "shared_first"},
            "graph_dual_routed_first_skip_in_capture": {"order": "routed_first", "dispose": "skip_in_capture"},
        }
        for name, changes in variants.items():
            static_in = bench.static_input()
            graph, _ = bench.graph(bench.model(**changes), static_in)
            latency[name] = bench.time_graph(graph, static_in)
            diagnostics[name] = bench.kernels(graph)

        alone = bench.model(dispose="never").layers[0]
        static_in = bench.static_input()
        x = alone.norm(static_in)
        branches = {"shared_alone": lambda _: alone.shared(x), "routed_alone": lambda _: alone._routed(x),
                    "floor_one_kernel": lambda t: torch.add(t, 0)}
        for name, fn in branches.items():
            graph, _ = bench.graph(fn, static_in)
            latency[name] = bench.time_graph(graph, static_in)
            diagnostics[name] = bench.kernels(graph)

    single = latency["graph_single_stream"]["median_us"]
    floor = latency["floor_one_kernel"]["median_us"]
    shared_cost = latency["shared_alone"]["median_us"] - floor
    routed_cost = latency["routed_alone"]["median_us"] - floor
    hideable = min(shared_cost, routed_cost)  # single - ideal
    overlap = {
        "single_us": single, "floor_us": floor, "shared_branch_us": round(shared_cost, 3),
        "routed_branch_us": round(routed_cost, 3), "ideal_dual_us": round(single - hideable, 3),
        "efficiency": {
            name: round((single - latency[name]["median_us"]) / hideable, 3) if hideable > 0 else None
            for name in ("graph_dual_shared_first", "graph_dual_routed_first_skip_in_capture")
        },
    }
    return {
        "config": base.to_dict(), "settings": settings.to_dict(), "replays_per_variant": replays,
        "input_sets": len(bench.inputs), "latency": latency, "overlap": overlap,
        "diagnostics": diagnostics, "pdl": run_pdl(bench),
    }


def run_pdl(bench: Bench) -> dict[str, Any]:
    """The residual add as a PDL-launched Triton kernel, with the routed experts
    on the main stream (right before it) or on the alternate stream.

    Three variants per placement: ``off`` (two torch adds), ``fused`` (the same
    Triton kernel launched without PDL) and ``on`` (launched with PDL). Then
    ``pdl_saves_us`` = off − on is the whole change, split into
    ``fusion_saves_us`` = off − fused and ``pdl_alone_saves_us`` = fused − on.
    """
    out: dict[str, Any] = {}
    variants = {"off": (False, nullcontext), "fused": (True, kernels.without_pdl), "on": (True, nullcontext)}
    with torch.no_grad():
        reference = bench.model()
        for routed in ROUTED_STREAMS:
            for variant, (fused, launching) in variants.items():
                name = f"routed_on_{routed}_pdl_{variant}"
                static_in = bench.static_input()
                with launching():
                    graph, static_out = bench.graph(bench.model(pdl=fused, routed_stream=routed), static_in,
                                                    debug=variant == "on")
                entry: dict[str, Any] = bench.time_graph(graph, static_in)
                entry["sink_start_minus_predecessor_end_us"] = bench.kernels(graph).get(
                    "sink_start_minus_predecessor_end_us")
                static_in.copy_(bench.inputs[1])
                graph.replay()
                entry["relative_error_vs_eager"] = relative_error(static_out, reference(bench.inputs[1].clone()))
                if variant == "on":
                    entry.update(_pdl_in_graph(graph))
                out[name] = entry
    for routed in ROUTED_STREAMS:
        median = {v: out[f"routed_on_{routed}_pdl_{v}"]["median_us"] for v in variants}
        out[f"routed_on_{routed}_pdl_saves_us"] = round(median["off"] - median["on"], 3)
        out[f"routed_on_{routed}_fusion_saves_us"] = round(median["off"] - median["fused"], 3)
        out[f"routed_on_{routed}_pdl_alone_saves_us"] = round(median["fused"] - median["on"], 3)
    return out


def _stream_starts(groups: list[list[profiling.KernelEvent]]) -> dict[str, float | None]:
    """Median start of each stream's first kernel, the stream named by its kernel count."""
    starts: dict[int, list[float]] = {}
    for g in groups:
        for count, start in profiling.stream_starts(g).items():
            starts.setdefault(count, []).append(start)
    return {f"stream_with_{count}_kernels": profiling.median(v) for count, v in sorted(starts.items())}


def _pdl_in_graph(graph: torch.cuda.CUDAGraph) -> dict[str, Any]:
    """Whether the PDL kernel and programmatic edges are in the captured graph,
    read from the graph's ``cudaGraphDebugDotPrint`` dump."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "graph.dot"
        graph.debug_dump(str(path))
        if not path.exists():
            return {"graph_dump": "cudaGraphDebugDotPrint wrote no file"}
        dot = path.read_text(errors="replace")
    lines = [line.strip() for line in dot.splitlines() if "programmatic" in line.lower()]
    return {
        "pdl_kernel_in_graph": "_residual_add_kernel" in dot,
        "dot_lines_mentioning_programmatic": len(lines),
        "programmatic_examples": [line[:300] for line in lines[:3]],
    }
