"""The simulator's latency, with the calibrated H200 profile, next to the H200's.

For each configuration ``python -m gpu_demo bench`` timed (``results/
bench-h200.json``), simlib simulates the same configuration with
``simlib.profiles.H200`` and predicts what the CUDA events measured: for a
graph, the device-side start of the replay plus the span from its first
kernel's start to its last kernel's end; for eager, the wall time of one
forward, which the host's launches dominate. The target is within 15%; where
a prediction misses, ``MISSES`` says why.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from simlib import scenarios
from simlib.latency import replay_timing
from simlib.profiles import H200
from simlib.runtime import Runtime
from simlib.spec import MoEConfig
from simlib.timing import Profile

BENCH = Path(__file__).resolve().parent / "results" / "bench-h200.json"
TARGET = 0.15

MISSES = {
    "eager": (
        "Eager time is host time. One real forward took as long as about 67 small eager ops "
        "(787.9 us / 11.72 us): the module launches 35 kernels and spends the rest in views, "
        "indexing and Python module calls. The simulated program issues only the launches "
        "of the story, and simlib models what the host freezes, not Python's per-op "
        "overhead, so it predicts far too little here."),
}


@dataclass(frozen=True)
class LatencyRow:
    variant: str
    predicted_us: float
    measured_us: float

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


def _eager_us(config: MoEConfig, profile: Profile) -> float:
    rt = Runtime(profile)
    main = rt.Stream("main")
    with rt.stream(main):
        model = scenarios.MoEModel(rt, config, main)
        h = rt.from_host((config.tokens, config.hidden), "hidden_in", value="x1")
        rt.synchronize()
        start = rt.now
        model.forward(h, capturing=False)
        rt.synchronize()
    return rt.now - start


def predictions(path: Path = BENCH, profile: Profile = H200) -> list[LatencyRow]:
    """Predicted against measured latency for every configuration the bench timed."""
    try:
        bench = json.loads(Path(path).read_text())
        base = MoEConfig.from_dict(bench["config"])
        latency, pdl = bench["latency"], bench["pdl"]
    except (OSError, KeyError, ValueError) as exc:
        raise ValueError(f"cannot read bench results from {path}: {exc}. Record them on a GPU "
                         "with `python -m gpu_demo bench`.") from None
    predicted = {
        "eager": _eager_us(base, profile),
        "graph_single_stream": _graph_us(base, profile, dual_stream=False),
        "graph_dual_shared_first": _graph_us(base.with_(order="shared_first"), profile),
        "graph_dual_routed_first_skip_in_capture": _graph_us(
            base.with_(order="routed_first", dispose="skip_in_capture"), profile),
    }
    rows = [LatencyRow(v, round(us, 2), latency[v]["median_us"]) for v, us in predicted.items()]
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
    return "\n".join(lines)
