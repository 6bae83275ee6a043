"""``torchrun ... -m gpu_demo.distributed``: two commands, each started on every rank by torchrun.

``torchrun --nproc-per-node N -m gpu_demo.distributed run --tp N [--out FILE]``
    each rank joins the group torchrun describes (NCCL on GPUs, one GPU per
    local rank; gloo on CPUs) and runs ``gpu_demo.lab.distributed.run``; rank 0
    prints a summary and writes the JSON.
``torchrun --nproc-per-node N -m gpu_demo.distributed check [--strict] script.py [args...]``
    the script with every rank's captures checked, and one merged report on
    rank 0 (``gpu_demo.guard.job.whole_job``).

An entry point, so it sits on the CLI floor (``tests/test_layout.py``): it
writes the provenance every results file carries (``gpu_demo.lab.measure.provenance``).
``gpu_demo/distributed.py`` is where users type it, and hands over to ``main_and_leave``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from datetime import timedelta
from pathlib import Path
from typing import NoReturn, Sequence

import torch
import torch.distributed as dist

from gpu_demo.guard.job import whole_job
from gpu_demo.lab.cli.common import unwritable
from gpu_demo.lab.distributed.run import run_job
from gpu_demo.lab.measure.provenance import provenance
from gpu_demo.lab.moe.settings import DEVICES, RunSettings
from simlib.programs.spec import MoEConfig


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="torchrun --nproc-per-node N -m gpu_demo.distributed")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="the tensor-parallel MoE: truth, guard verdicts, latency per rank")
    run.add_argument("--tp", type=int, required=True, help="ranks in the tensor-parallel group (= --nproc-per-node)")
    run.add_argument("--out", type=Path, help="JSON written by rank 0")
    run.add_argument("--device", choices=DEVICES, default="auto")
    run.add_argument("--dtype", default="bfloat16")
    run.add_argument("--replays", type=int, default=3)
    for size, default in (("layers", 1), ("tokens", 16), ("hidden", 512), ("intermediate", 1024), ("experts", 8)):
        run.add_argument(f"--{size}", type=int, default=default, help=f"MoEConfig.{size} (default {default})")
    run.add_argument("--no-latency", action="store_true", help="skip the replay-latency measurement")
    run.add_argument("--collective-timeout-s", type=float, default=30.0,
                     help="how long a collective waits for its peers (gloo: the divergent case's stray "
                          "all-reduce waits this long)")
    check = commands.add_parser("check", help="a script with every rank's captures checked, merged on rank 0")
    check.add_argument("--strict", action="store_true", help="raise at the end of a capture with a finding")
    check.add_argument("argv", nargs=argparse.REMAINDER, help="script.py args... or -m module args...")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["check"]:   # by hand: argparse would take the script's own ``-m`` and flags
        strict = argv[1:2] == ["--strict"]
        return whole_job.main(argv[1 + strict:], "raise" if strict else "warn")
    args = _parser().parse_args(argv)
    if "RANK" not in os.environ:
        print("run this under torchrun (it sets RANK, WORLD_SIZE, MASTER_ADDR): "
              f"torchrun --nproc-per-node {args.tp} -m gpu_demo.distributed run --tp {args.tp}", file=sys.stderr)
        return 2
    if args.tp < 1 or args.replays < 1:
        print("--tp and --replays must be at least 1", file=sys.stderr)
        return 2
    if args.out is not None and (why := unwritable(args.out, try_it=False)):   # every rank asks
        print(f"cannot write --out {args.out}: {why}", file=sys.stderr)
        return 2
    try:
        settings = RunSettings(dtype=args.dtype, device=args.device)
        base = MoEConfig(replays=args.replays, layers=args.layers, tokens=args.tokens, hidden=args.hidden,
                         intermediate=args.intermediate, experts=args.experts)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    on_gpu = settings.torch_device.type == "cuda"
    if on_gpu:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if on_gpu else "gloo", timeout=timedelta(seconds=args.collective_timeout_s))
    results = run_job(args.tp, base=base, settings=settings, latency=not args.no_latency)
    if results is not None:
        results["provenance"] = {**provenance([]), "command": shlex.join(
            ["torchrun", "--nproc-per-node", str(args.tp), "-m", "gpu_demo.distributed", *argv])}
        results["job"] = {"backend": dist.get_backend(), "world_size": args.tp, "mode": "cuda" if on_gpu else "dry_run",
                          "nccl": ".".join(map(str, torch.cuda.nccl.version())) if on_gpu else None}
        for name, case in results["ranks"][0]["cases"].items():
            truth = " ".join(f"rank {r['rank']}: {r['cases'][name]['truth']['outcome']}"
                             for r in results["ranks"] if "truth" in r["cases"][name])
            print(f"{name:30s} guard {'clean' if case['guard']['clean'] else 'HAZARD'} "
                  f"{[code for _, code in case['guard']['rules']]} {truth}")
        if args.out:
            args.out.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
            print(f"wrote {args.out}")
    dist.destroy_process_group()
    return 0


def main_and_leave() -> NoReturn:
    """``main()``, then leave without the interpreter's teardown: once the recorder has switched
    CUDA's trace reports on, every block freed during teardown calls back into a Python that can
    no longer import ("CUDA trace hook execution failed: KeyError: '__import__'")."""
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
