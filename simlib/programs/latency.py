"""How long one captured decode step takes to replay, and why.

The incident of docs/design.md was a performance change: SGLang moved the routed
experts onto the main stream, last before the residual add, so that the add
can start early with programmatic dependent launch (PDL) and no cross-stream
join sits on the critical path. This module measures that trade-off on the
simulator's replay ``DeviceSpan`` records, so the only timing rule is
``simlib.engine.timing.place`` and every parameter is a ``Profile`` field.

Issue order (shared first or routed first) changes what the capture freezes,
never the device-side timing of a graph with the same nodes: a replay places
each node by its dependencies only.

With the default ``Profile``, routed-on-main with PDL beats routed-on-alt by
1.0 µs a layer, not the full join plus prologue (1.3 µs): ``place`` charges a
cross-stream dependency ``cross_stream_gap_us`` *instead of* the same-stream
``graph_node_gap_us``, so on alt the fork into the routed chain is 0.3 µs
cheaper than a same-stream hop (and routed-on-alt without PDL is faster than
routed-on-main without it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from ..engine.timing import Profile
from ..trace import DeviceSpan, Launch, Trace
from .scenarios import run
from .spec import MoEConfig

# The routed experts' placement, with and without PDL, in a configuration that
# captures correctly in either issue order (disposal is skipped during capture).
PLACEMENTS: tuple[MoEConfig, ...] = tuple(
    MoEConfig(order="shared_first", dispose="skip_in_capture", routed_stream=stream, pdl=pdl)
    for stream, pdl in (("main", True), ("main", False), ("alt", False), ("alt", True))
)

SAME_STREAM, PDL, CROSS_STREAM = "same stream", "PDL", "cross-stream join"


@dataclass(frozen=True)
class PathStep:
    """One kernel on the critical path and the edge that made it wait.

    ``via`` is how it waited for its predecessor on the path (``None`` for the
    first kernel); ``gap_us`` is its start minus that predecessor's end, so a
    negative gap is PDL overlap.
    """

    label: str
    role: str
    stream: str
    layer: int
    start_us: float
    end_us: float
    via: str | None
    gap_us: float


@dataclass(frozen=True)
class LatencyReport:
    """Replay time of one decode step (the first replay of the captured graph)."""

    config: MoEConfig
    profile: Profile
    outcome: str
    step_us: float
    layer_us: tuple[float, ...]
    critical_path: tuple[PathStep, ...]

    @property
    def cross_stream_joins(self) -> int:
        """Cross-stream waits on the critical path (each costs ``cross_stream_gap_us``)."""
        return sum(s.via == CROSS_STREAM for s in self.critical_path)

    @property
    def pdl_overlaps(self) -> int:
        return sum(s.via == PDL for s in self.critical_path)


def replay_latency(config: MoEConfig, profile: Profile | None = None) -> LatencyReport:
    """Run ``config`` in the simulator and time its first graph replay."""
    profile = profile or Profile()
    result = run(config, profile)
    if result.graph is None:
        raise ValueError(
            f"{config.name} has no replay to time: its capture failed ({result.outcome}). "
            "Time a configuration that captures, e.g. with dispose='skip_in_capture'.")
    step_us, layer_us, path = replay_timing(result.trace, result.graph.id)
    return LatencyReport(config, profile, result.outcome, step_us, layer_us, path)


def replay_timing(trace: Trace, graph: int = 0, replay: int = 0
                  ) -> tuple[float, tuple[float, ...], tuple[PathStep, ...]]:
    """Step time, per-layer times and critical path of one replay in ``trace``.

    A layer ends with its ``merge`` node (the residual add); layer i's time runs
    from the end of layer i-1 (or the step's first start) to the latest end
    among its nodes, so the layers add up to the step exactly.
    """
    nodes = {n.id: n for n in trace.launches(graph)}
    spans = {s.launch: s for s in trace.of(DeviceSpan)
             if s.phase == "replay" and s.replay == replay and s.launch in nodes}
    if not spans:
        raise ValueError(f"the trace has no spans of replay {replay} of graph {graph}")
    layer_of = _layers(n for n in nodes.values() if n.id in spans)
    start = min(s.start_us for s in spans.values())
    ends = [start] * (max(layer_of.values()) + 1)
    for lid, layer in layer_of.items():
        ends[layer] = max(ends[layer], spans[lid].end_us)
    bounds = [start]
    for end in ends:
        bounds.append(max(bounds[-1], end))
    layer_us = tuple(b - a for a, b in zip(bounds, bounds[1:]))
    return bounds[-1] - start, layer_us, _critical_path(nodes, spans, layer_of)


def _layers(nodes: Iterable[Launch]) -> dict[int, int]:
    """Layer index of each node: how many residual adds were captured before it."""
    layer_of: dict[int, int] = {}
    merges = 0
    for node in nodes:
        layer_of[node.id] = merges
        merges += node.role == "merge"
    return layer_of


def _critical_path(nodes: dict[int, Launch], spans: dict[int, DeviceSpan],
                   layer_of: dict[int, int]) -> tuple[PathStep, ...]:
    """Walk back from the last kernel to end, always through the latest-ending dependency
    not on the path yet (a loaded trace's deps may form a cycle; a replay's never do)."""
    lid: int | None = max(spans, key=lambda i: (spans[i].end_us, i))
    path: list[PathStep] = []
    visited: set[int] = set()
    while lid is not None:
        node, span = nodes[lid], spans[lid]
        visited.add(lid)
        deps = [d for d in node.deps if d in spans and d not in visited]
        prev = max(deps, key=lambda d: (spans[d].end_us, nodes[d].stream == node.stream),
                   default=None)
        via, gap = None, 0.0
        if prev is not None:
            same = nodes[prev].stream == node.stream
            via = (PDL if node.pdl else SAME_STREAM) if same else CROSS_STREAM
            gap = span.start_us - spans[prev].end_us
        path.append(PathStep(node.label, node.role, node.stream, layer_of[lid],
                             span.start_us, span.end_us, via, gap))
        lid = prev
    return tuple(reversed(path))


def describe(config: MoEConfig) -> str:
    """A short name for the timing-relevant choices of ``config``."""
    pdl = " + PDL" if config.pdl else ""
    layers = f", {config.layers} layers" if config.layers > 1 else ""
    return f"routed on {config.routed_stream}{pdl} ({config.order}{layers})"


def compare(configs: Sequence[MoEConfig] = PLACEMENTS, profile: Profile | None = None
            ) -> list[dict[str, Any]]:
    """One plain-data row per configuration; ``delta_us`` is relative to the first row."""
    reports = [replay_latency(c, profile) for c in configs]
    rows = []
    for r in reports:
        rows.append({
            "configuration": describe(r.config),
            "outcome": r.outcome,
            "step_us": round(r.step_us, 3),
            "layer_us": round(r.step_us / len(r.layer_us), 3),
            "delta_us": round(r.step_us - reports[0].step_us, 3),
            "cross_stream_joins": r.cross_stream_joins,
            "pdl_overlaps": r.pdl_overlaps,
        })
    return rows


_COLUMNS = (("configuration", "configuration"), ("step_us", "step µs"),
            ("layer_us", "per layer µs"), ("delta_us", "Δ vs first µs"),
            ("cross_stream_joins", "joins on path"), ("pdl_overlaps", "PDL on path"),
            ("outcome", "outcome"))


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    """``compare``'s rows as an aligned plain-text table."""
    cells = [[title for _, title in _COLUMNS]]
    for row in rows:
        cells.append([f"{row[key]:+.2f}" if key == "delta_us" else
                      f"{row[key]:.2f}" if isinstance(row[key], float) else str(row[key])
                      for key, _ in _COLUMNS])
    widths = [max(len(r[i]) for r in cells) for i in range(len(_COLUMNS))]
    text = [isinstance(rows[0][key], str) if rows else True for key, _ in _COLUMNS]
    lines = ["  ".join(c.ljust(w) if left else c.rjust(w)
                       for c, w, left in zip(r, widths, text)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
