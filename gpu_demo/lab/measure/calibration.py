"""Numbers for the simulator's timing model, read off the H200 with torch.profiler.

* kernel durations per role (norm, gate, topk, permute, routed_experts,
  combine, shared_expert, merge) from a few replays of the single-stream
  graph. A graph replay carries no annotations, so roles are assigned by
  position: the single-stream graph runs its kernels in the order they were
  launched, which is the order of an eager run whose launches are annotated
  with their role. If the two kernel sequences differ, the eager run's
  durations are reported instead, and ``role_source`` says so;
* the median idle gap between consecutive kernels on one stream inside a
  replay;
* the cross-stream join gap: in a dual-stream replay with the routed experts
  (the long branch) on the alternate stream, the time from the end of the
  alternate stream's last kernel to the start of the kernel after the join;
* the host cost of ``graph.replay()`` and of one eager op launch.
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from typing import Any

import torch

from gpu_demo.guard.protocol import capture_replay
from gpu_demo.guard.record import annotate
from gpu_demo.guard.record.annotate import ALT
from gpu_demo.lab.measure import profiling
from gpu_demo.lab.moe.model import MoEStack
from gpu_demo.lab.moe.settings import RunSettings
from simlib.programs.spec import MoEConfig


def _host_us(call: Any, repeats: int, per_call: int = 1) -> float:
    """Median host time of ``per_call`` back-to-back calls, divided by ``per_call``,
    with the device idle at the start of each repetition."""
    samples = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(per_call):
            call()
        samples.append((time.perf_counter() - start) * 1e6 / per_call)
    torch.cuda.synchronize()
    return round(statistics.median(samples), 3)


def run_calibration(config: MoEConfig, settings: RunSettings, replays: int = 10) -> dict[str, Any]:
    base = config.with_(order="shared_first", shared_mode="plain", dispose="always", layers=1, pdl=False)
    generator = torch.Generator().manual_seed(settings.seed + 4)
    static_in = settings.random(config.tokens, config.hidden, generator=generator)

    with torch.no_grad():
        single = MoEStack(base, settings, dual_stream=False)
        capture_replay.warm_up(lambda: single(static_in))
        with annotate.profiling_roles():
            eager = profiling.profile(lambda: single(static_in))
        eager_roles = [(eager.role_of(k), k) for k in eager.kernels]
        graph, _ = capture_replay.capture(lambda: single(static_in))
        graph.replay()
        replayed = profiling.profile(lambda: [graph.replay() for _ in range(replays)]).per_launch()[-replays:]

        dual = MoEStack(base.with_(routed_stream=ALT), settings)
        capture_replay.warm_up(lambda: dual(static_in))
        dual_graph, _ = capture_replay.capture(lambda: dual(static_in))
        dual_graph.replay()
        dual_replays = profiling.profile(lambda: [dual_graph.replay() for _ in range(replays)]).per_launch()[-replays:]

        graph_launch_host_us = _host_us(graph.replay, repeats=200)
        a = torch.ones(1024, device=settings.torch_device)
        b = torch.empty_like(a)
        eager_launch_host_us = _host_us(lambda: torch.add(a, a, out=b), repeats=50, per_call=100)

    eager_names = [k.name for _, k in eager_roles]
    names_match = bool(replayed) and all(eager_names == [k.name for k in g] for g in replayed)
    if names_match:
        samples = [[(role, k) for (role, _), k in zip(eager_roles, g)] for g in replayed]
        role_source = "graph_replay (roles by position, matched to an annotated eager run)"
    else:
        samples = [eager_roles]
        role_source = "eager (graph replay kernel sequence differed from eager)"
    roles = _per_role(samples)

    joins = [j for j in (profiling.join_gap(g) for g in dual_replays) if j is not None and j[1]]
    return {
        "config": base.to_dict(),
        "settings": settings.to_dict(),
        "replays_profiled": replays,
        "role_source": role_source,
        "kernel_roles": roles,
        "kernels_per_replay": len(replayed[-1]) if replayed else 0,
        "same_stream_gap_us": {
            "median": profiling.median([x for g in replayed for x in profiling.same_stream_gaps(g)]),
            "what": "idle time between consecutive kernels of one stream inside a single-stream graph replay",
        },
        "cross_stream_join_gap_us": {
            "median": profiling.median([gap for gap, _ in joins]),
            "replays_with_cross_stream_join": len(joins),
            "what": "end of the alternate stream's last kernel to the start of the first kernel after the join",
        },
        "graph_launch_host_us": graph_launch_host_us,
        "eager_op_launch_host_us": eager_launch_host_us,
    }


def _per_role(samples: list[list[tuple[str, profiling.KernelEvent]]]) -> dict[str, Any]:
    """Per role: median total duration per replay and each kernel's median."""
    totals: dict[str, list[float]] = defaultdict(list)
    kernels: dict[tuple[str, int], list[float]] = defaultdict(list)
    names: dict[tuple[str, int], str] = {}
    for group in samples:
        per_role: dict[str, float] = defaultdict(float)
        for position, (role, k) in enumerate(group):
            per_role[role or "unannotated"] += k.dur_us
            kernels[(role or "unannotated", position)].append(k.dur_us)
            names[(role or "unannotated", position)] = k.name
        for role, total in per_role.items():
            totals[role].append(total)
    return {
        role: {
            "total_median_us": profiling.median(values),
            "kernels": [
                {"name": names[key][:120], "median_us": profiling.median(kernels[key])}
                for key in sorted(kernels) if key[0] == role
            ],
        }
        for role, values in totals.items()
    }
