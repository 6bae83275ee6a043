"""Where a checked served step's time goes: the serving benchmark's loop, one layer of the check at a time.

    PYTHONPATH=. python benchmarks/serving_layers.py --out $OUT/serving-layers.json

``serving_overhead.py`` times the whole check against none over a server's
life; this times the served steps with the layers between, each in a fresh
process, every layer once per repeat, interleaved so drift hits all. Each run
starts up (``serving_overhead.start_up``), serves ``--warm`` steps untimed (the
check serves from its first replay, and every batch size has replayed), then
times ``--steps`` steps:

``plain``         nothing added
``gpu_trace``     torch's GPU-trace reports switched on (``torch._C._activate_gpu_trace()``),
                  nobody listening: what torch's C++ costs each allocation, free and event
                  once they are reported to Python, as the recorder needs them
``gpu_trace_shut`` the same, then switched off again by the recorder's gate
                  (``gpu_demo.guard.record.report_gate``): what is left of it once shut
``memory_watch``  the recorder's memory watch alone at the bottom of the torch-function stack,
                  watching nothing: what standing aside costs every Python-level call
``checked_loud``  ``check_process`` with the gate unavailable: the reports on all the time, as
                  before the gate
``checked``       ``check_process``: the whole-process check

Each layer's ``median_us`` is the median over repeats of its microseconds per
step, ``over_plain`` the median of its per-repeat ratio to that repeat's
``plain`` run. ``--profile PATH``: one more checked run under cProfile, after
the repeats; its top functions go to PATH, after the calls the memory watch
handed on to be recorded, counted by name, and whether the recorder stood aside
quiet. Writes JSON with provenance.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import io
import json
import pstats
import shlex
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch
from process_startup_overhead import fresh_process, report  # its neighbours: a script's folder is on the path
from serving_overhead import SIZES, batch_sizes, serve_step, start_up

from gpu_demo.guard.process import CaptureChecker, check_process
from gpu_demo.guard.record import report_gate
from gpu_demo.guard.record.memory_watch import MemoryWatch, install_at_bottom
from gpu_demo.lab.measure.provenance import provenance

LAYERS = ("plain", "gpu_trace", "gpu_trace_shut", "memory_watch", "checked_loud", "checked")


def child(layer: str, layers: int, warm: int, steps: int, profile: Path | None = None) -> dict:
    torch.cuda.init()
    checker, picked = None, collections.Counter()
    if layer.startswith("gpu_trace"):
        torch._C._activate_gpu_trace()
        if layer == "gpu_trace_shut":
            report_gate.GATE.shut()
    elif layer == "memory_watch":
        install_at_bottom(MemoryWatch(lambda func, args, kwargs: func(*args, **kwargs)))
    elif layer.startswith("checked"):
        if layer == "checked_loud":
            report_gate.GATE = report_gate.ReportGate(None)
        checker = check_process("warn")
        if profile:
            counting(checker, picked)
    requests = batch_sizes(warm + steps, max(SIZES))
    profiler = cProfile.Profile() if profile else None
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        server = start_up(layers, SIZES)
        for i in range(warm):
            serve_step(server, requests[i], i)
        torch.cuda.synchronize()
        if profiler is not None:
            picked.clear()
            profiler.enable()
        start = time.perf_counter()
        for i in range(warm, warm + steps):
            serve_step(server, requests[i], i)
        torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
        if profiler is not None:
            profiler.disable()
    if profiler is not None:
        text = io.StringIO()
        print(f"calls recorded while standing aside, in {steps} steps: {dict(picked.most_common())}; "
              f"quiet (the reports off): {checker.recorder.aside.quiet}", file=text)
        print(f"what watches each bucket's static input: {watchers(checker, server)}", file=text)
        print(f"why the reports stay on: {loud(checker)}", file=text)
        print("what the graphs share (rule 11 walks it at each replay):", *sharing(checker), sep="\n  ", file=text)
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(40)
        profile.write_text(text.getvalue())
    return {"layer": layer, "per_step_us": elapsed / steps * 1e6}


def counting(checker: CaptureChecker, picked: collections.Counter) -> None:
    """Count, by name, each call the memory watch hands on to be recorded (it takes the recorder's
    ``record_call`` when the recorder first stands aside)."""
    aside = checker.recorder.aside
    record = aside.record_call

    def counted(func, args, kwargs):  # noqa: ANN001, ANN202 (the watch's signature)
        picked[getattr(func, "__name__", str(func))] += 1
        return record(func, args, kwargs)

    aside.record_call = counted


def loud(checker: CaptureChecker) -> list[str]:
    """Each watched free the recorder's free watch does not cover (at most 8), with what the ledger
    and the caching allocator know of its block: why the reports stay on, where they do."""
    recorder, out = checker.recorder, []
    segments = torch.cuda.memory_snapshot()
    for lo, hi in recorder.aside.uncovered[:8]:
        known = [(ptr, nbytes, handle.label) for ptr, (nbytes, handle) in recorder.ledger.blocks.items()
                 if ptr < hi and lo < ptr + nbytes]
        held = [f"{b.get('state')} {b['size']} B, segment of pool {s.get('segment_pool_id')}, stream {s.get('stream')}"
                for s in segments for b in _blocks(s) if b["address"] < hi and lo < b["address"] + b["size"]]
        out.append(f"[{hex(lo)}, +{hi - lo}): ledger {known}, allocator {held}")
    return out


def sharing(checker: CaptureChecker, most: int = 24) -> list[str]:
    """Per graph, whether rule 11 finds it alone (its replays then cost nothing), and each live write of
    another graph that lies on its writes (at most ``most`` lines): what a replay of it must walk."""
    graphs, out = checker.checker._clobber._graphs, []
    for gid, g in graphs.items():
        out.append(f"graph {gid}: {len(g.writes)} writes, {sum(w.live for w in g.writes)} live, alone {g.alone}")
        for other, o in graphs.items():
            for w in o.writes if other != gid else ():
                mine = [v for v in g.writes if v.span[0] < w.span[1] and w.span[0] < v.span[1]]
                if w.live and mine and len(out) < most:
                    out.append(f"  graph {other}'s live {w.node.label}->{w.arg.label} {w.span[1] - w.span[0]} B "
                               f"on its {[(v.node.label, v.arg.label, 'live' if v.live else 'dead') for v in mine[:3]]}")
    return out


def _blocks(segment: dict):  # noqa: ANN202 (a snapshot's dicts)
    address = segment["address"]
    for block in segment["blocks"]:
        yield {**block, "address": address}
        address += block["size"]


def watchers(checker: CaptureChecker, server) -> dict[int, list[str]]:  # noqa: ANN001 (serving_overhead.Server)
    """Per batch size, which of the checker's watched ranges its static input lies on (a write there
    is recorded): a diagnosis of the calls recorded, reading the rules' own state."""
    inner = checker.checker
    sources = {"graphs_clobber": inner._clobber.watched(), "output_overwritten": inner._overwritten.watched(),
               "first_replay": [span for span, _ in inner._reads.items()], "frees": inner.watched_frees()}
    out = {}
    for size, x in server.inputs.items():
        lo, hi = x.data_ptr(), x.data_ptr() + x.numel() * x.element_size()
        out[size] = [name for name, spans in sources.items() if any(a < hi and lo < b for a, b in spans)]
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="JSON results (default: print only)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--layers", type=int, default=4, help="layers of the served stack")
    parser.add_argument("--warm", type=int, default=500, help="steps served before the timed ones")
    parser.add_argument("--steps", type=int, default=3000, help="steps timed per run")
    parser.add_argument("--profile", type=Path, help="also profile one more checked run (cProfile) into this file")
    parser.add_argument("--child", choices=LAYERS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    sizes = (str(args.layers), str(args.warm), str(args.steps))
    if args.child:
        print(json.dumps(child(args.child, args.layers, args.warm, args.steps, args.profile)))
        return 0
    if not torch.cuda.is_available():
        print("serving_layers: needs CUDA (it replays real graphs)", file=sys.stderr)
        return 2
    options = ("--layers", sizes[0], "--warm", sizes[1], "--steps", sizes[2])
    runs = [{layer: fresh_process(__file__, layer, *options) for layer in LAYERS} for _ in range(args.repeats)]
    if args.profile:
        args.profile.parent.mkdir(parents=True, exist_ok=True)
        fresh_process(__file__, "checked", *options, "--profile", str(args.profile))
    result = {
        "provenance": {**provenance(argv), "command": shlex.join(["python", "benchmarks/serving_layers.py", *argv])},
        "repeats": args.repeats, "layers_of_the_stack": args.layers, "warm": args.warm, "steps": args.steps,
        "layers": {layer: {"per_step_us": [run[layer]["per_step_us"] for run in runs],
                           "median_us": statistics.median(run[layer]["per_step_us"] for run in runs),
                           "over_plain": statistics.median(run[layer]["per_step_us"] / run["plain"]["per_step_us"]
                                                           for run in runs)} for layer in LAYERS},
    }
    return report(result, args.out)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
