"""The whole-process check's checks off the device: a start-up's records taped once, the checker timed on them anywhere.

    PYTHONPATH=. python benchmarks/check_replay.py tape --out $OUT/startup.tape     # on a GPU: one checked start-up
    PYTHONPATH=. python benchmarks/check_replay.py tape --cpu --out startup.tape    # anywhere: the CPU dry run's
    PYTHONPATH=. python benchmarks/check_replay.py tape --serving 5000 --out $OUT/serving.tape   # a server's life
    PYTHONPATH=. python benchmarks/check_replay.py replay startup.tape [--repeats 5] [--profile PATH] [--out FILE]

Device time is lent by the half hour, and the CPU dry run of the same start-up
(``startup_check_cpu.py``) cannot show what costs most in the checks on a GPU:
no caching allocator reports a block there, so no graph pool appears, and the
rules that follow pool memory (10, 11 and 13) have little to do. ``tape`` runs
``process_startup_overhead.py``'s start-up (61 layers, 8 batch sizes captured
into one pool; ``--cpu``: ``startup_check_cpu.py``'s dry run of it) under the
whole-process check, and keeps every call the check made on its incremental
checker (``IncrementalChecker``: each batch of records fed, each question
asked) with how many findings each returned, pickled with the tape's
provenance; ``--serving STEPS``: ``serving_overhead.py``'s server instead, its
start-up and that many served steps. ``replay`` makes those calls again, in order, on a fresh checker,
``--repeats`` times, and reports the seconds per kind of call and per feed
(medians over repeats) and the findings, which must be the tape's (else it
exits 1): the checks' cost on a GPU's records, profiled (``--profile``) where
profiling costs no device time. Left out: the recorder, and the check's own
work around the checker (its reports, the site book, the recorder's watches),
which ``process_startup_overhead.py``'s ``check_s`` includes.

A tape is a pickle: replay only tapes you made.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import pickle
import pstats
import shlex
import statistics
import sys
import time
import warnings
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import serving_overhead as served  # its neighbours: a script's folder is on the path
import startup_check_cpu
import torch
from process_startup_overhead import SIZES, report, startup

from gpu_demo.guard.process import check_process
from gpu_demo.lab.measure.provenance import provenance
from simlib.checker import IncrementalChecker
from simlib.checker.incremental import WINDOW

CALLS = ("feed", "finish", "watched_reads", "watched_frees", "results_of", "forget_eager", "ties_writers")
FINDS = ("feed", "finish")   # the calls that return findings
Call = tuple[str, tuple, "int | None"]   # (method, its arguments, how many findings it returned)


@contextmanager
def taping(calls: list[Call]) -> Iterator[None]:
    """Every call of ``CALLS`` on any ``IncrementalChecker`` inside, appended to ``calls``."""
    originals = {name: getattr(IncrementalChecker, name) for name in CALLS}

    def taped(name: str, method: Any) -> Any:
        def call(self: IncrementalChecker, *args: Any) -> Any:
            if name == "feed":
                args = (list(args[0]),)   # the batch as fed: the caller drops its records after
            out = method(self, *args)
            calls.append((name, args, len(out) if name in FINDS else None))
            return out
        return call

    for name, method in originals.items():
        setattr(IncrementalChecker, name, taped(name, method))
    try:
        yield
    finally:
        for name, method in originals.items():
            setattr(IncrementalChecker, name, method)


def tape(cpu: bool, layers: int, serving: int) -> list[Call]:
    """The calls one checked start-up makes on its checker (``serving``: a server's life of that many
    steps instead, ``serving_overhead.py``'s, with its own layers and batch sizes)."""
    calls: list[Call] = []
    with taping(calls), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if cpu:
            startup_check_cpu.child("checked", layers, SIZES)
            return calls
        torch.cuda.init()
        checker = check_process("warn")
        with torch.no_grad():
            if serving:
                server = served.start_up(layers, served.SIZES)
                for step, n in enumerate(served.batch_sizes(serving, max(served.SIZES))):
                    served.serve_step(server, n, step)
            else:
                startup(layers, SIZES)
        checker.check_now("when the run ended")
    return calls


def records_fed(calls: list[Call]) -> int:
    return sum(len(args[0]) for name, args, _ in calls if name == "feed")


def replay(calls: list[Call], repeats: int, profile: Path | None = None) -> dict[str, Any]:
    """The calls again on a fresh checker each repeat: seconds per kind and per feed, and findings."""
    totals, by_call, feeds = [], defaultdict(list), defaultdict(list)
    for repeat in range(repeats + (profile is not None)):
        profiler = cProfile.Profile() if profile is not None and repeat == repeats else None
        gc.collect()
        checker = IncrementalChecker(whole_program=True, window=WINDOW)
        spent: dict[str, float] = defaultdict(float)
        found = mismatched = 0
        if profiler is not None:
            profiler.enable()
        for k, (name, args, taped) in enumerate(calls):
            started = time.perf_counter()
            out = getattr(checker, name)(*args)
            seconds = time.perf_counter() - started
            spent[name] += seconds
            if name == "feed":
                feeds[k].append(seconds)
            if taped is not None:
                found += len(out)
                mismatched += len(out) != taped
        if profiler is not None:
            profiler.disable()
            text = io.StringIO()
            stats = pstats.Stats(profiler, stream=text)
            stats.sort_stats("tottime").print_stats(40)
            stats.sort_stats("cumulative").print_stats(40)
            profile.parent.mkdir(parents=True, exist_ok=True)
            profile.write_text(text.getvalue())
            break   # a profiled repeat is not timed
        totals.append(sum(spent.values()))
        for name, seconds in spent.items():
            by_call[name].append(seconds)
    return {"total_s": totals, "median_total_s": statistics.median(totals),
            "by_call_s": {name: statistics.median(s) for name, s in by_call.items()},
            "feeds_ms": [round(statistics.median(s) * 1000, 3) for s in feeds.values()],
            "findings": found, "mismatched_calls": mismatched}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    verbs = parser.add_subparsers(dest="verb", required=True)
    taper = verbs.add_parser("tape", help="run one checked start-up and write the calls on its checker")
    taper.add_argument("--out", type=Path, required=True, help="the tape (a pickle)")
    taper.add_argument("--cpu", action="store_true", help="the CPU dry run of the start-up (no GPU needed)")
    taper.add_argument("--layers", type=int, help="the stack's layers (default: 61; serving: 4)")
    taper.add_argument("--serving", type=int, default=0, metavar="STEPS",
                       help="tape serving_overhead.py's server for STEPS steps instead (a GPU's)")
    player = verbs.add_parser("replay", help="make a tape's calls again on a fresh checker, timed")
    player.add_argument("tape", type=Path)
    player.add_argument("--repeats", type=int, default=5)
    player.add_argument("--profile", type=Path, help="one more replay under cProfile, its top functions here")
    player.add_argument("--out", type=Path, help="JSON results (default: print only)")
    args = parser.parse_args(argv)
    if args.verb == "replay" and args.repeats < 1:
        parser.error("--repeats: at least 1")
    command = shlex.join(["python", "benchmarks/check_replay.py", *argv])
    if args.verb == "tape":
        if args.cpu and args.serving:
            parser.error("--serving: a GPU's server only (no --cpu)")
        args.layers = args.layers or (4 if args.serving else 61)
        if not args.cpu and not torch.cuda.is_available():
            print("check_replay.py tape: needs CUDA (it captures real graphs); --cpu tapes the dry run",
                  file=sys.stderr)
            return 2
        calls = tape(args.cpu, args.layers, args.serving)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with args.out.open("wb") as fh:
            pickle.dump({"provenance": {**provenance(argv), "command": command}, "cpu": args.cpu,
                         "layers": args.layers, "serving": args.serving, "calls": calls}, fh,
                        protocol=pickle.HIGHEST_PROTOCOL)
        print(json.dumps({"calls": len(calls), "records": records_fed(calls), "tape": str(args.out)}))
        return 0
    with args.tape.open("rb") as fh:
        taped = pickle.load(fh)
    calls = taped["calls"]
    result = {"provenance": {**provenance(argv), "command": command},
              "tape": {**taped["provenance"], "cpu": taped["cpu"], "layers": taped["layers"], "serving": taped["serving"]},
              "calls": len(calls), "records": records_fed(calls),
              "repeats": args.repeats, "tape_findings": sum(n for _, _, n in calls if n is not None),
              **replay(calls, args.repeats, args.profile)}
    report(result, args.out)
    if result["mismatched_calls"]:
        print(f"check_replay.py: {result['mismatched_calls']} calls found other findings than on the tape",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
