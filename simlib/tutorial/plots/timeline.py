"""The timeline: host steps and eager kernels on one clock, then what a replay runs."""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np
from matplotlib.figure import Figure

from ...memory import short_ptr
from ...trace import Capture, DeviceSpan, EventOp, Fault, Launch, Mutation, Record, SkippedLaunch, Trace
from .kit import SMALL_PT, TEXT_PT, Key, Label, Panel, draw_legend, draw_title, fresh_figure, text_width, title_inches
from .palette import DANGER, GREY, ROLE_COLOURS, ROLE_NAMES, ink, role_colour, tint
from .reading import late_starts, replay_spans, streams_of, until
from .takeaways import late_words, timeline_takeaway


def _role_keys(roles: Iterable[str]) -> list[Key]:
    present = set(roles)
    return [Key(ROLE_NAMES.get(r, r), "s", c) for r, c in ROLE_COLOURS.items() if r in present]


_BAR_H = 0.5
_LANE_IN = 0.42          # inches per lane


def timeline(trace: Trace, *, step: int | None = None, takeaway: str | None = None,
             fig: Figure | None = None) -> Figure:
    """Swimlanes: the host's steps and each stream's eager kernels, then the first replay.

    The upper panel is one clock for host and device: host launches as ticks
    (coloured by role), skipped launches as hollow circles, ``set_`` as a
    vermillion cross, event waits as small triangles, the capture shaded and
    each graph replay as one bar. The lower panel zooms into the first replay:
    the kernels the graph really runs, per stream, with dashed arrows for
    cross-stream dependencies and a note where the graph executor started a
    branch late. A trace without a capture has neither the replay lane nor the
    lower panel. The title is ``takeaway``, or says what the picture shows: what
    the capture got wrong, else how the replay's time is spent, else (no
    capture) what ran eagerly.
    """
    records = until(trace, step)
    streams = streams_of(trace)
    captured = any(isinstance(r, Capture) for r in trace.records)
    eager = [s for s in streams if any(isinstance(r, DeviceSpan) and r.phase == "eager"
                                       and r.stream == s for r in trace.records)]
    graph_streams = [s for s in streams if any(
        isinstance(r, (Launch, SkippedLaunch)) and r.graph is not None and r.stream == s
        for r in trace.records)] or streams[:1]
    lanes = ["host", *eager] + (["graph replays"] if captured else [])
    graph = next((r.graph for r in trace.of(Capture)), 0)
    launches = {r.id: r for r in trace.of(Launch)}
    title = takeaway or timeline_takeaway(trace, records, graph, captured)

    top_in, mid_in, foot_in = _LANE_IN * (len(lanes) + 0.2), 0.95, 0.6
    head_in = title_inches(title, 13.0) + 0.4
    # A late branch start gets a row of its own above the replay's lanes.
    note_rows = 0.45 if late_starts(trace, replay_spans(records)) else 0.0
    low_in = _LANE_IN * 1.15 * (len(graph_streams) + 0.5 + note_rows) if captured else 0.0
    roles = {r.role for r in trace.records if isinstance(r, (Launch, SkippedLaunch))}
    keys_in = (len(roles) + 6) * 15 / 72          # room for the legend
    height = max(head_in + top_in + (mid_in + low_in if captured else 0.0) + foot_in,
                 keys_in + 0.9)
    fig = fresh_figure(fig, (13.0, height))
    top = Panel(fig, (0.11, 1 - (head_in + top_in) / height, 0.72, top_in / height),
                (0, max((max(r.t_us, getattr(r, "end_us", 0.0)) for r in trace.records),
                        default=1.0) * 1.01), (len(lanes) - 0.5, -0.7))
    drawn = _host_panel(top, records, lanes, eager, launches)
    if captured:
        bottom = Panel(fig, (0.11, foot_in / height, 0.72, low_in / height),
                       (0, 1), (len(graph_streams) - 0.4, -0.9 - note_rows))
        drawn |= _replay_panel(bottom, trace, records, graph_streams, launches)
    draw_title(fig, title)
    keys = _role_keys(r for r in drawn if r in ROLE_COLOURS) + [key for name, key in (
        ("launch", Key("host: launch", "|", "black", "black")),
        ("skipped", Key("host: launch skipped", "o", "none", GREY)),
        ("set_", Key("host: set_ (dispose)", "X", DANGER)),
        ("wait", Key("host: event wait", "v", "black")),
        ("capture", Key("capture (nothing runs)", "s", tint(GREY, 0.75))),
        ("cross-stream", Key("cross-stream dependency", "--", "black")),
    ) if name in drawn]
    draw_legend(fig, keys, 0.855, 1 - (head_in + 0.1) / height)
    return fig


def _host_panel(p: Panel, records: Sequence[Record], lanes: list[str], eager: list[str],
                launches: dict[int, Launch]) -> set[str]:
    """Draw the upper panel; return what it drew (roles, and legend names)."""
    p.lane_names(lanes)
    p.title("Host program, eager kernels" + (" and graph replays" if "graph replays" in lanes
                                             else "") + " (one clock)")
    p.time_axis(0, p.xlim[1] / 1.01, "host and device time (µs)")
    drawn: set[str] = set()
    notes: list[Label] = []
    begin: dict[int, float] = {}
    for r in records:
        if isinstance(r, Capture) and r.op == "begin":
            begin[r.graph] = r.t_us
        elif isinstance(r, Capture):
            notes.append(_shade_capture(p, begin.pop(r.graph), r.t_us, r.error, len(lanes)))
    for t in begin.values():   # a capture still open at ``step``
        notes.append(_shade_capture(p, t, records[-1].t_us, None, len(lanes)))
    if any(isinstance(r, Capture) for r in records):
        drawn.add("capture")

    host = [r for r in records if isinstance(r, Launch)]
    if host:
        p.marks([(r.t_us, 0) for r in host], "|", 12, gid="host-launches", face="none",
                edge=[role_colour(r.role) for r in host])
        drawn |= {"launch"} | {r.role for r in host}
    skipped = [r for r in records if isinstance(r, SkippedLaunch)]
    if skipped:
        p.marks([(r.t_us, 0) for r in skipped], "o", 6, gid="host-skipped", face="none", edge=GREY)
        drawn.add("skipped")
    waits = [r for r in records if isinstance(r, EventOp) and r.op == "wait"]
    if waits:
        p.marks([(r.t_us, 0.3) for r in waits], "v", 4.5, gid="host-waits")
        drawn.add("wait")
    mutations = [r for r in records if isinstance(r, Mutation)]
    if mutations:
        p.marks([(r.t_us, 0) for r in mutations], "X", 9, gid="host-mutations", face=DANGER,
                zorder=4)
        drawn.add("set_")
    notes += _spaced([Label(m.t_us, -0.33, f"{m.label}.{m.op}("
                            f"{'empty' if m.new_numel == 0 else short_ptr(m.new_ptr)})",
                            TEXT_PT, DANGER, va="bottom") for m in mutations],
                     p.points_per_unit()[0])

    for lane, stream in enumerate(eager, start=1):
        spans = [r for r in records if isinstance(r, DeviceSpan) and r.phase == "eager"
                 and r.stream == stream]
        if spans:
            p.bars([(s.start_us, s.end_us - s.start_us) for s in spans], lane, _BAR_H,
                   [role_colour(launches[s.launch].role) for s in spans], gid=f"lane:{stream}")
            drawn |= {launches[s.launch].role for s in spans}
    if "graph replays" in lanes:
        lane = len(lanes) - 1
        extents = _replay_extents(records)
        if extents:
            p.bars([(a, b - a) for _, a, b in extents], lane, _BAR_H, tint(GREY, 0.4),
                   gid="lane:graph replays")
            notes += [Label((a + b) / 2, lane, f"replay {i}", SMALL_PT) for i, a, b in extents]
        faults = [r for r in records if isinstance(r, Fault)]
        if faults:
            p.marks([(f.t_us, lane) for f in faults], "*", 12, gid="faults", face=DANGER,
                    zorder=4)
            notes += [Label(f.t_us, lane + 0.3, f.error, TEXT_PT, DANGER, ha="right", va="top")
                      for f in faults]
    p.labels(notes, gid="host-notes")
    return drawn


def _shade_capture(p: Panel, begin: float, end: float, error: str | None, lanes: int) -> Label:
    p.bars([(begin, end - begin)], (lanes - 1.2) / 2, lanes + 0.2, tint(GREY, 0.75),
           gid="capture", zorder=0.5)
    note = "capture" if error is None else f"capture failed: {error}"
    return Label(begin + (end - begin) * 0.02, lanes - 0.55, note, SMALL_PT,
                 DANGER if error else "black", ha="left", va="bottom")


def _replay_extents(records: Sequence[Record]) -> list[tuple[int, float, float]]:
    extents: dict[int, tuple[float, float]] = {}
    for r in records:
        if isinstance(r, DeviceSpan) and r.phase == "replay" and r.replay is not None:
            a, b = extents.get(r.replay, (r.start_us, r.end_us))
            extents[r.replay] = (min(a, r.start_us), max(b, r.end_us))
    return [(i, a, b) for i, (a, b) in sorted(extents.items())]


def _replay_panel(p: Panel, trace: Trace, records: Sequence[Record], streams: list[str],
                  launches: dict[int, Launch]) -> set[str]:
    """Draw the lower panel (replay 0); return what it drew (roles, legend names)."""
    spans = replay_spans(records)
    if spans:
        t0 = min(s.start_us for s in spans)
        t1 = max(s.end_us for s in spans) - t0
        p = Panel(p.fig, p.rect, (-0.01 * t1, t1 * 1.01), p.ylim)
    p.lane_names(streams, gid="replay-lanes")
    p.title("Replay 0 of the captured graph: what the device really runs")
    if not spans:
        failed = next((r.error for r in records if isinstance(r, Capture) and r.error), None)
        note = (f"no replay: the capture failed ({failed})" if failed
                else "no replay yet at this host step")
        p.labels([Label(0.5, 0.5, note, TEXT_PT, DANGER if failed else GREY)],
                 gid="replay-notes", anchors=p.frac)
        return set()
    p.time_axis(0, t1, "device time since the replay's first kernel (µs)")
    lane_of = {s: i for i, s in enumerate(streams)}
    by_launch = {s.launch: s for s in spans}
    px = p.points_per_unit()[0]
    notes: list[Label] = []
    for stream, lane in lane_of.items():
        mine = [s for s in spans if s.stream == stream]
        if not mine:
            skipped = sum(isinstance(r, SkippedLaunch) and r.stream == stream
                          and r.graph is not None for r in records)
            why = f": the host skipped {skipped} launch(es) at capture" if skipped else ""
            notes.append(Label(0, lane, f"nothing captured on {stream}{why}", TEXT_PT,
                               DANGER if skipped else GREY, ha="left"))
            continue
        p.bars([(s.start_us - t0, s.end_us - s.start_us) for s in mine], lane, _BAR_H,
               [role_colour(launches[s.launch].role) for s in mine], gid=f"replay:{stream}",
               edgecolors="white", linewidths=0.5)
        if len(spans) <= 60:
            notes += _bar_names(mine, lane, t0, px, launches)
    p.labels(notes, gid="replay-notes")
    _late_start_notes(p, trace, spans, lane_of, t0)
    lines = []
    for s in spans:
        for d in launches[s.launch].deps:
            dep = by_launch.get(d)
            if dep is not None and dep.stream != s.stream:
                up = lane_of[s.stream] < lane_of[dep.stream]
                lines.append([(dep.end_us - t0, lane_of[dep.stream]),
                              (s.start_us - t0, lane_of[s.stream] + (1 if up else -1) * _BAR_H / 2)])
    p.arrows(lines, ["black"] * len(lines), [True] * len(lines), gid="cross-stream")
    return {launches[s.launch].role for s in spans} | ({"cross-stream"} if lines else set())


def _late_start_notes(p: Panel, trace: Trace, spans: Sequence[DeviceSpan],
                      lane_of: dict[str, int], t0: float) -> None:
    """Mark each kernel the executor held back: a dotted bracket over the ~8 µs the note names,
    from the replay's start (when the executor begins, and the late start is counted from)
    to the kernel's start, and why."""
    late = late_starts(trace, spans)
    if not late:
        return
    # A bracket on the row above the lanes (``timeline`` makes room for it): a tick at the
    # replay's start, a leg down to the held-back bar, and the reason on that row.
    row = p.ylim[1] + 0.3
    lines, notes = [], []
    for s, _ready in late:
        lane = lane_of[s.stream]
        b = s.start_us - t0
        lines += [[(0.0, row), (b, row)], [(0.0, row), (0.0, row - 0.15)], [(0.0, row), (0.0, row + 0.15)],
                  [(b, row), (b, lane - _BAR_H / 2)]]
        notes.append(Label(0.0, row - 0.05, "graph executor opens a second stream: "
                           f"{late_words(trace)} late start, counted from the replay's start", TEXT_PT,
                           DANGER, ha="left", va="bottom"))
    p.lines(lines, gid="late-start", colors=DANGER, linewidths=1.2, linestyles=":", zorder=3)
    p.labels(notes, gid="late-start-notes")


def _bar_names(spans: list[DeviceSpan], lane: int, t0: float, points_per_us: float,
               launches: dict[int, Launch]) -> list[Label]:
    """Each bar's kernel: inside if it fits, else above the bar, on two heights, if room."""
    inside, above = [], []
    for s in spans:
        node = launches[s.launch]
        mid = (s.start_us + s.end_us) / 2 - t0
        if text_width(node.kernel, SMALL_PT) + 4 < (s.end_us - s.start_us) * points_per_us:
            inside.append(Label(mid, lane, node.kernel, SMALL_PT, ink(role_colour(node.role))))
        else:
            above.append(Label(mid, lane - _BAR_H / 2 - 0.04, node.kernel, 8, va="bottom"))
    low = _spaced(above, points_per_us)
    high = _spaced([lb._replace(y=lb.y - 0.28) for lb in above if lb not in low], points_per_us)
    return inside + low + high


def _spaced(labels: list[Label], points_per_unit: float, gap: float = 4.0) -> list[Label]:
    """The labels, left to right, that do not overlap the one kept before them."""
    kept: list[Label] = []
    right = -np.inf
    for lb in sorted(labels, key=lambda lb: lb.x):
        half = text_width(lb.text, lb.size) / 2
        if lb.x * points_per_unit - half > right + gap:
            kept.append(lb)
            right = lb.x * points_per_unit + half
    return kept
