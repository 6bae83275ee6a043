"""Pictures of a trace: what the host did, what the capture froze, what replays ran.

This is the only simlib module that imports matplotlib. Every function takes
plain data (a ``Trace``, or a ``ScenarioResult`` where the replayed values are
needed) and returns a matplotlib ``Figure``; pass ``fig=`` to redraw into an
existing figure (the tutorial's widgets do). ``step=`` shows the state only up
to that host step, so a slider can walk through the capture.

Colours follow the Okabe-Ito palette, which stays distinguishable with the
common colour-vision deficiencies; vermillion is kept for danger (a frozen
null, empty or freed pointer, a host ``set_``, a fault).

Why there are no Axes and no ``Text`` artists: the widgets need a scenario
run plus three pictures redrawn in well under 150 ms on a 2-core machine.
matplotlib 3.11 rasterises every glyph of every ``Text`` separately (about
0.1 ms a glyph there; a graph with its frozen pointers has ~2000 glyphs), and
an Axes costs ~12 ms to create before anything is drawn in it. So a
``Panel`` is just a rectangle with data limits, everything is a collection
added to the figure, and every label, titles included, is a
``TextCollection`` of cached glyph outlines. Each collection's ``gid`` says
what it is (``"title"``, ``"lanes"``, ``"lane:main"``, ``"cells"``...), and a
``TextCollection`` keeps its strings, for tests and readers.
"""

from __future__ import annotations

import functools
import textwrap
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, NamedTuple, Sequence

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import Collection, LineCollection, PathCollection, PolyCollection
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.markers import MarkerStyle
from matplotlib.path import Path
from matplotlib.textpath import TextPath, text_to_path
from matplotlib.ticker import MaxNLocator
from matplotlib.transforms import (Affine2D, Bbox, BboxTransformFrom, BboxTransformTo, Transform,
                                   TransformedBbox, blended_transform_factory)

from .memory import short_ptr
from .spec import CAPTURE_ERROR_PREFIX, CORRECT, ILLEGAL_ADDRESS, SILENT_WRONG
from .trace import (Alloc, Arg, Capture, DeviceSpan, EventOp, Fault, Free, Launch, Mutation,
                    Record, SkippedLaunch, Trace)
from .values import render

if TYPE_CHECKING:
    from .scenarios import ScenarioResult

OKABE_ITO = {
    "black": "#000000", "orange": "#E69F00", "sky_blue": "#56B4E9", "green": "#009E73",
    "yellow": "#F0E442", "blue": "#0072B2", "vermillion": "#D55E00", "purple": "#CC79A7",
}
DANGER = OKABE_ITO["vermillion"]
GREY = "#999999"
ROLE_COLOURS = {
    "norm": OKABE_ITO["sky_blue"], "gate": OKABE_ITO["yellow"], "topk": OKABE_ITO["orange"],
    "copy": OKABE_ITO["purple"], "routed": OKABE_ITO["blue"], "shared": OKABE_ITO["green"],
    "merge": OKABE_ITO["black"], "fill": GREY, "other": "#BBBBBB",
}
ROLE_NAMES = {"copy": "copy / permute", "merge": "merge (residual add)"}
OUTCOME_COLOURS = {CORRECT: OKABE_ITO["green"], SILENT_WRONG: DANGER, ILLEGAL_ADDRESS: DANGER}
_DARK = {OKABE_ITO["blue"], OKABE_ITO["black"], OKABE_ITO["green"], OKABE_ITO["purple"]}
SANS, MONO = "DejaVu Sans", "DejaVu Sans Mono"   # shipped with matplotlib: same look everywhere


# ================================================================ labels as glyph outlines
class Label(NamedTuple):
    """One label: anchor, text and style (sizes in points, rotation in degrees)."""

    x: float
    y: float
    text: str
    size: float = 7.0
    colour: str = "black"
    weight: str = "normal"
    ha: str = "center"
    va: str = "center"
    family: str = SANS
    rotation: float = 0.0


class TextCollection(PathCollection):
    """Labels drawn as one collection of glyph outlines; ``strings`` keeps their text."""

    def __init__(self, strings: Sequence[str], paths: Sequence[Path], **kwargs) -> None:
        super().__init__(paths, **kwargs)
        self.strings = list(strings)


_GLYPH_PT = 10.0      # glyphs are cached at 10 pt and scaled per label
_LINE = 1.25          # line height, in ems


@functools.cache
def _glyph(ch: str, family: str, weight: str) -> tuple[np.ndarray, np.ndarray, float]:
    """Outline (vertices in points at 10 pt, codes) and advance of one character."""
    prop = FontProperties(family=family, weight=weight, size=_GLYPH_PT)
    bars = text_to_path.get_text_width_height_descent("||", prop, ismath=False)[0]
    advance = text_to_path.get_text_width_height_descent(f"|{ch}|", prop, ismath=False)[0] - bars
    if ch.isspace():
        return np.zeros((0, 2)), np.zeros(0, np.uint8), advance
    path = TextPath((0, 0), ch, prop=prop)
    v = path.vertices
    if len(v) > 1 and np.ptp(v[:-1, 1]) < 0.07 * _GLYPH_PT:
        # A hairline glyph ("_") fills less than a pixel unhinted; give it one.
        mid = v[:-1, 1].mean()
        v = v.copy()
        v[:-1, 1] = mid + np.sign(v[:-1, 1] - mid) * 0.05 * _GLYPH_PT
    return v, path.codes, advance


def text_width(text: str, size: float = 7.0, family: str = SANS, weight: str = "normal") -> float:
    """Width in points of the longest line of ``text``."""
    return max(sum(_glyph(c, family, weight)[2] for c in line) for line in text.split("\n")) \
        * size / _GLYPH_PT


def text_height(lines: int, size: float = 7.0) -> float:
    """Height in points of ``lines`` lines of text."""
    return ((lines - 1) * _LINE + 1.0) * size


@functools.lru_cache(maxsize=8192)
def _outline(text: str, size: float, weight: str, ha: str, va: str, family: str,
             rotation: float) -> Path:
    """A label's outline in points around its anchor (cached: redraws repeat labels)."""
    lines = text.split("\n")
    verts: list[np.ndarray] = []
    codes: list[np.ndarray] = []
    width = 0.0
    for i, line in enumerate(lines):
        x = 0.0
        for ch in line:
            v, c, advance = _glyph(ch, family, weight)
            if len(v):
                verts.append(v + (x, -i * _LINE * _GLYPH_PT))
                codes.append(c)
            x += advance
        width = max(width, x)
    if not verts:
        return Path(np.zeros((1, 2)))
    top, bottom = 0.75 * _GLYPH_PT, -((len(lines) - 1) * _LINE + 0.22) * _GLYPH_PT
    dx = {"left": 0.0, "center": -width / 2, "right": -width}[ha]
    dy = {"baseline": 0.0, "top": -top, "bottom": -bottom, "center": -(top + bottom) / 2}[va]
    v = (np.concatenate(verts) + (dx, dy)) * (size / _GLYPH_PT)
    if rotation:
        a = np.radians(rotation)
        v = v @ np.array([[np.cos(a), np.sin(a)], [-np.sin(a), np.cos(a)]])
    return Path(v, np.concatenate(codes))


def _points(fig: Figure) -> Transform:
    """Paths in points -> display pixels, following the figure's dpi (also in savefig)."""
    return Affine2D().scale(1 / 72) + fig.dpi_scale_trans


def _add(fig: Figure, artist: Collection) -> Collection:
    artist.set_clip_on(False)
    fig.add_artist(artist)
    return artist


def draw_labels(fig: Figure, labels: Sequence[Label], anchors: Transform, *, gid: str,
                zorder: float = 5) -> TextCollection:
    """Add ``labels`` (anchored in ``anchors``' coordinates) as one ``TextCollection``."""
    paths = [_outline(lb.text, lb.size, lb.weight, lb.ha, lb.va, lb.family, lb.rotation)
             for lb in labels]
    coll = TextCollection([lb.text for lb in labels], paths,
                          offsets=[(lb.x, lb.y) for lb in labels] or np.zeros((0, 2)),
                          offset_transform=anchors, transform=_points(fig),
                          facecolors=[lb.colour for lb in labels], edgecolors="none",
                          linewidths=0, zorder=zorder, gid=gid)
    _add(fig, coll)
    return coll


def draw_shapes(fig: Figure, paths: Sequence[Path], offsets: Sequence[tuple[float, float]],
                anchors: Transform, *, gid: str, zorder: float = 4, **style) -> PathCollection:
    """Shapes sized in points (boxes, markers, arrowheads) anchored in ``anchors``."""
    coll = PathCollection(paths, offsets=offsets, offset_transform=anchors,
                          transform=_points(fig), zorder=zorder, gid=gid, **style)
    _add(fig, coll)
    return coll


def _box(width: float, height: float, pad: float = 4.0) -> Path:
    w, h = width / 2 + pad, height / 2 + pad
    return Path([(-w, -h), (w, -h), (w, h), (-w, h), (-w, -h)], closed=True)


@functools.cache
def _marker(name: str, size: float) -> Path:
    """A ``MarkerStyle`` shape, ``size`` points across."""
    m = MarkerStyle(name)
    return m.get_path().transformed(m.get_transform() + Affine2D().scale(size))


# ================================================================ panels
class Panel:
    """A rectangle of a figure (figure fractions) with its own data limits.

    A stand-in for Axes with only what these pictures need: ``data`` maps data
    coordinates to the display, ``frac`` maps 0..1 within the rectangle.
    Limits may run backwards (``ylim=(3, -1)`` puts lane 0 at the top).
    """

    def __init__(self, fig: Figure, rect: tuple[float, float, float, float],
                 xlim: tuple[float, float], ylim: tuple[float, float]) -> None:
        self.fig, self.rect, self.xlim, self.ylim = fig, rect, xlim, ylim
        self.frac = BboxTransformTo(TransformedBbox(Bbox.from_bounds(*rect), fig.transFigure))
        self.data = BboxTransformFrom(Bbox([[xlim[0], ylim[0]], [xlim[1], ylim[1]]])) + self.frac
        self.left = blended_transform_factory(self.frac, self.data)   # x: fraction, y: data
        self.under = blended_transform_factory(self.data, self.frac)  # x: data, y: fraction

    def points_per_unit(self) -> tuple[float, float]:
        """Points per data unit along x and y."""
        w = self.rect[2] * self.fig.get_figwidth() * 72
        h = self.rect[3] * self.fig.get_figheight() * 72
        return w / abs(self.xlim[1] - self.xlim[0]), h / abs(self.ylim[1] - self.ylim[0])

    def bars(self, spans: Sequence[tuple[float, float]], y: float, height: float,
             colours: str | Sequence, *, gid: str, zorder: float = 2, **style) -> PolyCollection:
        """Horizontal bars ``(start, width)`` centred on ``y``."""
        lo, hi = y - height / 2, y + height / 2
        return _add(self.fig, PolyCollection(
            [[(a, lo), (a + w, lo), (a + w, hi), (a, hi)] for a, w in spans],
            facecolors=colours, transform=self.data, zorder=zorder, gid=gid, **style))

    def marks(self, points: Sequence[tuple[float, float]], marker: str, size: float, *,
              gid: str, face: str | Sequence = "black", edge: str | Sequence = "none",
              zorder: float = 3) -> PathCollection:
        return draw_shapes(self.fig, [_marker(marker, size)] * len(points), points, self.data,
                           gid=gid, facecolors=face, edgecolors=edge, linewidths=1.2,
                           zorder=zorder)

    def lines(self, lines: Sequence[Sequence[tuple[float, float]]], *, gid: str,
              zorder: float = 1, **style) -> LineCollection:
        return _add(self.fig, LineCollection(lines, transform=self.data, zorder=zorder, gid=gid,
                                             **style))

    def labels(self, labels: Sequence[Label], *, gid: str, anchors: Transform | None = None,
               zorder: float = 5) -> TextCollection:
        return draw_labels(self.fig, labels, anchors or self.data, gid=gid, zorder=zorder)

    def arrows(self, lines: Sequence[Sequence[tuple[float, float]]], colours: Sequence[str],
               dashed: Sequence[bool], *, gid: str) -> None:
        """Polylines with an arrowhead at their last point."""
        if not lines:
            return
        self.lines(lines, gid=gid, colors=colours, linewidths=1.0, zorder=2,
                   linestyles=["--" if d else "-" for d in dashed])
        px, py = self.points_per_unit()
        sx, sy = np.sign(self.xlim[1] - self.xlim[0]), np.sign(self.ylim[1] - self.ylim[0])
        heads = []
        for line in lines:
            (xa, ya), (xb, yb) = line[-2], line[-1]
            angle = np.degrees(np.arctan2((yb - ya) * py * sy, (xb - xa) * px * sx))
            heads.append(Path([(0, 0), (-6, 2.4), (-6, -2.4), (0, 0)], closed=True)
                         .transformed(Affine2D().rotate_deg(angle)))
        draw_shapes(self.fig, heads, [line[-1] for line in lines], self.data, gid=f"{gid}-heads",
                    facecolors=colours, edgecolors="none", zorder=2)

    def lane_names(self, names: Sequence[str], *, gid: str = "lanes") -> None:
        self.labels([Label(-0.008, i, n, 8, ha="right", family=MONO) for i, n in enumerate(names)],
                    gid=gid, anchors=self.left)

    def title(self, text: str) -> None:
        chars = int(self.rect[2] * self.fig.get_figwidth() * 72 / (8.5 * 0.62))
        self.labels([Label(0.0, 1.0 + 6 / (self.rect[3] * self.fig.get_figheight() * 72),
                           textwrap.fill(text, chars), 8.5, weight="bold", ha="left",
                           va="bottom")], gid="panel-title", anchors=self.frac)

    def time_axis(self, lo: float, hi: float, caption: str) -> None:
        """Grid lines and tick labels for a time axis along the bottom."""
        ticks = [t for t in MaxNLocator(nbins=10).tick_values(lo, hi) if lo <= t <= hi]
        self.lines([[(t, self.ylim[0]), (t, self.ylim[1])] for t in ticks], gid="grid",
                   colors="#DDDDDD", linewidths=0.6, zorder=0)
        below = 16 / (self.rect[3] * self.fig.get_figheight() * 72)
        self.labels([Label(t, -0.02, f"{t:g}", 7, va="top") for t in ticks]
                    + [Label((lo + hi) / 2, -0.02 - below, caption, 7.5, va="top")],
                    gid="time-axis", anchors=self.under)


def _figure(fig: Figure | None, size: tuple[float, float]) -> Figure:
    """A fresh figure (not registered with pyplot, so nothing to close) or ``fig`` cleared."""
    if fig is None:
        fig = Figure(figsize=size)
        FigureCanvasAgg(fig)
        return fig
    fig.clear()
    return fig


@dataclass(frozen=True)
class Key:
    """One legend entry: a ``MarkerStyle`` name, or ``"-"``/``"--"`` for a solid/dashed line."""

    label: str
    marker: str = "s"
    face: str = "black"
    edge: str = "none"


_LINES = ("-", "--")


def _legend(fig: Figure, keys: Sequence[Key], x: float, y: float, *, columns: int = 1,
            column_width: float = 0.14) -> None:
    """A legend in figure coordinates, its first entry at (``x``, ``y``)."""
    step = 13 / (fig.get_figheight() * 72)
    rows = -(-len(keys) // columns)
    spots = [(x + (i // rows) * column_width, y - (i % rows) * step) for i in range(len(keys))]
    marks = [(k, s) for k, s in zip(keys, spots) if k.marker not in _LINES]
    draw_shapes(fig, [_marker(k.marker, 10 if k.marker == "|" else 8) for k, _ in marks],
                [s for _, s in marks], fig.transFigure, gid="legend-marks",
                facecolors=[k.face for k, _ in marks], edgecolors=[k.edge for k, _ in marks],
                linewidths=1.2)
    lines = [(k, s) for k, s in zip(keys, spots) if k.marker in _LINES]
    if lines:
        draw_shapes(fig, [Path([(-6, 0), (6, 0)])] * len(lines), [s for _, s in lines],
                    fig.transFigure, gid="legend-lines", facecolors="none",
                    edgecolors=[k.face for k, _ in lines], linewidths=1.0,
                    linestyles=[k.marker for k, _ in lines])
    pad = 10 / (fig.get_figwidth() * 72)
    draw_labels(fig, [Label(sx + pad, sy, k.label, 7.5, ha="left")
                      for k, (sx, sy) in zip(keys, spots)], fig.transFigure, gid="legend")


def _title(fig: Figure, text: str) -> None:
    """The figure's takeaway, bold across the top (wrapped to the figure's width)."""
    chars = int(fig.get_figwidth() * 72 * 0.9 / (11 * 0.62))
    top = 1 - 8 / (fig.get_figheight() * 72)
    draw_labels(fig, [Label(0.5, top, textwrap.fill(text, chars), 11, weight="bold", va="top")],
                fig.transFigure, gid="title")


# ================================================================ reading a trace
def _trace(source: "Trace | ScenarioResult") -> Trace:
    return source if isinstance(source, Trace) else source.trace


def _until(trace: Trace, step: int | None) -> list[Record]:
    if step is None:
        return trace.records
    return [r for r in trace.records if r.step <= step]


def role_colour(role: str) -> str:
    return ROLE_COLOURS.get(role, ROLE_COLOURS["other"])


def _tint(colour: str, amount: float = 0.78) -> tuple[float, float, float]:
    """``colour`` mixed with white: an opaque pastel that black text reads on."""
    r, g, b = to_rgb(colour)
    return (r + (1 - r) * amount, g + (1 - g) * amount, b + (1 - b) * amount)


def _streams(trace: Trace) -> list[str]:
    """Streams in order of first use."""
    seen: dict[str, None] = {}
    for r in trace.records:
        if isinstance(r, (Launch, SkippedLaunch, DeviceSpan, EventOp)) and r.stream is not None:
            seen.setdefault(r.stream)
    return list(seen)


class _Blocks:
    """Which device blocks are live, replayed in host order from Alloc/Free records."""

    def __init__(self) -> None:
        self.blocks: dict[int, tuple[int, bool]] = {}

    def apply(self, r: Record) -> None:
        if isinstance(r, Alloc):
            self.blocks[r.ptr] = (r.nbytes, True)
        elif isinstance(r, Free):
            self.blocks[r.ptr] = (r.nbytes, False)

    def freed(self, ptr: int) -> bool:
        hit = self.blocks.get(ptr)
        if hit is None:
            hit = next(((n, live) for p, (n, live) in self.blocks.items() if p <= ptr < p + n),
                       None)
        return hit is not None and not hit[1]


def arg_problem(arg: Arg, blocks: _Blocks | None = None) -> str | None:
    """Why a frozen argument is wrong: ``null``, ``empty`` or ``freed``; ``None`` if live."""
    if arg.ptr == 0 and arg.numel > 0:
        return "null"
    if arg.numel == 0:
        return "empty"
    if blocks is not None and blocks.freed(arg.ptr):
        return "freed"
    return None


def _launches(n: int) -> str:
    return f"{n} launch" if n == 1 else f"{n} launches"


def _capture_takeaway(records: Sequence[Record], graph: int) -> str:
    """One sentence: did a host ``set_`` during the capture reach a later launch?"""
    blocks = _Blocks()
    launches: list[tuple[Launch | SkippedLaunch, bool]] = []
    emptied: list[Mutation] = []
    failed: Capture | None = None
    for r in records:
        blocks.apply(r)
        if isinstance(r, (Launch, SkippedLaunch)) and r.graph == graph:
            launches.append((r, any(arg_problem(a, blocks) for a in r.args)))
        elif isinstance(r, Mutation) and r.graph == graph and r.new_numel == 0:
            emptied.append(r)
        elif isinstance(r, Capture) and r.graph == graph and r.error:
            failed = r
    if failed is not None:
        after = "".join(f", after {m.label}.{m.op}(empty) at host step {m.step}" for m in emptied)
        return (f"The capture failed ({failed.error}) at host step {failed.step}{after}: "
                "there is no graph to replay")
    for m in emptied:
        hit = [r for r, bad in launches if bad and r.step > m.step]
        if hit:
            roles = "/".join(dict.fromkeys(r.role for r in hit))
            what = (f"{m.label}.{m.op}(empty) at host step {m.step} came before "
                    f"{_launches(len(hit))} ({roles}) that froze an empty {m.label} (0x0)")
            them = "it" if len(hit) == 1 else "them"
            if all(isinstance(r, SkippedLaunch) for r in hit):
                return what + f": the host skipped {them}, so no replay ever runs {them}"
            return what + f": every replay runs {them} on address 0"
    bad = [r for r, problem in launches if problem]
    if bad:
        return f"{len(bad)} captured launch(es) froze a null, empty or freed pointer"
    if emptied:
        m = emptied[0]
        if not any(isinstance(r, Capture) and r.graph == graph and r.op == "end"
                   for r in records):
            # Shown up to a host step inside the capture: later launches are still to come.
            return (f"{m.label}.{m.op}(empty) at host step {m.step}: every launch so far froze a "
                    f"live {m.label}; any launch issued after it freezes an empty {m.label} (0x0)")
        return (f"{m.label}.{m.op}(empty) at host step {m.step} came after every launch that "
                "reads it: the capture froze live pointers only")
    if launches:
        return "Every captured launch froze a live pointer"
    return "Nothing captured yet"


def _role_keys(roles: Iterable[str]) -> list[Key]:
    present = set(roles)
    return [Key(ROLE_NAMES.get(r, r), "s", c) for r, c in ROLE_COLOURS.items() if r in present]


# ================================================================ 1. timeline
_BAR_H = 0.5


def timeline(trace: Trace, *, step: int | None = None, fig: Figure | None = None) -> Figure:
    """Swimlanes: the host's steps and each stream's eager kernels, then the first replay.

    The upper panel is one clock for host and device: host launches as ticks
    (coloured by role), skipped launches as hollow circles, ``set_`` as a
    vermillion cross, event waits as small triangles, the capture shaded and
    each graph replay as one bar. The lower panel zooms into the first replay:
    the kernels the graph really runs, per stream, with dashed arrows for
    cross-stream dependencies.
    """
    records = _until(trace, step)
    streams = _streams(trace)
    graph_streams = [s for s in streams if any(
        isinstance(r, (Launch, SkippedLaunch)) and r.graph is not None and r.stream == s
        for r in trace.records)] or streams[:1]
    lanes = ["host", *streams, "graph replays"]
    fig = _figure(fig, (13.0, 2.6 + 0.45 * (len(lanes) + len(graph_streams))))
    unit = 0.62 / (len(lanes) + len(graph_streams) + 0.6)
    t_end = max((max(r.t_us, getattr(r, "end_us", 0.0)) for r in trace.records), default=1.0)
    top = Panel(fig, (0.11, 0.86 - unit * len(lanes), 0.72, unit * len(lanes)),
                (0, t_end * 1.01), (len(lanes) - 0.5, -0.7))
    bottom = Panel(fig, (0.11, 0.12, 0.72, unit * (len(graph_streams) + 0.6)),
                   (0, 1), (len(graph_streams) - 0.4, -0.9))
    launches = {r.id: r for r in trace.of(Launch)}
    roles = _host_panel(top, records, lanes, launches)
    _replay_panel(bottom, records, graph_streams, launches)
    graph = next((r.graph for r in trace.of(Capture)), 0)
    _title(fig, _capture_takeaway(records, graph))
    _legend(fig, _role_keys(roles) + [
        Key("host: launch", "|", "black", "black"),
        Key("host: launch skipped", "o", "none", GREY),
        Key("host: set_ (dispose)", "X", DANGER),
        Key("host: event wait", "v", "black"),
        Key("capture (nothing runs)", "s", _tint(GREY, 0.75)),
        Key("cross-stream dependency", "--", "black"),
    ], 0.855, 0.8)
    return fig


def _host_panel(p: Panel, records: Sequence[Record], lanes: list[str],
                launches: dict[int, Launch]) -> set[str]:
    p.lane_names(lanes)
    p.title("Host program, eager kernels and graph replays (one clock)")
    p.time_axis(0, p.xlim[1] / 1.01, "host and device time (µs)")
    notes: list[Label] = []
    begin: dict[int, float] = {}
    for r in records:
        if isinstance(r, Capture) and r.op == "begin":
            begin[r.graph] = r.t_us
        elif isinstance(r, Capture):
            notes.append(_shade_capture(p, begin.pop(r.graph), r.t_us, r.error, len(lanes)))
    for t in begin.values():   # a capture still open at ``step``
        notes.append(_shade_capture(p, t, records[-1].t_us, None, len(lanes)))

    host = [r for r in records if isinstance(r, Launch)]
    if host:
        p.marks([(r.t_us, 0) for r in host], "|", 12, gid="host-launches", face="none",
                edge=[role_colour(r.role) for r in host])
    skipped = [r for r in records if isinstance(r, SkippedLaunch)]
    if skipped:
        p.marks([(r.t_us, 0) for r in skipped], "o", 6, gid="host-skipped", face="none", edge=GREY)
    waits = [r for r in records if isinstance(r, EventOp) and r.op == "wait"]
    if waits:
        p.marks([(r.t_us, 0.3) for r in waits], "v", 4.5, gid="host-waits")
    mutations = [r for r in records if isinstance(r, Mutation)]
    if mutations:
        p.marks([(r.t_us, 0) for r in mutations], "X", 9, gid="host-mutations", face=DANGER,
                zorder=4)
    notes += _spaced([Label(m.t_us, -0.33, f"{m.label}.{m.op}("
                            f"{'empty' if m.new_numel == 0 else short_ptr(m.new_ptr)})",
                            7, DANGER, va="bottom") for m in mutations], p.points_per_unit()[0])

    for lane, stream in enumerate(lanes[1:-1], start=1):
        spans = [r for r in records if isinstance(r, DeviceSpan) and r.phase == "eager"
                 and r.stream == stream]
        if spans:
            p.bars([(s.start_us, s.end_us - s.start_us) for s in spans], lane, _BAR_H,
                   [role_colour(launches[s.launch].role) for s in spans], gid=f"lane:{stream}")
    lane = len(lanes) - 1
    extents = _replay_extents(records)
    if extents:
        p.bars([(a, b - a) for _, a, b in extents], lane, _BAR_H, _tint(GREY, 0.4),
               gid="lane:graph replays")
        notes += [Label((a + b) / 2, lane, f"replay {i}", 7) for i, a, b in extents]
    faults = [r for r in records if isinstance(r, Fault)]
    if faults:
        p.marks([(f.t_us, lane) for f in faults], "*", 12, gid="faults", face=DANGER, zorder=4)
        notes += [Label(f.t_us, lane + 0.3, f.error, 7, DANGER, ha="right", va="top")
                  for f in faults]
    p.labels(notes, gid="host-notes")
    return {r.role for r in host} | {launches[r.launch].role for r in records
                                      if isinstance(r, DeviceSpan)}


def _shade_capture(p: Panel, begin: float, end: float, error: str | None, lanes: int) -> Label:
    p.bars([(begin, end - begin)], (lanes - 1.2) / 2, lanes + 0.2, _tint(GREY, 0.75),
           gid="capture", zorder=0.5)
    note = "capture" if error is None else f"capture failed: {error}"
    return Label(begin + (end - begin) * 0.02, lanes - 0.55, note, 7,
                 DANGER if error else "black", ha="left", va="bottom")


def _replay_extents(records: Sequence[Record]) -> list[tuple[int, float, float]]:
    extents: dict[int, tuple[float, float]] = {}
    for r in records:
        if isinstance(r, DeviceSpan) and r.phase == "replay" and r.replay is not None:
            a, b = extents.get(r.replay, (r.start_us, r.end_us))
            extents[r.replay] = (min(a, r.start_us), max(b, r.end_us))
    return [(i, a, b) for i, (a, b) in sorted(extents.items())]


def _replay_panel(p: Panel, records: Sequence[Record], streams: list[str],
                  launches: dict[int, Launch]) -> None:
    spans = [r for r in records if isinstance(r, DeviceSpan) and r.phase == "replay"
             and r.replay == 0]
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
        p.labels([Label(0.5, 0.5, note, 9, DANGER if failed else GREY)], gid="replay-notes",
                 anchors=p.frac)
        return
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
            notes.append(Label(0, lane, f"nothing captured on {stream}{why}", 8,
                               DANGER if skipped else GREY, ha="left"))
            continue
        p.bars([(s.start_us - t0, s.end_us - s.start_us) for s in mine], lane, _BAR_H,
               [role_colour(launches[s.launch].role) for s in mine], gid=f"replay:{stream}",
               edgecolors="white", linewidths=0.5)
        if len(spans) <= 60:
            notes += _bar_names(mine, lane, t0, px, launches)
    p.labels(notes, gid="replay-notes")
    lines = []
    for s in spans:
        for d in launches[s.launch].deps:
            dep = by_launch.get(d)
            if dep is not None and dep.stream != s.stream:
                up = lane_of[s.stream] < lane_of[dep.stream]
                lines.append([(dep.end_us - t0, lane_of[dep.stream]),
                              (s.start_us - t0, lane_of[s.stream] + (1 if up else -1) * _BAR_H / 2)])
    p.arrows(lines, ["black"] * len(lines), [True] * len(lines), gid="cross-stream")


def _bar_names(spans: list[DeviceSpan], lane: int, t0: float, points_per_us: float,
               launches: dict[int, Launch]) -> list[Label]:
    """Each bar's kernel: inside if it fits, else above the bar, on two heights, if room."""
    inside, above = [], []
    for s in spans:
        node = launches[s.launch]
        mid = (s.start_us + s.end_us) / 2 - t0
        if text_width(node.kernel, 7) + 4 < (s.end_us - s.start_us) * points_per_us:
            colour = "white" if role_colour(node.role) in _DARK else "black"
            inside.append(Label(mid, lane, node.kernel, 7, colour))
        else:
            above.append(Label(mid, lane - _BAR_H / 2 - 0.04, node.kernel, 6.5, va="bottom"))
    low = _spaced(above, points_per_us)
    high = _spaced([lb._replace(y=lb.y - 0.26) for lb in above if lb not in low], points_per_us)
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


# ================================================================ 2. captured graph
@dataclass
class _Node:
    record: Launch | SkippedLaunch
    level: int
    column: int
    problems: list[str | None] = field(default_factory=list)

    @property
    def skipped(self) -> bool:
        return isinstance(self.record, SkippedLaunch)


@dataclass
class _Layout:
    nodes: list[_Node]
    streams: list[str]
    edges: list[tuple[int, int]]          # indices into nodes: (dependency, dependent)
    levels: int
    title: str


def _graph_layout(trace: Trace, graph: int, step: int | None) -> _Layout:
    """Topological level x stream column for every node, skipped launches included.

    A node sits one level below its deepest dependency; a skipped launch, which
    has no dependencies, one level below what its stream had issued before it.
    The layout is the whole capture's, so that a slider over ``step`` only
    uncovers nodes and never moves them.
    """
    blocks = _Blocks()
    frontier: dict[str, int] = {}
    level_of: dict[int, int] = {}
    index_of: dict[int, int] = {}
    columns: dict[str, int] = {}
    nodes: list[_Node] = []
    edges: list[tuple[int, int]] = []
    for r in trace.records:
        blocks.apply(r)
        if isinstance(r, EventOp) and r.graph == graph and r.op == "wait" and r.stream:
            frontier[r.stream] = max([frontier.get(r.stream, -1)] + [level_of[d] for d in r.deps])
        elif isinstance(r, (Launch, SkippedLaunch)) and r.graph == graph:
            deps = r.deps if isinstance(r, Launch) else ()
            level = 1 + max([frontier.get(r.stream, -1)] + [level_of[d] for d in deps])
            frontier[r.stream] = level
            column = columns.setdefault(r.stream, len(columns))
            nodes.append(_Node(r, level, column, [arg_problem(a, blocks) for a in r.args]))
            if isinstance(r, Launch):
                level_of[r.id] = level
                index_of[r.id] = len(nodes) - 1
                edges.extend((index_of[d], len(nodes) - 1) for d in deps)
    levels = 1 + max((n.level for n in nodes), default=0)
    if step is not None:
        shown = [i for i, n in enumerate(nodes) if n.record.step <= step]
        index = {old: new for new, old in enumerate(shown)}
        nodes = [nodes[i] for i in shown]
        edges = [(index[a], index[b]) for a, b in edges if a in index and b in index]
    return _Layout(nodes, list(columns), edges, levels,
                   _capture_takeaway(_until(trace, step), graph))


_NODE_PT = 6.5
_GRAPH_KEYS = (Key("frozen null / empty / freed pointer", "s", "white", DANGER),
               Key("launch skipped at capture (never replayed)", "s", "#EEEEEE", GREY),
               Key("stream order", "-", GREY), Key("cross-stream event", "--", "black"))


def _node_text(node: _Node) -> tuple[str, list[tuple[str, bool]]]:
    """The node's heading and its argument lines, each marked bad or not."""
    r = node.record
    head = r.label if r.label == r.kernel else f"{r.kernel} → {r.label}"
    if node.skipped:
        head += "  (skipped: not in the graph)"
    lines = []
    for a, problem in zip(r.args, node.problems):
        ptr = short_ptr(a.ptr) if a.ptr else "0x0"
        lines.append((f"{a.access:<2} {a.label[:20]:<20} {ptr:<11}"
                      + (f" {problem.upper()}" if problem else ""), problem is not None))
    return head, lines


def captured_graph(source: "Trace | ScenarioResult", graph: int = 0, *, step: int | None = None,
                   fig: Figure | None = None) -> Figure:
    """The captured DAG: one column per stream, one box per node with its frozen arguments.

    Arguments frozen null, empty or freed are vermillion and their node is
    outlined in vermillion; launches the host skipped (zero elements) are grey
    and dashed: they are not in the graph, so replays never run them. Grey
    arrows are stream order, dashed black ones cross-stream event edges.
    """
    layout = _graph_layout(_trace(source), graph, step)
    fig = _figure(fig, (max(7.0, 3.5 * len(layout.streams) + 0.6), 1.7 + 0.75 * layout.levels))
    inch = 1 / fig.get_figheight()
    _draw_graph(_graph_panel(fig, (0.02, 0.55 * inch, 0.96, 1 - 1.35 * inch), layout), layout)
    _title(fig, layout.title)
    _legend(fig, _GRAPH_KEYS, 0.03, 0.3 * inch, columns=2, column_width=0.5)
    return fig


def _graph_panel(fig: Figure, rect: tuple[float, float, float, float], layout: _Layout) -> Panel:
    return Panel(fig, rect, (-0.5, max(len(layout.streams), 1) - 0.5),
                 (-(layout.levels - 0.45), 0.75))


def _draw_graph(p: Panel, layout: _Layout) -> None:
    p.labels([Label(c, 0.55, f"stream {s}", 9, weight="bold")
              for c, s in enumerate(layout.streams)], gid="graph-streams")
    if not layout.nodes:
        p.labels([Label(0.5, 0.5, "nothing captured yet", 9, GREY)], gid="graph-notes",
                 anchors=p.frac)
        return
    px, py = p.points_per_unit()
    plain: list[Label] = []
    bad: list[Label] = []
    sizes: list[tuple[float, float]] = []
    for node in layout.nodes:
        head, lines = _node_text(node)
        width = text_width("\n".join([head] + [s for s, _ in lines]), _NODE_PT, MONO)
        height = text_height(len(lines) + 1, _NODE_PT)
        sizes.append((width, height))
        x, top = node.column - width / 2 / px, -node.level + height / 2 / py
        colour = GREY if node.skipped else "black"
        plain.append(Label(x, top, head, _NODE_PT, colour, ha="left", va="top", family=MONO))
        for i, (text, wrong) in enumerate(lines, start=1):
            y = top - i * _LINE * _NODE_PT / py
            label = Label(x, y, text, _NODE_PT, DANGER if wrong else colour,
                          "bold" if wrong else "normal", ha="left", va="top", family=MONO)
            (bad if wrong else plain).append(label)
    danger = [any(n.problems) for n in layout.nodes]
    draw_shapes(p.fig, [_box(w, h) for w, h in sizes],
                [(n.column, -n.level) for n in layout.nodes], p.data, gid="graph-nodes", zorder=3,
                facecolors=["#EEEEEE" if n.skipped else _tint(role_colour(n.record.role))
                            for n in layout.nodes],
                edgecolors=[DANGER if d else (GREY if n.skipped else "black")
                            for n, d in zip(layout.nodes, danger)],
                linewidths=[2.0 if d else 0.8 for d in danger],
                linestyles=["--" if n.skipped else "-" for n in layout.nodes])
    p.labels(plain, gid="graph-text")
    p.labels(bad, gid="graph-bad-args")
    _graph_edges(p, layout, sizes)


def _graph_edges(p: Panel, layout: _Layout, sizes: list[tuple[float, float]]) -> None:
    px, py = p.points_per_unit()
    pad = 5.0
    lines, colours, dashed = [], [], []
    for a, b in layout.edges:
        src, dst = layout.nodes[a], layout.nodes[b]
        (wa, ha), (wb, hb) = sizes[a], sizes[b]
        cross = src.column != dst.column
        if cross or dst.level - src.level == 1:
            lines.append([(src.column, -src.level - (ha / 2 + pad) / py),
                          (dst.column, -dst.level + (hb / 2 + pad) / py)])
        else:   # a same-stream edge that skips levels: go round the boxes in between
            side = src.column + (max(wa, wb) / 2 + pad + 8) / px
            lines.append([(src.column + (wa / 2 + pad) / px, -src.level), (side, -src.level),
                          (side, -dst.level), (dst.column + (wb / 2 + pad) / px, -dst.level)])
        colours.append("black" if cross else GREY)
        dashed.append(cross)
    p.arrows(lines, colours, dashed, gid="graph-edges")


# ================================================================ 3. side by side
def _banner(result: "ScenarioResult") -> tuple[str, list[tuple[str, str]], str]:
    """Headline, detail lines (text, colour) and colour of a result's banner."""
    outcome = result.outcome
    error = str(result.error).split(". ")[0] if result.error else ""
    if outcome.startswith(CAPTURE_ERROR_PREFIX):
        head = f"CAPTURE ERROR: {outcome[len(CAPTURE_ERROR_PREFIX):]}"
        return head, [(s, "black") for s in textwrap.wrap(error, 90)], OKABE_ITO["orange"]
    if outcome == ILLEGAL_ADDRESS:
        return ("ILLEGAL ADDRESS: the replay faulted",
                [(s, "black") for s in textwrap.wrap(error, 90)], DANGER)
    heads = {CORRECT: "CORRECT", SILENT_WRONG: "SILENTLY WRONG: no error, wrong output"}
    head = heads.get(outcome, outcome.upper())
    colour = OUTCOME_COLOURS.get(outcome, GREY)
    if not result.replays:
        return head, [], colour
    r = result.replays[0]
    return head, [(f"replay with fresh input {r.input}:", "black"),
                  (f"got:  {render(r.got, 80)}", "black" if r.ok else DANGER),
                  (f"want: {render(r.want, 80)}", "black")], colour


def side_by_side(result_a: "ScenarioResult", result_b: "ScenarioResult", *,
                 fig: Figure | None = None) -> Figure:
    """Two configurations' captured graphs under banners saying how each replay ended."""
    results = (result_a, result_b)
    layouts = [_graph_layout(r.trace, r.graph.id if r.graph else 0, None) for r in results]
    widths = [max(len(layout.streams), 1) for layout in layouts]
    levels = max(layout.levels for layout in layouts)
    title_in, banner_in, graph_in, legend_in = 0.55, 1.25, 0.8 * levels + 0.6, 0.35
    height = title_in + banner_in + graph_in + legend_in
    fig = _figure(fig, (max(13.0, 3.3 * sum(widths) + 1), height))
    left = 0.02
    for result, layout, w in zip(results, layouts, widths):
        span = 0.96 * w / sum(widths)
        _draw_banner(fig, result, left + span / 2, 1 - title_in / height)
        rect = (left + 0.01, legend_in / height, span - 0.02, (graph_in - 0.45) / height)
        p = _graph_panel(fig, rect, layout)
        _draw_graph(p, layout)
        p.title(layout.title)
        left += span
    _title(fig, _comparison_takeaway(result_a, result_b))
    _legend(fig, _GRAPH_KEYS, 0.03, 0.14 / height, columns=4, column_width=0.22)
    return fig


def _draw_banner(fig: Figure, result: "ScenarioResult", x: float, top: float) -> None:
    head, details, colour = _banner(result)
    pt = 1 / (fig.get_figheight() * 72)
    y_head = top - 26 * pt
    draw_shapes(fig, [_box(text_width(head, 12, weight="bold"), 12, pad=5)], [(x, y_head)],
                fig.transFigure, gid="banner-box", facecolors=colour, edgecolors="none")
    labels = [Label(x, top, result.config.name, 10, family=MONO, va="top"),
              Label(x, y_head, head, 12, "white", "bold")]
    labels += [Label(x, y_head - (26 + 12 * i) * pt, text, 8, c, family=MONO)
               for i, (text, c) in enumerate(details)]
    draw_labels(fig, labels, fig.transFigure, gid="banner")


_OUTCOME_WORDS = {CORRECT: "correct", SILENT_WRONG: "silently wrong",
                  ILLEGAL_ADDRESS: "an illegal-address fault"}


def _comparison_takeaway(a: "ScenarioResult", b: "ScenarioResult") -> str:
    da, db = a.config.to_dict(), b.config.to_dict()
    changed = [k for k in da if da[k] != db[k]]
    what = ", ".join(f"{k} ({da[k]} vs {db[k]})" for k in changed) or "nothing"
    words = [_OUTCOME_WORDS.get(r.outcome, r.outcome.replace("_", " ")) for r in (a, b)]
    if words[0] == words[1]:
        return f"Only {what} differs, and both are {words[0]}"
    return f"Same program, same streams; only {what} differs: {words[0]} vs {words[1]}"


# ================================================================ 4. pointer table
def _window(trace: Trace, graph: int) -> tuple[int, int]:
    """Host steps of the capture of ``graph`` (the whole trace if it has none)."""
    marks = {r.op: r.step for r in trace.of(Capture) if r.graph == graph}
    last = trace.records[-1].step if trace.records else 0
    return marks.get("begin", 0), marks.get("end", last)


Segment = tuple[int, int, int, bool]   # first step, last step, pointer, empty


def _segments(changes: list[tuple[int, int, bool]], first: int, last: int) -> list[Segment]:
    """Constant-pointer runs of one label within host steps ``first..last``.

    A row starts where the label first shows up in the window (a capture
    allocates afresh); a label that never shows up there keeps the value it
    had before the window.
    """
    inside = [c for c in changes if first <= c[0] <= last]
    if not inside:
        inside = [(first, *c[1:]) for c in changes if c[0] < first][-1:]
    out: list[Segment] = []
    for (s, ptr, empty), nxt in zip(inside, inside[1:] + [None]):
        end = last if nxt is None else nxt[0] - 1
        if out and out[-1][2:] == (ptr, empty):
            out[-1] = (out[-1][0], end, ptr, empty)
        elif end >= s:
            out.append((s, end, ptr, empty))
    return out


def pointer_table(trace: Trace, *, graph: int = 0, step: int | None = None,
                  labels: Sequence[str] | None = None, fig: Figure | None = None) -> Figure:
    """Each tensor label's pointer over the host steps of a capture, and who froze it.

    A row per tensor label (by default every label a launch of the capture took
    as an argument; the rows and columns do not change with ``step``); its bar changes colour and text where the host repointed it
    (``set_``, a new allocation). A dot marks a launch freezing that value:
    black for a live pointer, white for a null/empty/freed one or a launch the
    host skipped. The launches name the columns.
    """
    first, last = _window(trace, graph)
    shown = last if step is None else min(step, last)
    pools = {r.ptr: r.pool for r in trace.of(Alloc)}
    history: dict[str, list[tuple[int, int, bool]]] = {}
    freezes: list[tuple[int, str, bool]] = []   # step, label, white (wrong or skipped)
    columns: list[tuple[int, str, bool]] = []
    order: dict[str, None] = {}
    mutations: list[Mutation] = []
    blocks = _Blocks()
    for r in trace.records:
        if r.step > last:
            break
        if isinstance(r, (Launch, SkippedLaunch)) and r.graph == graph:
            order.update(dict.fromkeys(a.label for a in r.args))
        if r.step > shown:
            continue
        blocks.apply(r)
        if isinstance(r, Alloc):
            history.setdefault(r.label, []).append((r.step, r.ptr, r.nbytes == 0))
        elif isinstance(r, Mutation):
            history.setdefault(r.label, []).append((r.step, r.new_ptr, r.new_numel == 0))
            if r.step >= first:
                mutations.append(r)
        elif isinstance(r, (Launch, SkippedLaunch)):
            for a in r.args:
                history.setdefault(a.label, []).append((r.step, a.ptr, a.numel == 0))
            if r.graph == graph:
                skipped = isinstance(r, SkippedLaunch)
                columns.append((r.step, r.kernel, skipped))
                for a in r.args:
                    freezes.append((r.step, a.label, skipped or arg_problem(a, blocks) is not None))
    rows = list(labels) if labels is not None else list(order)

    fig = _figure(fig, (13.0, 2.9 + 0.22 * max(len(rows), 3)))
    pt = 1 / (fig.get_figheight() * 72)
    p = Panel(fig, (0.13, 95 * pt, 0.85, 1 - 185 * pt), (first - 0.5, last + 0.5),
              (max(len(rows), 1) - 0.5, -0.5))
    p.lane_names(rows)
    row_of = {label: i for i, label in enumerate(rows)}
    cells: list[Label] = []
    for label, y in row_of.items():
        segments = _segments(history.get(label, []), first, shown)
        if not segments:
            continue
        p.bars([(a - 0.5, b - a + 1) for a, b, _, _ in segments], y, 0.8,
               [DANGER if empty else _tint(_pool_colour(pools.get(ptr)), 0.55)
                for _, _, ptr, empty in segments], gid=f"row:{label}")
        dots = sorted(s for s, lb, _ in freezes if lb == label)
        for a, b, ptr, empty in segments:
            x = _free_spot(a, b, dots)
            if x is not None:
                cells.append(Label(x, y, "0x0 (empty)" if empty else short_ptr(ptr), 6.5,
                                   "white" if empty else "black", family=MONO))
    p.labels(cells, gid="cells")
    dots = [(s, row_of[lb], white) for s, lb, white in freezes if lb in row_of]
    if dots:
        p.marks([(s, y) for s, y, _ in dots], "o", 6, gid="freezes", edge="black",
                face=["white" if white else "black" for *_, white in dots])
    notes = [Label(m.step, -0.55, f"{m.label}.{m.op}("
                   f"{'empty' if m.new_numel == 0 else short_ptr(m.new_ptr)})",
                   8, DANGER, "bold", va="bottom") for m in mutations]
    marks = [[(m.step, -0.5), (m.step, len(rows) - 0.5)] for m in mutations]
    if step is not None and step < last:
        marks.append([(step + 0.5, -0.5), (step + 0.5, len(rows) - 0.5)])
        notes.append(Label(step + 0.5, len(rows) - 0.45, f"host step {step}", 7, va="top"))
    p.lines(marks, gid="pointer-marks", colors=[DANGER] * len(mutations) + ["black"] * (
        len(marks) - len(mutations)), linestyles="--", linewidths=1.2, zorder=4)
    p.labels(notes, gid="pointer-notes")
    p.labels([Label(s, -0.01, name + (" (skipped)" if skipped else ""), 7,
                    GREY if skipped else "black", ha="right", rotation=55)
              for s, name, skipped in columns], gid="columns", anchors=p.under)
    _legend(fig, [Key("eager pool", "s", _tint(_pool_colour("default"), 0.55)),
                  Key("graph's private pool", "s", _tint(_pool_colour("graph0"), 0.55)),
                  Key("0x0 / empty", "s", DANGER),
                  Key("a launch froze a live pointer", "o", "black", "black"),
                  Key("froze null / empty / freed, or was skipped", "o", "white", "black")],
            0.13, 1 - 52 * pt, columns=5, column_width=0.17)
    draw_labels(fig, [Label(0.5, 8 * pt, f"host steps {first}–{last} of the capture; each "
                            "column is a launch the capture froze", 7.5, va="bottom")],
                fig.transFigure, gid="caption")
    _title(fig, _capture_takeaway(_until(trace, shown), graph))
    return fig


def _free_spot(a: int, b: int, dots: list[int]) -> float | None:
    """Middle of the widest stretch of ``a..b`` without a freeze dot, if 3+ steps wide."""
    inner = [d for d in dots if a <= d <= b]
    bounds = [a - 1] + inner + [b + 1]
    gap, lo, hi = max((hi - lo, lo, hi) for lo, hi in zip(bounds, bounds[1:]))
    return (lo + hi) / 2 if gap >= 4 else None


def _pool_colour(pool: str | None) -> str:
    if pool is None:
        return GREY
    return OKABE_ITO["sky_blue"] if pool == "default" else OKABE_ITO["green"]
