"""Run the corpus on a GPU: what the device did, and what the guard said.

For each program, in its own child process (``gpu_demo.protocol.child``):

* **truth**: build the program twice under one seed (the captured instance and
  an eager reference that never takes part in the capture, so it cannot repair
  or spoil the captured static buffers), warm up, capture, and replay with fresh
  inputs, comparing each replay with the reference run *after* it on the same
  input (the protocol of ``gpu_demo.moe.harness``). The outcome is a
  ``simlib.glossary`` word, with the error of every replay;
* **guard**: ``gpu_demo.guard.check_capture`` on ``gpu_demo.corpus.<name>:make``
  (recording and checker, plus its own differential replay in its own child).

A program is **flagged** when the guard names its hazard: a checker rule fired,
or the differential replay showed ``silent_wrong`` or ``illegal_address``, or
the capture failed and the guard named the CUDA error (``capture_error:<cudaError...>``
or ``capture_error:shape_mismatch``, classified by ``gpu_demo.protocol.cuda_errors``). A
capture that failed with an unclassified exception, or a child that died, does
not count: a crash is not a diagnosis. A safe program must come out clean: no
finding, verdict ``correct``, and a correct truth.
"""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from gpu_demo import corpus
from gpu_demo.protocol.capture_replay import fresh_like, replay_and_compare
from gpu_demo.protocol.child import run_in_child
from gpu_demo.protocol.tolerance import DTYPES
from simlib.glossary import CORRECT, ILLEGAL_ADDRESS, SILENT_WRONG, badge

RESULTS_FILE = Path(__file__).resolve().parents[1] / "results" / "corpus-h200.json"
NAMED_CAPTURE_ERROR = re.compile(r"^capture_error:(cudaError\w+|shape_mismatch)$")
README_PLACEHOLDER = ("The corpus has not been run on a GPU yet: `python -m gpu_demo corpus` on a GPU writes "
                      "`gpu_demo/results/corpus-h200.json`, and this paragraph is generated from it "
                      "(`python -m gpu_demo corpus --summary`).")


def truth_in_child(payload: dict[str, Any], checkpoint: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """The GPU's truth for one program (``gpu_demo.protocol.child`` entry; needs CUDA)."""
    program = corpus.load(payload["name"])
    device, dtype, seed = torch.device("cuda"), DTYPES[payload["dtype"]], payload["seed"]
    torch.manual_seed(seed)
    fn, examples = program.make(device, dtype)
    torch.manual_seed(seed)
    reference, _ = program.make(device, dtype)
    generator = torch.Generator().manual_seed(seed + 2)
    fresh = [[fresh_like(t, generator, device) for t in examples] for _ in range(payload["replays"])]
    with torch.no_grad():
        evidence = replay_and_compare(
            fn, [t.clone() for t in examples], fresh,
            want=lambda i: reference(*(t.clone() for t in fresh[i])),
            reference="a second instance of the program, run eagerly after each replay")
    return evidence.to_dict()


def run_program(name: str, *, dtype: str = "bfloat16", replays: int = 3, seed: int = 0,
                timeout: float = 300.0) -> dict[str, Any]:
    """Truth and guard for one program, each in its own process."""
    from gpu_demo.guard.check import check_capture

    program = corpus.load(name)
    truth = run_in_child(f"{__name__}:truth_in_child",
                         {"name": name, "dtype": dtype, "replays": replays, "seed": seed}, timeout)
    if "child_error" in truth:
        truth = {**truth, "outcome": None, "message": truth["child_error"]["message"]}
    guard = check_capture(corpus.target(name), replays=replays, dtype=DTYPES[dtype], seed=seed,
                          timeout=timeout).to_dict()
    return {"name": name, "expected": program.EXPECTED, "about": (program.__doc__ or "").strip().splitlines()[0],
            "truth": truth, "guard": guard, "flagged_by": flagged_by(guard)}


def run_corpus(names: Sequence[str], jobs: int = 1, **options: Any) -> list[dict[str, Any]]:
    """``run_program`` for each name, ``jobs`` at a time, results in the order given."""
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(lambda name: run_program(name, **options), names))


def flagged_by(guard: dict[str, Any]) -> list[str]:
    """What in the guard's report names a hazard (module docstring); empty: not flagged."""
    reasons = list(guard["rules"])
    verdict = guard["verdict"] or ""
    if verdict in (SILENT_WRONG, ILLEGAL_ADDRESS):
        reasons.append(f"replay: {verdict}")
    if NAMED_CAPTURE_ERROR.match(verdict):
        reasons.append(verdict)
    return reasons


def judged(result: dict[str, Any]) -> bool:
    """Did the guard get this program right? Hazardous: flagged. Safe: clean, and correct on the GPU."""
    if result["expected"] == corpus.HAZARDOUS:
        return bool(result["flagged_by"])
    guard = result["guard"]
    return not guard["findings"] and guard["verdict"] == CORRECT and result["truth"].get("outcome") == CORRECT


# -- output ----------------------------------------------------------------------------------

def table_rows(results: list[dict[str, Any]]) -> list[list[str]]:
    return [[r["name"], r["expected"], _outcome(r["truth"]), r["guard"]["verdict"] or "not replayed",
             ", ".join(r["flagged_by"]) or "clean", "yes" if judged(r) else "NO"] for r in results]


TABLE_HEADERS = ["program", "expected", "GPU truth", "guard verdict", "flagged by", "right"]


def _outcome(truth: dict[str, Any]) -> str:
    outcome = truth.get("outcome")
    if outcome is None:
        return f"no result ({truth.get('message', '')})"
    errors = " ".join("fault" if e is None else f"{e:.2g}" for e in truth.get("errors", []))
    return f"{outcome} [{errors}]" if errors else outcome


def summary(results: dict[str, Any] | None) -> str:
    """The README's corpus paragraph and table, from a results file (a placeholder without one)."""
    if results is None:
        return README_PLACEHOLDER
    programs = results["programs"]
    hazardous = [r for r in programs if r["expected"] == corpus.HAZARDOUS]
    safe = [r for r in programs if r["expected"] == corpus.SAFE]
    by_rule = sum(any(reason.startswith("rule ") for reason in r["flagged_by"]) for r in hazardous)
    p = results["provenance"]
    sentence = (
        f"On the {p['gpu']} (torch {p['torch']}, {p['date_utc'][:10]}; `{p['command']}`), the guard flagged "
        f"{sum(bool(r['flagged_by']) for r in hazardous)} of {len(hazardous)} hazardous programs "
        f"({by_rule} by a checker rule) and passed {sum(judged(r) for r in safe)} of {len(safe)} safe ones "
        f"with no finding. GPU truth: each program captured and replayed {results['replays']} times with "
        f"fresh inputs against an eager reference.")
    lines = ["| program | expected | GPU truth | guard flagged by |", "|---|---|---|---|"]
    lines += [f"| `{r['name']}` | {r['expected']} | {_badge(r['truth'])} | {', '.join(r['flagged_by']) or 'clean'} |"
              for r in programs]
    return sentence + "\n\n" + "\n".join(lines)


def _badge(truth: dict[str, Any]) -> str:
    return badge(truth["outcome"]) if truth.get("outcome") else "no result"


def load_results(path: Path = RESULTS_FILE) -> dict[str, Any] | None:
    """The committed corpus results, or ``None`` when the corpus has not been run on a GPU."""
    return json.loads(path.read_text()) if path.exists() else None
