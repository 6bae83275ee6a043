"""Capture, replay and judge one configuration on a real GPU.

``run_case`` is the protocol (in the calling process, which it may leave with
a dead CUDA context):

1. build the MoE stack and, from the same seed, an identical *reference*
   stack that never takes part in the capture (it owns its own static
   buffers, so running it cannot repair or spoil the captured ones);
2. warm up, capture one forward in ``config.capture_mode`` and replay it
   ``config.replays`` times by the one protocol,
   ``gpu_demo.guard.protocol.capture_replay.replay_and_compare``. Before each replay
   the captured input buffer gets, per ``config.inputs``: ``fresh`` random
   values, nothing (``stale``), or the warm-up's input (``same_as_eager``: the
   stale-buffer trap). The replay's output is compared with the reference run
   eagerly on the input the replay was *meant* to see;
3. outcome: the protocol's, with ``wrong_replays``, how many of the replays
   were wrong: for a race, many replays (``config.replays``) measure how often
   the hardware loses it.

``run_many`` runs each case in its own process (``gpu_demo.guard.protocol.child``)
with a timeout, so a device fault never takes down the caller.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

import torch

from gpu_demo.guard.protocol.capture_replay import replay_and_compare
from gpu_demo.guard.protocol.child import Checkpoint, run_in_child
from gpu_demo.lab.moe.model import MoEStack
from gpu_demo.lab.moe.settings import RunSettings
from simlib.programs.spec import MoEConfig

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
    """Steps 1-3 of the module docstring, in this process (needs CUDA)."""
    started = time.perf_counter()
    model, reference = MoEStack(config, settings), MoEStack(config, settings)
    generator = torch.Generator().manual_seed(settings.seed + 1)

    def random_input() -> torch.Tensor:
        return settings.random(config.tokens, config.hidden, generator=generator)

    static_in = random_input()
    warm_input = static_in.clone()
    fresh = [random_input() for _ in range(config.replays)]
    intended = [warm_input if config.inputs == "same_as_eager" else f for f in fresh]
    copied = [None if config.inputs == "stale" else [x] for x in intended]

    with torch.no_grad():
        evidence = replay_and_compare(
            model, [static_in], copied,
            want=lambda i: reference(intended[i].clone()), reference="a separate build, run eagerly",
            mode=config.capture_mode)
    return CaseResult(
        config=config.to_dict(), outcome=evidence.outcome, errors=evidence.errors, tolerance=settings.tolerance,
        message=evidence.message, raw_error=evidence.raw_error, seconds=round(time.perf_counter() - started, 3),
        wrong_replays=count_wrong(evidence.errors, settings.tolerance),
        sleep_cycles=model.layers[0].alt_delay_cycles or None,
    )


# -- one process per case ---------------------------------------------------------

def run_payload(payload: dict[str, Any], checkpoint: Checkpoint) -> dict[str, Any]:
    """One case in a child process (``gpu_demo.guard.protocol.child`` entry)."""
    config = MoEConfig.from_dict(payload["config"])
    return asdict(run_case(config, RunSettings(**payload["settings"])))


def run_children(entry: str, payloads: list[dict[str, Any]], jobs: int, timeout: float) -> list[dict[str, Any]]:
    """``run_in_child(entry, payload)`` for every payload, ``jobs`` at a time, results in input order."""
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(lambda payload: run_in_child(entry, payload, timeout), payloads))


def run_many(configs: list[MoEConfig], settings: RunSettings, jobs: int = 1, timeout: float = 180) -> list[CaseResult]:
    """Every config in its own process, ``jobs`` at a time, results in input order."""
    payloads = [{"config": c.to_dict(), "settings": settings.to_dict()} for c in configs]
    raws = run_children(f"{__name__}:run_payload", payloads, jobs, timeout)
    return [_case_result(raw, payload, settings) for raw, payload in zip(raws, payloads)]


def run_isolated(config: MoEConfig, settings: RunSettings, timeout: float = 180) -> CaseResult:
    """``run_case`` in its own process."""
    (result,) = run_many([config], settings, timeout=timeout)
    return result


def _case_result(raw: dict[str, Any], payload: dict[str, Any], settings: RunSettings) -> CaseResult:
    """The child's result, or ``harness_error`` with what it said before it died."""
    if "child_error" in raw:
        died = raw["child_error"]
        return CaseResult(config=payload["config"], outcome=HARNESS_ERROR, errors=[], tolerance=settings.tolerance,
                          message=died["message"], raw_error=died["detail"])
    return CaseResult(**raw)
