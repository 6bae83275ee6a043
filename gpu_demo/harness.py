"""Capture, replay and judge one configuration on a real GPU.

``run_case`` is the protocol (in the calling process, which it may leave with
a dead CUDA context):

1. build the MoE stack and, from the same seed, an identical *reference*
   stack that never takes part in the capture (it owns its own static
   buffers, so running it cannot repair or spoil the captured ones);
2. warm up eagerly on a side stream, then capture one forward with
   ``torch.cuda.graph`` in ``config.capture_mode``; a failure here is
   ``capture_error:<name>`` (the first error of the chain, see
   ``outcomes.first_error``);
3. replay ``config.replays`` times. Before each replay the captured input
   buffer gets, per ``config.inputs``: ``fresh`` random values, nothing
   (``stale``), or the warm-up's input (``same_as_eager``). The replay's output
   is compared with the reference run eagerly on the input the replay was
   *meant* to see: relative L2 error in float32, ``settings.tolerance``;
4. outcome: ``correct``, ``silent_wrong`` (some replay above tolerance) or
   ``illegal_address`` (a replay faulted; sticky, so the process is done),
   with ``wrong_replays``, how many of the replays were wrong: for a race,
   many replays (``config.replays``) measure how often the hardware loses it.

The stale-buffer trap: with ``inputs=same_as_eager`` the replay sees exactly
the input of the last eager run, so a branch that was *not* captured (its
static buffer still holds the warm-up's answer) looks right: error 0.0.
Fresh inputs are the only honest check.

``run_isolated`` runs a case in its own process (``python -m gpu_demo case``)
with a timeout, so a device fault never takes down the caller.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from simlib.spec import CORRECT, ILLEGAL_ADDRESS, SILENT_WRONG, MoEConfig

from . import graphs
from .moe import MoEStack
from .outcomes import classify_capture_failure, first_error, is_illegal_address, one_line, relative_error
from .settings import RunSettings

HARNESS_ERROR = "harness_error"
"""Not a capture outcome: the case's process ended without writing a result."""


@dataclass
class CaseResult:
    """What one configuration did on the GPU."""

    config: dict[str, Any]
    outcome: str
    errors: list[float | None]
    tolerance: float
    message: str | None = None
    raw_error: str | None = None
    seconds: float = 0.0
    wrong_replays: int | None = None   # replays above tolerance or faulted (None: not run)
    sleep_cycles: int | None = None    # the torch.cuda._sleep that made config.alt_delay_us

    @property
    def name(self) -> str:
        return MoEConfig.from_dict(self.config).name


def count_wrong(errors: list[float | None], tolerance: float) -> int | None:
    """Replays above ``tolerance`` (NaN included) or faulted (``None``); None if none ran."""
    return sum(e is None or not e <= tolerance for e in errors) if errors else None


def run_case(config: MoEConfig, settings: RunSettings) -> CaseResult:
    """Steps 1-4 of the module docstring, in this process (needs CUDA)."""
    started = time.perf_counter()
    model, reference = MoEStack(config, settings), MoEStack(config, settings)
    generator = torch.Generator().manual_seed(settings.seed + 1)

    def random_input() -> torch.Tensor:
        return settings.random(config.tokens, config.hidden, generator=generator)

    def result(outcome: str, errors: list[float | None], exc: BaseException | None = None) -> CaseResult:
        return CaseResult(
            config=config.to_dict(), outcome=outcome, errors=errors, tolerance=settings.tolerance,
            message=one_line(exc) if exc else None, raw_error=str(exc) if exc else None,
            seconds=round(time.perf_counter() - started, 3),
            wrong_replays=count_wrong(errors, settings.tolerance),
            sleep_cycles=model.layers[0].alt_delay_cycles or None,
        )

    static_in = random_input()
    warm_input = static_in.clone()
    errors: list[float | None] = []
    with torch.no_grad():
        graphs.warm_up(lambda: model(static_in))
        try:
            graph, static_out = graphs.capture(lambda: model(static_in), config.capture_mode)
        except Exception as exc:
            first = first_error(exc)
            return result(classify_capture_failure(first), errors, first)
        try:
            for _ in range(config.replays):
                fresh = random_input()
                intended = warm_input if config.inputs == "same_as_eager" else fresh
                if config.inputs != "stale":
                    static_in.copy_(intended)
                graph.replay()
                torch.cuda.synchronize()
                got = static_out.clone()
                errors.append(relative_error(got, reference(intended.clone())))
        except RuntimeError as exc:
            if not is_illegal_address(exc):
                raise
            return result(ILLEGAL_ADDRESS, [*errors, None], exc)
    correct = all(e is not None and e <= settings.tolerance for e in errors)
    return result(CORRECT if correct else SILENT_WRONG, errors)


# -- one process per case ---------------------------------------------------------

def run_in_child(kind: str, payload: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Run ``python -m gpu_demo case --kind KIND`` on ``payload``; its result dict.

    If the child dies or times out without a result, the dict has
    ``outcome == "harness_error"`` and the tail of its stderr.
    """
    with tempfile.TemporaryDirectory() as tmp:
        result_path = Path(tmp) / "result.json"
        command = [sys.executable, "-m", "gpu_demo", "case", "--kind", kind,
                   "--payload", json.dumps(payload), "--result", str(result_path)]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [_repo_root(), os.environ.get("PYTHONPATH")]))}
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
            tail = done.stderr[-2000:]
        except subprocess.TimeoutExpired as exc:
            tail = f"timed out after {timeout} s; " + (exc.stderr or b"")[-1500:].decode(errors="replace")
        if result_path.exists():
            return json.loads(result_path.read_text())
    return {**payload, "outcome": HARNESS_ERROR, "message": tail.strip().splitlines()[-1] if tail.strip() else "",
            "raw_error": tail}


def child_main(kind: str, payload: dict[str, Any], result_path: Path) -> None:
    """The child side of ``run_in_child``: run, write the result, leave at once
    (``os._exit``: a faulted CUDA context can hang or crash on normal exit)."""
    from .decode import decode_payload

    runners: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {"run": _run_payload, "decode": decode_payload}
    result = runners[kind](payload)
    result_path.write_text(json.dumps(result))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _run_payload(payload: dict[str, Any]) -> dict[str, Any]:
    config = MoEConfig.from_dict(payload["config"])
    return asdict(run_case(config, RunSettings(**payload["settings"])))


def run_children(kind: str, payloads: list[dict[str, Any]], jobs: int, timeout: float) -> list[dict[str, Any]]:
    """``run_in_child`` for every payload, ``jobs`` at a time, results in input order."""
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(lambda payload: run_in_child(kind, payload, timeout), payloads))


def run_many(configs: list[MoEConfig], settings: RunSettings, jobs: int = 1, timeout: float = 180) -> list[CaseResult]:
    """Every config in its own process, ``jobs`` at a time, results in input order."""
    payloads = [{"config": c.to_dict(), "settings": settings.to_dict()} for c in configs]
    return [_case_result(raw, settings) for raw in run_children("run", payloads, jobs, timeout)]


def run_isolated(config: MoEConfig, settings: RunSettings, timeout: float = 180) -> CaseResult:
    """``run_case`` in its own process."""
    (result,) = run_many([config], settings, timeout=timeout)
    return result


def _case_result(raw: dict[str, Any], settings: RunSettings) -> CaseResult:
    if raw["outcome"] == HARNESS_ERROR:
        return CaseResult(config=raw["config"], outcome=HARNESS_ERROR, errors=[], tolerance=settings.tolerance,
                          message=raw["message"], raw_error=raw["raw_error"])
    return CaseResult(**raw)


def _repo_root() -> str:
    return str(Path(__file__).resolve().parent.parent)
