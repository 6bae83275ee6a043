"""The simulator's latency, with the calibrated H200 profile, next to the H200's.

For each configuration ``python -m gpu_demo bench`` timed (``results/
bench-h200.json``), simlib simulates the same configuration with
``simlib.engine.profiles.H200`` and predicts what the CUDA events measured: for a
graph, the device-side start of the replay plus the span from its first
kernel's start to its last kernel's end; for eager, the wall time of one
forward, which is host time: ``simlib.programs.eager_program`` issues the real
module's ops at the host costs recorded in ``results/host-costs-h200.json``,
and is compared with the eager time measured in that same run (the host's
speed moves between sessions of the VM by more than the target). The target
is within 15%; where a prediction misses, ``MISSES`` says why.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpu_demo.lab.measure.provenance import RESULTS_DIR
from simlib.engine.profiles import H200
from simlib.engine.timing import Profile
from simlib.programs import eager_program, scenarios
from simlib.programs.latency import replay_timing
from simlib.programs.spec import MoEConfig

BENCH = RESULTS_DIR / "bench-h200.json"
HOST_COSTS = RESULTS_DIR / "host-costs-h200.json"
TARGET = 0.15

MISSES: dict[str, str] = {}


@dataclass(frozen=True)
class LatencyRow:
    variant: str
    predicted_us: float
    measured_us: float
    note: str = ""      # where the measurement comes from, when not from the bench

    @property
    def error(self) -> float:
        return (self.predicted_us - self.measured_us) / self.measured_us

    @property
    def within_target(self) -> bool:
        return abs(self.error) <= TARGET


def _graph_us(config: MoEConfig, profile: Profile, dual_stream: bool = True) -> float:
    result = scenarios.run(config.with_(replays=1), profile, dual_stream=dual_stream)
    if result.graph is None:
        raise ValueError(f"{config.name}: the simulated capture failed ({result.outcome})")
    return profile.launch_latency_us + replay_timing(result.trace)[0]


def _eager_row(bench: dict[str, Any], profile: Profile, path: Path) -> LatencyRow:
    """Eager, predicted from the recorded host costs and compared with the eager
    time measured in the same run."""
    costs = eager_program.load(path)
    config = MoEConfig.from_dict(bench["config"])
    if costs.config != config:
        raise ValueError(f"the host costs ({path}) were recorded for {costs.config.to_dict()}, the bench "
                         f"timed {config.to_dict()}; record both with the same flags")
    run = json.loads(Path(path).read_text())
    try:
        measured, date = run["eager_latency"]["median_us"], run["provenance"]["date_utc"][:10]
    except (KeyError, TypeError):
        raise ValueError(f"{path} holds no eager_latency measured by CUDA events; record it on a GPU with "
                         f"`{eager_program.RECORD_COMMAND}`") from None
    other, other_date = bench["latency"]["eager"]["median_us"], bench["provenance"]["date_utc"][:10]
    note = (f"eager is measured in the run that recorded its host costs ({path.name}, {date}), by the CUDA "
            f"events the bench uses; the bench's own run ({other_date}) measured {other:.1f} µs, "
            f"{other / measured - 1:+.0%}: eager time is host time, and the host's speed moves between sessions.")
    return LatencyRow("eager", round(eager_program.eager_forward_us(costs, profile), 2), measured, note)


def predictions(path: Path = BENCH, profile: Profile = H200, host_costs: Path = HOST_COSTS) -> list[LatencyRow]:
    """Predicted against measured latency for every configuration the bench timed."""
    try:
        bench = json.loads(Path(path).read_text())
        base = MoEConfig.from_dict(bench["config"])
        latency, pdl = bench["latency"], bench["pdl"]
    except (OSError, KeyError, ValueError) as exc:
        raise ValueError(f"cannot read bench results from {path}: {exc}. Record them on a GPU "
                         "with `python -m gpu_demo bench`.") from None
    predicted = {
        "graph_single_stream": _graph_us(base, profile, dual_stream=False),
        "graph_dual_shared_first": _graph_us(base.with_(order="shared_first"), profile),
        "graph_dual_routed_first_skip_in_capture": _graph_us(
            base.with_(order="routed_first", dispose="skip_in_capture"), profile),
    }
    rows = [_eager_row(bench, profile, Path(host_costs))]
    rows += [LatencyRow(v, round(us, 2), latency[v]["median_us"]) for v, us in predicted.items()]
    for routed in ("main", "alt"):
        for on in (False, True):
            name = f"routed_on_{routed}_pdl_{'on' if on else 'off'}"
            us = _graph_us(base.with_(routed_stream=routed, pdl=on), profile)
            rows.append(LatencyRow(name, round(us, 2), pdl[name]["median_us"]))
    return rows


def format_table(rows: list[LatencyRow]) -> str:
    lines = ["| configuration | simulated (H200 profile) µs | measured on H200 µs | error |",
             "|---|---|---|---|"]
    for r in rows:
        flag = "" if r.within_target else " (miss: see below)"
        lines.append(f"| {r.variant} | {r.predicted_us:.1f} | {r.measured_us:.1f} | "
                     f"{r.error:+.1%}{flag} |")
    for r in rows:
        if not r.within_target:
            lines.append(f"\n{r.variant}: {MISSES.get(r.variant, 'not explained yet')}")
    lines += [f"\n{r.note}" for r in rows if r.note]
    by_name = {r.variant: r for r in rows}
    if "eager" in by_name and "graph_single_stream" in by_name:
        eager, graph = by_name["eager"], by_name["graph_single_stream"]
        lines.append(f"\nOne graph replay is {eager.measured_us / graph.measured_us:.1f}x faster than the same "
                     f"forward run eagerly on the H200 ({eager.predicted_us / graph.predicted_us:.1f}x simulated; "
                     "eager as measured above): eager time is the host issuing every op, a replay is one launch.")
    return "\n".join(lines)
