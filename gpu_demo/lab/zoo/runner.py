"""Run the zoo on a GPU: the device's truth, the guard's verdict, and how long a check takes.

    python -m gpu_demo.lab.zoo.runner --out results/zoo-h200.json [--jobs N] [--only NAME ...]
    python -m gpu_demo.lab.zoo.runner --summary     # docs/results.md's table, from the committed results

For each entry (``gpu_demo.lab.zoo.ENTRIES``):

* **truth**: two builds under one seed (the captured one and an eager reference
  that never takes part in the capture), then the one protocol,
  ``gpu_demo.guard.protocol.capture_replay.replay_and_compare``: warm up, capture, and
  ``replays`` replays with fresh inputs, each compared with the reference on the
  same input. All truths run in one child process (``gpu_demo.guard.protocol.child``),
  checkpointed after each entry, so a fault costs only what follows it;
* **guard**: ``gpu_demo.guard.check.check_capture`` on the entry's factory, first in a fresh
  child process (``check_s["first"]``, ``jobs`` entries at a time, so these times
  share the machine), then again, one entry after another, in one warm worker
  (``warm_checks``) that an earlier check has primed (``check_s["warm"]``): what a
  test session that checks many models pays per check;
* **process**: the whole-process check (``check_process``, what
  ``CAPTURE_ORDER_CHECK=1`` starts) over the entry served the way a server
  starts up (``gpu_demo.lab.corpus.serving.serve``: eager calls, a capture,
  replays with fresh inputs), each entry in its own child process.

An entry is **clean** when neither check found anything, the guard's verdict is
``correct`` and the truth is ``correct``: every zoo entry is a correct program.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from gpu_demo.guard.check import check_capture
from gpu_demo.guard.process import checked_in_child, checked_run
from gpu_demo.guard.protocol.capture_replay import fresh_like, replay_and_compare
from gpu_demo.guard.protocol.child import run_in_child
from gpu_demo.guard.protocol.tolerance import DTYPES
from gpu_demo.guard.protocol.worker import warm_checks
from gpu_demo.lab import zoo
from gpu_demo.lab.corpus.serving import serve
from gpu_demo.lab.measure.provenance import RESULTS_DIR, provenance
from simlib.glossary import CORRECT, PASSED, badge

PROGRAM = "gpu_demo.lab.zoo.runner"
RESULTS_FILE = RESULTS_DIR / "zoo-h200.json"
README_PLACEHOLDER = ("The zoo has not been run on a GPU yet: `python -m gpu_demo.lab.zoo.runner --out "
                      "gpu_demo/lab/results/zoo-h200.json` on a GPU writes it, and this paragraph is generated from "
                      "it (`python -m gpu_demo.lab.zoo.runner --summary`).")


def truths_in_child(payload: dict[str, Any], checkpoint: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """The GPU's truth for each entry named in ``payload`` (``gpu_demo.guard.protocol.child`` entry; needs CUDA)."""
    truths: dict[str, Any] = {}
    for name in payload["names"]:
        truths[name] = truth(name, dtype=DTYPES[payload["dtype"]], replays=payload["replays"], seed=payload["seed"])
        checkpoint({"truths": truths})
        torch.cuda.empty_cache()   # the entry's two builds are gone: hand their blocks back
    return {"truths": truths}


def truth(name: str, *, dtype: torch.dtype, replays: int, seed: int) -> dict[str, Any]:
    """Capture one build of the entry, replay it on fresh inputs, compare with a second build run eagerly."""
    device = torch.device("cuda")
    make = zoo.factory(zoo.entry(name))
    fn, examples = make(device, dtype)
    reference, _ = make(device, dtype)
    generator = torch.Generator().manual_seed(seed + 2)
    fresh = [[fresh_like(t, generator, device) for t in examples] for _ in range(replays)]
    with torch.no_grad():
        return replay_and_compare(fn, [t.clone() for t in examples], fresh,
                                  want=lambda i: reference(*(t.clone() for t in fresh[i])),
                                  reference="a second build of the model, run eagerly after each replay").to_dict()


def process_in_child(payload: dict[str, Any], checkpoint: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """The whole-process check over one entry served as a server would serve it
    (``gpu_demo.guard.protocol.child`` entry; needs CUDA): every check's findings."""
    return checked_run(lambda: serve(zoo.factory(zoo.entry(payload["name"])), DTYPES[payload["dtype"]],
                                     payload["replays"], payload["seed"]), "when the entry was served")


def process_entry(name: str, *, dtype: str, replays: int, seed: int, timeout: float) -> dict[str, Any]:
    """``process_in_child`` in a fresh child (``checked_in_child``)."""
    payload = {"name": name, "dtype": dtype, "replays": replays, "seed": seed}
    return checked_in_child("gpu_demo.lab.zoo.runner:process_in_child", payload, timeout)


def check_entry(name: str, *, dtype: str, replays: int, seed: int, timeout: float) -> dict[str, Any]:
    """The guard's report on one entry, from a first check in a fresh child process, and its time."""
    e = zoo.entry(name)
    start = time.perf_counter()
    report = check_capture(e.target, replays=replays, dtype=DTYPES[dtype], seed=seed, timeout=timeout)
    return {"name": name, "model": e.model, "mode": e.mode, "library": e.library,
            "guard": report.to_dict(), "check_s": {"first": time.perf_counter() - start}}


def time_warm_checks(results: list[dict[str, Any]], *, dtype: str, replays: int, seed: int, timeout: float) -> None:
    """Each entry checked again in one warm worker (``warm_checks``), as a test session would: the
    worker's first check (torch and the libraries imported) primes it, then each entry's time is
    ``check_s["warm"]`` and its answer ``guard_warm`` (``clean`` asks that it passed too)."""
    check = partial(check_capture, replays=replays, dtype=DTYPES[dtype], seed=seed, timeout=timeout)
    with warm_checks():
        for i, result in enumerate(results):
            target = zoo.entry(result["name"]).target
            if i == 0:
                check(target)
            start = time.perf_counter()
            report = check(target)
            result["check_s"]["warm"] = time.perf_counter() - start
            result["guard_warm"] = report.answer


def run_zoo(names: Sequence[str], *, jobs: int = 1, dtype: str = "bfloat16", replays: int = 3, seed: int = 0,
            timeout: float = 300.0) -> list[dict[str, Any]]:
    """Truth (one child for all, beside the checks) and guard (``jobs`` entries at a time) for each name,
    in the order given."""
    with ThreadPoolExecutor(max_workers=jobs + 1) as pool:
        # "gpu_demo.lab.zoo.runner", not __name__: -m runs it as __main__
        truth_child = pool.submit(run_in_child, "gpu_demo.lab.zoo.runner:truths_in_child",
                                  {"names": list(names), "dtype": dtype, "replays": replays, "seed": seed},
                                  timeout * len(names))
        options = {"dtype": dtype, "replays": replays, "seed": seed, "timeout": timeout}
        checks = [pool.submit(check_entry, n, **options) for n in names]
        results = [c.result() for c in checks]
        time_warm_checks(results, **options)   # alone: its times are a warm worker's, undisturbed
        processes = [pool.submit(process_entry, n, **options) for n in names]
        for result, process in zip(results, processes):
            result["process"] = process.result()
        raw = truth_child.result()
    truths = raw.get("truths", {})
    died = raw.get("child_error", {}).get("message", "the truth child returned nothing")
    for result in results:
        result["truth"] = truths.get(result["name"]) or {"outcome": None, "message": died}
        result["clean"] = clean(result)
    return results


def clean(result: dict[str, Any]) -> bool:
    """No finding, no problem, verdict ``correct``, and a correct truth (module docstring); a result
    from before the whole-process column (no ``process``) is judged on the rest."""
    guard, process = result["guard"], result.get("process", {})
    return (not guard["findings"] and not guard["problem"] and guard["verdict"] == CORRECT
            and result.get("guard_warm", PASSED) == PASSED and result["truth"].get("outcome") == CORRECT
            and not process.get("findings") and not process.get("problem"))


# -- output ----------------------------------------------------------------------------------

def _library_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for library in sorted(set(zoo.LIBRARIES.values())):
        try:
            versions[library] = metadata.version(library)
        except metadata.PackageNotFoundError:
            versions[library] = None
    return versions


def _truth_cell(truth: dict[str, Any]) -> str:
    if not truth.get("outcome"):
        return f"no result ({truth.get('message', '')})"
    errors = " ".join("fault" if e is None else f"{e:.2g}" for e in truth.get("errors", []))
    return f"{badge(truth['outcome'])} [{errors}]" if errors else badge(truth["outcome"])


def _guard_cell(guard: dict[str, Any]) -> str:
    said = guard["verdict"] or "not replayed"
    return f"{said}, {', '.join(guard['rules']) or 'no finding'}" + (f" (could not check: {guard['problem']})"
                                                                       if guard["problem"] else "")


def summary(results: dict[str, Any] | None, only: list[str] | None = None) -> str:
    """docs/results.md's zoo paragraph and table, from a results file (a placeholder without one); the
    whole-process column once the results have it (a run from before it has none). ``only``: those
    entries' rows, and the counts over them."""
    if results is None:
        return README_PLACEHOLDER
    entries = [r for r in results["entries"] if only is None or r["name"] in only]
    p = results["provenance"]
    whole = all("process" in r for r in entries)
    libraries = ", ".join(f"{name} {version}" for name, version in p["libraries"].items())
    sentence = (
        f"On the {p['gpu']} (torch {p['torch']}, {libraries}, {p['date_utc'][:10]}; `{p['command']}`), "
        f"{sum(r['clean'] for r in entries)} of {len(entries)} zoo entries were clean: "
        f"{'no finding in either check' if whole else 'no finding'}, verdict "
        f"correct, and {results['replays']} replays with fresh inputs that agreed with a second, eager build "
        f"(the truth). Check time: the entry's first `check_capture`, in a fresh child process "
        f"({results['jobs']} entries checked at a time), then the same check in one warm worker "
        f"(`gpu_demo.warm_checks()`, primed by an earlier check), as a test session pays it.")
    if whole:
        sentence += (" Whole-process: the entry served as a server starts up (eager calls, a capture, "
                     "replays) under `check_process`, what `CAPTURE_ORDER_CHECK=1` starts.")
    head = ["model", "mode", "GPU truth", "guard", *(["whole-process"] if whole else []), "check s (first / warm)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in entries:
        cells = [f"`{r['model']}`", r["mode"], _truth_cell(r["truth"]), _guard_cell(r["guard"]),
                 *([_process_cell(r["process"])] if whole else []),
                 f"{r['check_s']['first']:.1f} / {r['check_s']['warm']:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return sentence + "\n\n" + "\n".join(lines)


def _process_cell(process: dict[str, Any]) -> str:
    found = ", ".join(process["rules"]) or "no finding"
    return found + (f" (stopped: {process['problem']})" if process["problem"] else "")


def load_results(path: Path = RESULTS_FILE) -> dict[str, Any] | None:
    """The committed zoo results, or ``None`` when the zoo has not been run on a GPU."""
    return json.loads(path.read_text()) if path.exists() else None


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


RUN_FLAGS = ("out", "jobs", "replays", "dtype", "timeout")   # a run's: none goes with ``--summary``


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"python -m {PROGRAM}", description="The model zoo on a GPU: truth, "
                                "guard verdict and check time per entry, as JSON with provenance.")
    p.add_argument("--out", type=Path, help="the JSON results file to write (needed unless --summary)")
    p.add_argument("--jobs", type=_positive, default=4, help="entries checked at once (default 4)")
    p.add_argument("--only", nargs="+", metavar="ENTRY", choices=zoo.NAMES,
                   help="run (or with --summary, show) only these entries")
    p.add_argument("--replays", type=_positive, default=3, help="replays with fresh inputs per entry")
    p.add_argument("--dtype", choices=tuple(DTYPES), default="bfloat16", help="dtype of weights and inputs")
    p.add_argument("--timeout", type=_positive, default=300, help="seconds before a child is abandoned")
    p.add_argument("--summary", action="store_true",
                   help="print docs/results.md's zoo block from the committed results (with --only, those entries' rows)")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = parser()
    args = command.parse_args(argv)
    if args.summary:   # it runs nothing: a run's flag with it would be said and then ignored
        given = [f"--{dest}" for dest in RUN_FLAGS if getattr(args, dest) != command.get_default(dest)]
        if given:
            print(f"{PROGRAM}: --summary prints the committed results and runs nothing: leave out "
                  f"{', '.join(given)}, or leave out --summary to run on a GPU", file=sys.stderr)
            return 2
        print(summary(load_results(), only=args.only))
        return 0
    if args.out is None:
        print(f"{PROGRAM}: give --out FILE for the results (or --summary)", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print(f"{PROGRAM}: needs a CUDA GPU and none is visible (the CPU dry run of the zoo is "
              "tests/gpu_demo/lab/zoo)", file=sys.stderr)
        return 2
    missing = [why for e in zoo.ENTRIES if (why := zoo.unavailable(e))]
    if missing:
        print(f"{PROGRAM}: {missing[0]}", file=sys.stderr)
        return 2
    try:
        args.out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        print(f"{PROGRAM}: cannot write --out {args.out}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    if args.out.is_dir() or not os.access(args.out.parent, os.W_OK):
        print(f"{PROGRAM}: cannot write --out {args.out}: not a writable file path", file=sys.stderr)
        return 2
    started = time.perf_counter()
    entries = run_zoo(args.only or zoo.NAMES, jobs=args.jobs, dtype=args.dtype, replays=args.replays,
                      timeout=args.timeout)
    results = {"provenance": {**provenance(argv, PROGRAM), "libraries": _library_versions()},
               "dtype": args.dtype, "replays": args.replays, "jobs": args.jobs,
               "wall_s": time.perf_counter() - started, "entries": entries}
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    print(summary(results))
    print(f"wrote {args.out}")
    print(f"beside the committed H200 run, entry by entry: python -m gpu_demo compare {args.out}")
    return 0 if all(r["clean"] for r in entries) else 1


if __name__ == "__main__":
    sys.exit(main())
