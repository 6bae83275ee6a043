"""Run the corpus on a GPU: what the device did, and what each mode of the guard said.

For each program, in its own child processes (``gpu_demo.guard.protocol.child``):

* **truth**: for a function, build the program twice under one seed (the
  captured instance and an eager reference that never takes part in the
  capture, so it cannot repair or spoil the captured static buffers), warm up,
  capture, and replay with fresh inputs, comparing each replay with the
  reference run *after* it on the same input (the protocol of
  ``gpu_demo.lab.moe.harness``); for a script, its own comparisons with eager. The
  outcome is a ``simlib.glossary`` word, with the error of every replay;
* **guard**: ``gpu_demo.guard.check.check_capture`` on ``gpu_demo.lab.corpus.<name>:make``
  (recording and checker, plus its own differential replay in its own child);
  a script has no one function to check, so this mode does not apply to it;
* **process**: the whole-process check (``check_process``, what
  ``CAPTURE_ORDER_CHECK=1`` starts) over the program run the way a server
  starts up (``gpu_demo.lab.corpus.serving.serve``: eager calls, a capture,
  replays with fresh inputs), or over the script, and the findings of every
  check it made;
* **anchors** (``anchors=True``): the program under PyTorch's CUDA sanitizer and
  compute-sanitizer's memcheck (``gpu_demo.lab.corpus.anchors``).

A program is **flagged** by ``check_capture`` when the guard names its hazard: a
checker rule fired, or the differential replay showed ``silent_wrong`` or
``illegal_address``, or the capture failed and the guard named the CUDA error
(``capture_error:<cudaError...>`` or ``capture_error:shape_mismatch``, classified by
``gpu_demo.guard.protocol.cuda_errors``). A capture that failed with an unclassified
exception, or a child that died, does not count: a crash is not a diagnosis. The
whole-process check flags a program only by a rule. A safe program must come
out clean in every mode that applies: no finding, verdict ``correct``, and a
correct truth.
"""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import torch

from gpu_demo.guard.protocol.capture_replay import fresh_like, replay_and_compare
from gpu_demo.guard.protocol.child import run_in_child
from gpu_demo.guard.protocol.cuda_errors import classify_capture_failure, first_error, is_illegal_address, one_line
from gpu_demo.guard.protocol.tolerance import DTYPES, tolerance_for
from gpu_demo.lab import corpus
from gpu_demo.lab.corpus import anchors as anchor_runs
from gpu_demo.lab.corpus.serving import serve
from simlib.glossary import CORRECT, ILLEGAL_ADDRESS, SILENT_WRONG, badge

RESULTS_FILE = Path(__file__).resolve().parents[1] / "results" / "corpus-h200.json"
NAMED_CAPTURE_ERROR = re.compile(r"^capture_error:(cudaError\w+|shape_mismatch)$")
README_PLACEHOLDER = ("The corpus has not been run on a GPU yet: `python -m gpu_demo corpus` on a GPU writes "
                      "`gpu_demo/lab/results/corpus-h200.json`, and this paragraph is generated from it "
                      "(`python -m gpu_demo corpus --summary`).")


def truth_in_child(payload: dict[str, Any], checkpoint: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """The GPU's truth for one program (``gpu_demo.guard.protocol.child`` entry; needs CUDA)."""
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


def script_truth_in_child(payload: dict[str, Any], checkpoint: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """A script's truth: its own comparisons with eager, judged by the dtype's tolerance."""
    program = corpus.load(payload["name"])
    dtype = DTYPES[payload["dtype"]]
    torch.manual_seed(payload["seed"])
    failed_captures: list[BaseException] = []
    try:
        with _capture_failures(failed_captures):
            errors: list[float | None] = list(program.run(torch.device("cuda"), dtype))
    except RuntimeError as exc:
        if failed_captures:   # raised inside ``with torch.cuda.graph``: the capture failed, nothing replayed
            first = first_error(failed_captures[0])
            return {"ran": True, "outcome": classify_capture_failure(first), "errors": [], "message": one_line(first)}
        if not is_illegal_address(exc):
            raise
        return {"ran": True, "outcome": ILLEGAL_ADDRESS, "errors": [None], "message": one_line(exc)}
    tolerance = tolerance_for(dtype)
    outcome = CORRECT if all(e <= tolerance for e in errors) else SILENT_WRONG
    return {"ran": True, "outcome": outcome, "errors": errors, "tolerance": tolerance,
            "reference": "the script's own eager runs"}


@contextmanager
def _capture_failures(failed: list[BaseException]) -> Iterator[None]:
    """Note in ``failed`` each exception that leaves a ``with torch.cuda.graph(...)`` block."""
    original = torch.cuda.graph.__exit__

    def exit_noting(self: torch.cuda.graph, *exc_info: Any) -> Any:
        if exc_info[1] is not None:
            failed.append(exc_info[1])
        return original(self, *exc_info)

    torch.cuda.graph.__exit__ = exit_noting
    try:
        yield
    finally:
        torch.cuda.graph.__exit__ = original


def process_in_child(payload: dict[str, Any], checkpoint: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """The whole-process check over one program (``gpu_demo.guard.protocol.child`` entry; needs CUDA):
    every check's findings, and what stopped the program if something did."""
    from gpu_demo.guard.process import checked_run

    program = corpus.load(payload["name"])
    dtype = DTYPES[payload["dtype"]]

    def run() -> None:
        if corpus.is_script(payload["name"]):
            torch.manual_seed(payload["seed"])
            program.run(torch.device("cuda"), dtype)
        else:
            serve(program.make, dtype, payload["replays"], payload["seed"])

    return checked_run(run, "when the program ended")


def run_program(name: str, *, dtype: str = "bfloat16", replays: int = 3, seed: int = 0,
                timeout: float = 300.0, anchors: bool = False) -> dict[str, Any]:
    """Truth, ``check_capture`` (functions only), the whole-process check and, with ``anchors``,
    the two sanitizers, for one program, each in its own process."""
    from gpu_demo.guard.check import check_capture
    from gpu_demo.guard.process import checked_in_child

    program = corpus.load(name)
    script = corpus.is_script(name)
    payload = {"name": name, "dtype": dtype, "replays": replays, "seed": seed}
    truth = run_in_child(f"{__name__}:{'script_truth_in_child' if script else 'truth_in_child'}", payload, timeout)
    if "child_error" in truth:
        truth = {**truth, "outcome": None, "message": truth["child_error"]["message"]}
    guard = None if script else check_capture(corpus.target(name), replays=replays, dtype=DTYPES[dtype],
                                              seed=seed, timeout=timeout).to_dict()
    process = checked_in_child(f"{__name__}:process_in_child", payload, timeout)
    result = {"name": name, "kind": "script" if script else "function", "expected": program.EXPECTED,
              "about": (program.__doc__ or "").strip().splitlines()[0], "truth": truth, "guard": guard,
              "flagged_by": flagged_by(guard) if guard is not None else None, "process": process}
    if anchors:
        result["anchors"] = anchor_runs.run_anchors(name, dtype=dtype, replays=replays, timeout=timeout)
    return result


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
    """Did ``check_capture`` get this program right? Hazardous: flagged. Safe: clean, and correct
    on the GPU. A script (no ``guard``) is judged by the whole-process check alone."""
    guard = result.get("guard")
    if guard is None:
        return judged_by_process(result) is True
    if result["expected"] == corpus.HAZARDOUS:
        return bool(result["flagged_by"])
    return not guard["findings"] and guard["verdict"] == CORRECT and result["truth"].get("outcome") == CORRECT


def judged_by_process(result: dict[str, Any]) -> bool | None:
    """Did the whole-process check get it right? Hazardous: a rule fired. Safe: it saw a capture,
    found nothing, and the GPU says correct. ``None``: the results hold no whole-process run."""
    process = result.get("process")
    if process is None:
        return None
    if result["expected"] == corpus.HAZARDOUS:
        return bool(process["rules"])
    saw = process.get("captures", 1) > 0
    return saw and not process["findings"] and result["truth"].get("outcome") == CORRECT


# -- output ----------------------------------------------------------------------------------

NOT_RUN = "not run"
NOT_APPLICABLE = "n/a (a script)"


def table_rows(results: list[dict[str, Any]]) -> list[list[str]]:
    return [[r["name"], r["expected"], _outcome(r["truth"]), _guard_verdict(r), _check_capture_said(r),
             _process_said(r), "yes" if judged(r) and judged_by_process(r) is not False else "NO"]
            for r in results]


TABLE_HEADERS = ["program", "expected", "GPU truth", "guard verdict", "check_capture flagged by",
                 "whole-process rules", "right"]


def _guard_verdict(result: dict[str, Any]) -> str:
    guard = result.get("guard")
    return NOT_APPLICABLE if guard is None else guard["verdict"] or "not replayed"


def _check_capture_said(result: dict[str, Any]) -> str:
    if result.get("guard") is None:
        return NOT_APPLICABLE
    return ", ".join(result["flagged_by"]) or "clean"


def _process_said(result: dict[str, Any]) -> str:
    process = result.get("process")
    if process is None:
        return NOT_RUN
    said = ", ".join(process["rules"]) or ("clean" if process.get("captures", 1) else "no capture seen")
    return f"{said} (stopped: {process['problem']})" if process.get("problem") else said


def _outcome(truth: dict[str, Any]) -> str:
    outcome = truth.get("outcome")
    if outcome is None:
        return f"no result ({truth.get('message', '')})"
    errors = " ".join("fault" if e is None else f"{e:.2g}" for e in truth.get("errors", []))
    return f"{outcome} [{errors}]" if errors else outcome


def summary(results: dict[str, Any] | None, only: list[str] | None = None) -> str:
    """docs/results.md's corpus paragraph and table, from a results file (a placeholder without one);
    ``only``: those programs' rows, and the counts over them."""
    if results is None:
        return README_PLACEHOLDER
    programs = [r for r in results["programs"] if only is None or r["name"] in only]
    functions = [r for r in programs if r.get("guard") is not None]
    hazardous = [r for r in functions if r["expected"] == corpus.HAZARDOUS]
    safe = [r for r in functions if r["expected"] == corpus.SAFE]
    by_rule = sum(any(reason.startswith("rule ") for reason in r["flagged_by"]) for r in hazardous)
    p = results["provenance"]
    lead = "Of the programs asked for, on" if only else "On"
    sentence = (
        f"{lead} the {p['gpu']} (torch {p['torch']}, {p['date_utc'][:10]}; `{p['command']}`), `check_capture` flagged "
        f"{sum(bool(r['flagged_by']) for r in hazardous)} of {len(hazardous)} hazardous programs "
        f"({by_rule} by a checker rule) and passed {sum(judged(r) for r in safe)} of {len(safe)} safe ones "
        f"with no finding. {_process_sentence(programs)} GPU truth: each program captured and replayed "
        f"{results['replays']} times with fresh inputs against an eager reference (a script: its own "
        f"comparisons with eager).")
    missing = [name for name in only or corpus.PROGRAMS if name not in {r["name"] for r in programs}]
    if missing:
        sentence += f" Not run on the GPU yet: {', '.join(f'`{name}`' for name in missing)}."
    lines = ["| program | expected | GPU truth | `check_capture` flagged by | whole-process rules "
             "| CUDA sanitizer | compute-sanitizer |", "|---|---|---|---|---|---|---|"]
    lines += [f"| `{r['name']}` | {r['expected']} | {_badge(r['truth'])} | {_check_capture_said(r)} | "
              f"{_process_said(r)} | {_anchor(r, 'cuda_sanitizer')} | {_anchor(r, 'compute_sanitizer')} |"
              for r in programs]
    return sentence + "\n\n" + "\n".join(lines)


def _process_sentence(programs: list[dict[str, Any]]) -> str:
    ran = [r for r in programs if r.get("process") is not None]
    if not ran:
        return "The whole-process check was not run."
    hazardous = [r for r in ran if r["expected"] == corpus.HAZARDOUS]
    safe = [r for r in ran if r["expected"] == corpus.SAFE]
    return (f"The whole-process check flagged {sum(judged_by_process(r) is True for r in hazardous)} of "
            f"{len(hazardous)} hazardous programs by a rule and passed {sum(judged_by_process(r) is True for r in safe)} "
            f"of {len(safe)} safe ones with no finding.")


def _anchor(result: dict[str, Any], tool: str) -> str:
    found = (result.get("anchors") or {}).get(tool)
    return found["verdict"] if found else NOT_RUN


def _badge(truth: dict[str, Any]) -> str:
    return badge(truth["outcome"]) if truth.get("outcome") else "no result"


def load_results(path: Path = RESULTS_FILE) -> dict[str, Any] | None:
    """The committed corpus results, or ``None`` when the corpus has not been run on a GPU."""
    return json.loads(path.read_text()) if path.exists() else None
