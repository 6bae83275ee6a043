"""``torchrun --nproc-per-node N -m gpu_demo.distributed run --tp N``: the TP MoE on every rank.

Each rank runs the same cases in the same order (their collectives pair up):

1. the incident's orders and fixes (``CASES``): per rank, the eager check (the
   TP stack against the full one-GPU stack, same input), the guard's verdict
   (the capture recorded on every rank, checked alone and across the ranks by
   rank 0) and, on GPUs, the truth (``replay_and_compare``: capture, replays
   with fresh inputs, each compared with the full stack run eagerly);
2. on GPUs, replay latency of the safe program with and without the all-reduce;
3. with 2 ranks or more, the divergent program (the rank with an empty shard
   leaves the all-reduce out of its graph) and its fix: guard verdicts, and
   on GPUs the fix's truth; the divergent graphs are never replayed (they
   would hang). Last, since on gloo its unmatched all-reduce times out and may
   leave the group unusable.

On CPUs it is the dry run (gloo; no graph is captured, so no truth and no
latency). Rank 0 gathers every rank's results over the store; ``__main__``
adds ``provenance`` (``gpu_demo.lab.measure.provenance``) and ``job`` (backend,
world size, mode, NCCL version) and writes the JSON: ``config``,
``settings``, and ``ranks``, one per rank: ``rank``, ``tolerance``,
``seconds``, ``latency_us`` (``with_all_reduce``, ``without_all_reduce``:
median of 200 replays, CUDA events) and ``cases``, each with
``eager_error`` (TP stack against the full stack, eagerly), ``guard``
(``clean``, ``rules`` as ``[ranks, code]``, rank 0's ``report``) and
``truth`` (``outcome`` in ``simlib.glossary`` words, ``errors`` per replay).
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from typing import Any

import torch

from gpu_demo.guard.job.ranks import check_job, gather_on_rank0, rank_and_world
from gpu_demo.guard.protocol.capture_replay import capture, replay_and_compare, warm_up
from gpu_demo.guard.protocol.metric import output_error
from gpu_demo.guard.record import annotate
from gpu_demo.guard.record.capture import record_capture
from gpu_demo.lab.distributed.tp_moe import TensorParallel, TensorParallelMoE
from gpu_demo.lab.moe.model import MoEStack
from gpu_demo.lab.moe.settings import RunSettings
from simlib.programs.spec import MoEConfig

# name -> the MoEConfig changes of each case; DIVERGENT: the TensorParallel changes
CASES: dict[str, dict[str, Any]] = {
    "shared_first": {"order": "shared_first"},
    "routed_first": {"order": "routed_first"},                           # the incident
    "fix:skip_in_capture": {"order": "routed_first", "dispose": "skip_in_capture"},
    "fix:own_buffer": {"order": "routed_first", "dispose": "own_buffer"},
    "fix:clone": {"order": "routed_first", "clone": True},
}
DIVERGENT = {
    "fix:empty_shard_joins": {"shards": "last_empty", "skip_empty_shard": False},
    "empty_shard_skips_all_reduce": {"shards": "last_empty", "skip_empty_shard": True},
}
LATENCY_REPLAYS = 200


def run_job(tp: int, *, base: MoEConfig, settings: RunSettings, latency: bool = True) -> dict[str, Any] | None:
    """Every case on this rank (the group must be initialised); rank 0 gets the job's results."""
    rank, world = rank_and_world()
    if world != tp:
        raise SystemExit(f"--tp {tp} but the job has {world} rank(s); start it with "
                         f"torchrun --nproc-per-node {tp} (one rank per shard)")
    on_gpu = settings.torch_device.type == "cuda"
    started = time.perf_counter()
    mine: dict[str, Any] = {"rank": rank, "tolerance": settings.tolerance, "cases": {}}
    for name, changes in CASES.items():
        config = replace(base, **changes)
        plan = TensorParallel(rank, world)
        mine["cases"][name] = {"eager_error": _eager_error(config, settings, plan),
                               "guard": _guard(name, config, settings, plan, replays=config.replays)}
        if on_gpu:
            mine["cases"][name]["truth"] = replay_truth(config, settings, plan)
    if on_gpu and latency:
        mine["latency_us"] = {kind: replay_us(replace(base, order="shared_first"), settings,
                                               TensorParallel(rank, world), reduce=kind == "with_all_reduce")
                              for kind in ("with_all_reduce", "without_all_reduce")}
    if world >= 2:
        for name, changes in DIVERGENT.items():
            config, plan = replace(base, order="shared_first"), TensorParallel(rank, world, **changes)
            mine["cases"][name] = {"eager_error": _eager_error(config, settings, plan),
                                   "guard": _guard(name, config, settings, plan, replays=0)}
            if on_gpu and not plan.skip_empty_shard:   # the fix replays like any safe program
                mine["cases"][name]["truth"] = replay_truth(config, settings, plan)
    mine["seconds"] = round(time.perf_counter() - started, 2)
    texts = gather_on_rank0("results", json.dumps(mine))
    if texts is None:
        return None
    return {"config": base.to_dict(), "settings": settings.to_dict(), "ranks": [json.loads(t) for t in texts]}


def _inputs(config: MoEConfig, settings: RunSettings, count: int) -> list[torch.Tensor]:
    """The same inputs on every rank (tensor parallelism replicates the activations)."""
    generator = torch.Generator().manual_seed(settings.seed + 1)
    return [settings.random(config.tokens, config.hidden, generator=generator) for _ in range(count)]


def _eager_error(config: MoEConfig, settings: RunSettings, plan: TensorParallel) -> float:
    """The TP stack against the full stack, both eager, on one input (the sharding's own check)."""
    (x,) = _inputs(config, settings, 1)
    with torch.no_grad():
        return output_error([TensorParallelMoE(config, settings, plan)(x.clone())], [MoEStack(config, settings)(x.clone())])


def _guard(name: str, config: MoEConfig, settings: RunSettings, plan: TensorParallel, *, replays: int) -> dict:
    (x,) = _inputs(config, settings, 1)
    annotate.label(x, "residual")
    with torch.no_grad():
        trace = record_capture(TensorParallelMoE(config, settings, plan), [x], replays=replays,
                               meta={"rank": plan.rank, "world_size": plan.world, "case": name})
    verdict = check_job(trace, f"guard/{name}")
    rules = sorted({(",".join(map(str, f["ranks"])), f["code"]) for f in verdict["findings"]})
    return {"clean": verdict["clean"], "rules": rules, "report": verdict["report"] if plan.rank == 0 else None}


def replay_truth(config: MoEConfig, settings: RunSettings, plan: TensorParallel) -> dict[str, Any]:
    """Capture, replays with fresh inputs, each against the full stack run eagerly (needs CUDA)."""
    model, reference = TensorParallelMoE(config, settings, plan), MoEStack(config, settings)
    static_in, *fresh = _inputs(config, settings, 1 + config.replays)
    with torch.no_grad():
        evidence = replay_and_compare(model, [static_in], [[f] for f in fresh],
                                      want=lambda i: reference(fresh[i].clone()),
                                      reference="the full one-GPU stack, run eagerly", mode=config.capture_mode)
    return {"outcome": evidence.outcome, "errors": evidence.errors, "tolerance": evidence.tolerance,
            "message": evidence.message}


def replay_us(config: MoEConfig, settings: RunSettings, plan: TensorParallel, *, reduce: bool) -> float:
    """Median replay time in µs of the captured TP stack (CUDA events, one replay each)."""
    model = TensorParallelMoE(config, settings, plan, reduce=reduce)
    (x,) = _inputs(config, settings, 1)
    with torch.no_grad():
        warm_up(lambda: model(x))
        graph, _ = capture(lambda: model(x))
    times = []
    for i in range(LATENCY_REPLAYS + 20):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        if i >= 20:
            times.append(start.elapsed_time(end) * 1000.0)
    return round(sorted(times)[len(times) // 2], 2)
