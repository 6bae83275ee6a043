"""A torchrun program for the whole-job check: the TP MoE's decode graph, captured and replayed (CUDA).

    torchrun --nproc-per-node N -m gpu_demo.distributed check -m gpu_demo.lab.distributed.example [options]

``--shards last_empty --skip-empty-shard`` is the divergent program (the last
rank's graph has no all-reduce); with ``--replays 0`` it stops before a replay
would hang. Without ``--skip-empty-shard`` it is the fix.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

import torch
import torch.distributed as dist

from gpu_demo.guard.protocol.capture_replay import capture, warm_up
from gpu_demo.lab.distributed.tp_moe import SHARDS, TensorParallel, TensorParallelMoE
from gpu_demo.lab.moe.settings import RunSettings
from simlib.programs.spec import MoEConfig


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu_demo.lab.distributed.example")
    parser.add_argument("--order", choices=("shared_first", "routed_first"), default="shared_first")
    # The default is a fix (skip the dispose while capturing): shared_first with the dispose is
    # the incident's race (rule 4, unordered), on one GPU and on each rank alike.
    parser.add_argument("--dispose", choices=("always", "skip_in_capture", "own_buffer"), default="skip_in_capture")
    parser.add_argument("--shards", choices=SHARDS, default="even")
    parser.add_argument("--skip-empty-shard", action="store_true", help="the hazard: leave the all-reduce out")
    parser.add_argument("--replays", type=int, default=3)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("this example captures a CUDA graph: it needs a GPU per rank", file=sys.stderr)
        return 2
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl")
    try:
        plan = TensorParallel(dist.get_rank(), dist.get_world_size(), args.shards, args.skip_empty_shard)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        dist.destroy_process_group()
        return 2
    config, settings = MoEConfig(order=args.order, dispose=args.dispose), RunSettings(device="cuda")
    model = TensorParallelMoE(config, settings, plan)
    x = settings.random(config.tokens, config.hidden, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        warm_up(lambda: model(x))
        graph, _ = capture(lambda: model(x))
        for _ in range(args.replays):
            x.copy_(torch.randn_like(x))
            graph.replay()
    torch.cuda.synchronize()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
