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
``TextCollection`` keeps its strings and their sizes, for tests and readers.
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

from .checker import Finding, check
from .glossary import CAPTURE_ERROR_PREFIX, ILLEGAL_ADDRESS, UNORDERED, badge, term, words
from .latency import CROSS_STREAM, PDL, replay_timing
from .memory import short_ptr
from .profiles import PROFILES
from .trace import (Alloc, Arg, Capture, DeviceSpan, EventOp, Fault, Free, Launch, Mutation,
                    Record, SkippedLaunch, Trace)
from .values import render
from .verdict import races, verdict

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
SANS, MONO = "DejaVu Sans", "DejaVu Sans Mono"   # shipped with matplotlib: same look everywhere
# Text sizes in points. A notebook shows a 13-inch figure at 100 dpi about 1200 px wide, so
# 9 pt stays readable there: box text, table cells, legends and lane names are never smaller.
TEXT_PT = 9.0
SMALL_PT = 8.5       # tick labels, kernel names above their bars


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
    """Labels drawn as one collection of glyph outlines; ``strings`` and ``sizes`` (pt) kept."""

    def __init__(self, strings: Sequence[str], paths: Sequence[Path], *,
                 sizes_pt: Sequence[float] = (), **kwargs) -> None:
        super().__init__(paths, **kwargs)
        self.strings = list(strings)
        self.sizes_pt = list(sizes_pt)


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
    coll = TextCollection([lb.text for lb in labels], paths, sizes_pt=[lb.size for lb in labels],
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
        self.labels([Label(-0.008, i, n, TEXT_PT, ha="right", family=MONO)
                     for i, n in enumerate(names)], gid=gid, anchors=self.left)

    def title(self, text: str) -> None:
        self.labels([Label(0.0, 1.0 + 6 / (self.rect[3] * self.fig.get_figheight() * 72),
                           _wrap(text, self.rect[2] * self.fig.get_figwidth() * 72, _PANEL_PT),
                           _PANEL_PT, weight="bold", ha="left", va="bottom")],
                    gid="panel-title", anchors=self.frac)

    def time_axis(self, lo: float, hi: float, caption: str) -> None:
        """Grid lines and tick labels for a time axis along the bottom."""
        ticks = [t for t in MaxNLocator(nbins=10).tick_values(lo, hi) if lo <= t <= hi]
        self.lines([[(t, self.ylim[0]), (t, self.ylim[1])] for t in ticks], gid="grid",
                   colors="#DDDDDD", linewidths=0.6, zorder=0)
        below = 18 / (self.rect[3] * self.fig.get_figheight() * 72)
        self.labels([Label(t, -0.02, f"{t:g}", SMALL_PT, va="top") for t in ticks]
                    + [Label((lo + hi) / 2, -0.02 - below, caption, TEXT_PT, va="top")],
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
_KEY_W = 16.0       # points from a legend entry's mark to its text


def _legend(fig: Figure, keys: Sequence[Key], x: float, y: float, *,
            width: float | None = None) -> None:
    """A legend in figure coordinates, its first entry at (``x``, ``y``).

    One column, or with ``width`` (a figure fraction) entries left to right,
    wrapping to a new row where the next one would not fit.
    """
    if not keys:
        return
    step = 15 / (fig.get_figheight() * 72)
    per_point = 1 / (fig.get_figwidth() * 72)
    spots: list[tuple[float, float]] = []
    cx, cy = x, y
    for k in keys:
        size = (_KEY_W + text_width(k.label, TEXT_PT) + 18) * per_point
        if width is not None and spots and cx + size > x + width:
            cx, cy = x, cy - step
        spots.append((cx, cy))
        if width is None:
            cy -= step
        else:
            cx += size
    marks = [(k, s) for k, s in zip(keys, spots) if k.marker not in _LINES]
    if marks:
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
    draw_labels(fig, [Label(sx + 10 * per_point, sy, k.label, TEXT_PT, ha="left")
                      for k, (sx, sy) in zip(keys, spots)], fig.transFigure, gid="legend")


_TITLE_PT = 11.0
_PANEL_PT = 10.0


def _wrap(text: str, width_pt: float, size: float) -> str:
    return textwrap.fill(text, int(width_pt / (size * 0.62)), break_on_hyphens=False)


def _title_in(text: str, width_in: float) -> float:
    """Inches the figure's title takes at the top of a figure ``width_in`` wide."""
    lines = _wrap(text, width_in * 72 * 0.9, _TITLE_PT).count("\n") + 1
    return (text_height(lines, _TITLE_PT) + 14) / 72


def _title(fig: Figure, text: str) -> None:
    """The figure's takeaway, bold across the top (wrapped to the figure's width)."""
    top = 1 - 8 / (fig.get_figheight() * 72)
    draw_labels(fig, [Label(0.5, top, _wrap(text, fig.get_figwidth() * 72 * 0.9, _TITLE_PT),
                            _TITLE_PT, weight="bold", va="top")], fig.transFigure, gid="title")


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


def _ink(colour: str) -> str:
    """Black or white, whichever contrasts more with ``colour`` (WCAG relative luminance)."""
    lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in to_rgb(colour)]
    lum = 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]
    return "black" if (lum + 0.05) / 0.05 >= 1.05 / (lum + 0.05) else "white"


def _streams(trace: Trace) -> list[str]:
    """Streams in order of first use."""
    seen: dict[str, None] = {}
    for r in trace.records:
        if isinstance(r, (Launch, SkippedLaunch, DeviceSpan, EventOp)) and r.stream is not None:
            seen.setdefault(r.stream)
    return list(seen)


def _and(names: Sequence[str]) -> str:
    names = list(names)
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


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


def _reused_block(records: Sequence[Record], graph: int, ptr: int | None = None) -> Alloc | None:
    """The first allocation that got a block freed during the capture of ``graph`` (of ``ptr``)."""
    freed: set[int] = set()
    for r in records:
        if isinstance(r, Free) and r.graph == graph and ptr in (None, r.ptr):
            freed.add(r.ptr)
        elif isinstance(r, Alloc) and r.ptr in freed and r.pool != "default":
            return r
    return None


def _full_pointers(full: bool | None, trace: Trace, graph: int) -> bool:
    """Full addresses where asked, or (``None``) where the capture reuses a freed block.

    When the pool hands one block out twice, the equal addresses are the point,
    and ``0x7e…00000`` would hide whether they are equal.
    """
    return _reused_block(trace.records, graph) is not None if full is None else full


def _ptr(ptr: int, full: bool) -> str:
    if ptr == 0:
        return "0x0"
    return hex(ptr) if full else short_ptr(ptr)


def _launches(n: int) -> str:
    return f"{n} launch" if n == 1 else f"{n} launches"


def _race_words(found: Sequence[Finding]) -> str:
    rules = "; ".join(dict.fromkeys(f"rule {f.rule}, {f.code}" for f in found))
    return f"{badge(UNORDERED)} the hardware has not lost yet (checker: {rules})"


def _capture_takeaway(records: Sequence[Record], graph: int) -> str | None:
    """One sentence on what the capture got wrong, or ``None`` where it froze only live pointers.

    Did a host ``set_`` during the capture reach a later launch, did the capture
    fail, did a launch freeze a dead pointer, and (once the capture has ended)
    does the checker find a race?
    """
    blocks = _Blocks()
    launches: list[tuple[Launch | SkippedLaunch, bool]] = []
    emptied: list[Mutation] = []
    failed: Capture | None = None
    ended = False
    for r in records:
        blocks.apply(r)
        if isinstance(r, (Launch, SkippedLaunch)) and r.graph == graph:
            launches.append((r, any(arg_problem(a, blocks) for a in r.args)))
        elif isinstance(r, Mutation) and r.graph == graph and r.new_numel == 0:
            emptied.append(r)
        elif isinstance(r, Capture) and r.graph == graph:
            failed = r if r.error else failed
            ended = ended or r.op == "end"
    if failed is not None:
        after = "".join(f", after {m.label}.{m.op}(empty) at host step {m.step}" for m in emptied)
        return (f"The capture failed ({failed.error}) at host step {failed.step}{after}: "
                "there is no graph to replay")
    for m in emptied:
        hit = [r for r, bad in launches if bad and r.step > m.step]
        if hit:
            roles = "/".join(dict.fromkeys(r.role for r in hit))
            what = (f"{m.label}.{m.op}(empty) at host step {m.step} came before "
                    f"{_launches(len(hit))} ({roles}) that saw an empty {m.label} (0x0)")
            them = "it" if len(hit) == 1 else "them"
            if all(isinstance(r, SkippedLaunch) for r in hit):
                return what + (f": the host skipped {them}, so the graph has no node for {them} "
                               f"and no replay ever runs {them}")
            return what + f": the graph holds {them} with address 0, and every replay runs {them} there"
    bad = [r for r, problem in launches if problem]
    if bad:
        return f"{len(bad)} captured launch(es) froze a null, empty or freed pointer"
    if emptied and not ended:
        m = emptied[0]
        # Shown up to a host step inside the capture: later launches are still to come.
        return (f"{m.label}.{m.op}(empty) at host step {m.step}: every launch so far froze a "
                f"live {m.label}; any launch issued after it freezes an empty {m.label} (0x0)")
    found = races(check(Trace(list(records)))) if ended else []
    if emptied:
        m = emptied[0]
        said = f"{m.label}.{m.op}(empty) at host step {m.step} came after every launch that reads it"
        if not found:
            return said + ": the capture froze live pointers only"
        reuse = _reused_block(records, graph, m.old_ptr)
        to = f", which the graph's pool hands to {reuse.label}" if reuse else ""
        return f"{said}, but it freed {m.label}'s block{to}: {_race_words(found)}"
    if found:
        return f"Every captured launch froze a live pointer, but {_race_words(found)}"
    return None


def _capture_title(records: Sequence[Record], graph: int) -> str:
    """The capture's takeaway, or what it froze when nothing went wrong."""
    said = _capture_takeaway(records, graph)
    if said:
        return said
    nodes = [r for r in records if isinstance(r, Launch) and r.graph == graph]
    if not nodes:
        return "Nothing captured yet"
    streams = list(dict.fromkeys(r.stream for r in nodes))
    return f"The capture froze {_launches(len(nodes))} on {_and(streams)}, every pointer live"


def _role_keys(roles: Iterable[str]) -> list[Key]:
    present = set(roles)
    return [Key(ROLE_NAMES.get(r, r), "s", c) for r, c in ROLE_COLOURS.items() if r in present]


# ================================================================ 1. timeline
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
    records = _until(trace, step)
    streams = _streams(trace)
    captured = any(isinstance(r, Capture) for r in trace.records)
    eager = [s for s in streams if any(isinstance(r, DeviceSpan) and r.phase == "eager"
                                       and r.stream == s for r in trace.records)]
    graph_streams = [s for s in streams if any(
        isinstance(r, (Launch, SkippedLaunch)) and r.graph is not None and r.stream == s
        for r in trace.records)] or streams[:1]
    lanes = ["host", *eager] + (["graph replays"] if captured else [])
    graph = next((r.graph for r in trace.of(Capture)), 0)
    launches = {r.id: r for r in trace.of(Launch)}
    title = takeaway or _timeline_takeaway(trace, records, graph, captured)

    top_in, mid_in, foot_in = _LANE_IN * (len(lanes) + 0.2), 0.95, 0.6
    head_in = _title_in(title, 13.0) + 0.4
    # A late branch start gets a row of its own above the replay's lanes.
    note_rows = 0.45 if _late_starts(trace, _replay_spans(records)) else 0.0
    low_in = _LANE_IN * 1.15 * (len(graph_streams) + 0.5 + note_rows) if captured else 0.0
    roles = {r.role for r in trace.records if isinstance(r, (Launch, SkippedLaunch))}
    keys_in = (len(roles) + 6) * 15 / 72          # room for the legend
    height = max(head_in + top_in + (mid_in + low_in if captured else 0.0) + foot_in,
                 keys_in + 0.9)
    fig = _figure(fig, (13.0, height))
    top = Panel(fig, (0.11, 1 - (head_in + top_in) / height, 0.72, top_in / height),
                (0, max((max(r.t_us, getattr(r, "end_us", 0.0)) for r in trace.records),
                        default=1.0) * 1.01), (len(lanes) - 0.5, -0.7))
    drawn = _host_panel(top, records, lanes, eager, launches)
    if captured:
        bottom = Panel(fig, (0.11, foot_in / height, 0.72, low_in / height),
                       (0, 1), (len(graph_streams) - 0.4, -0.9 - note_rows))
        drawn |= _replay_panel(bottom, trace, records, graph_streams, launches)
    _title(fig, title)
    keys = _role_keys(r for r in drawn if r in ROLE_COLOURS) + [key for name, key in (
        ("launch", Key("host: launch", "|", "black", "black")),
        ("skipped", Key("host: launch skipped", "o", "none", GREY)),
        ("set_", Key("host: set_ (dispose)", "X", DANGER)),
        ("wait", Key("host: event wait", "v", "black")),
        ("capture", Key("capture (nothing runs)", "s", _tint(GREY, 0.75))),
        ("cross-stream", Key("cross-stream dependency", "--", "black")),
    ) if name in drawn]
    _legend(fig, keys, 0.855, 1 - (head_in + 0.1) / height)
    return fig


def _timeline_takeaway(trace: Trace, records: Sequence[Record], graph: int,
                       captured: bool) -> str:
    if not captured:
        return _eager_takeaway(records)
    return (_capture_takeaway(records, graph) or _replay_takeaway(trace, records, graph)
            or _capture_title(records, graph))


def _eager_takeaway(records: Sequence[Record]) -> str:
    """No capture: how many launches, on which streams, until when, and the widest overlap."""
    launches = {r.id: r for r in records if isinstance(r, Launch)}
    spans = [r for r in records if isinstance(r, DeviceSpan) and r.phase == "eager"]
    if not launches:
        return "No capture and nothing launched yet"
    streams = list(dict.fromkeys(s.stream for s in spans))
    said = (f"No capture, eager only: the host issued {_launches(len(launches))} by "
            f"{max(r.t_us for r in launches.values()):.1f} µs")
    if spans:
        said += (f"; the device ran them on {_and(streams)} until "
                 f"{max(s.end_us for s in spans):.1f} µs")
    overlaps = [(min(a.end_us, b.end_us) - max(a.start_us, b.start_us), a, b)
                for i, a in enumerate(spans) for b in spans[i + 1:] if a.stream != b.stream]
    width, a, b = max(overlaps, key=lambda o: o[0], default=(0.0, None, None))
    if a is not None and width > 0:
        said += (f"; {launches[a.launch].kernel} on {a.stream} and {launches[b.launch].kernel} "
                 f"on {b.stream} overlap for {width:.1f} µs")
    return said


def _replay_takeaway(trace: Trace, records: Sequence[Record], graph: int) -> str | None:
    """Replay 0 in one sentence: its time, how its last kernel waited, a late branch."""
    spans = _replay_spans(records)
    if not spans:
        return None
    try:
        step_us, _, path = replay_timing(Trace(list(records)), graph)
    except ValueError:   # replay spans of another graph than the one captured first
        return None
    streams = list(dict.fromkeys(s.stream for s in spans))
    said = f"Replay 0 runs {len(spans)} kernels on {_and(streams)} in {step_us:.1f} µs"
    if len(path) > 1:
        last, prev = path[-1], path[-2]
        kernels = {n.label: n.kernel for n in trace.launches(graph)}   # the bars' names
        name, before = (kernels.get(step.label, step.label) for step in (last, prev))
        if last.via == PDL:
            said += (f"; its last, {name}, starts {-last.gap_us:.1f} µs before {before} ends (PDL)"
                     if last.gap_us < 0 else f"; its last, {name}, follows {before} with no gap (PDL)")
        elif last.via == CROSS_STREAM:
            said += (f"; its last, {name} on {last.stream}, waits for {before} on {prev.stream} "
                     "(a cross-stream join)")
        else:
            said += f"; its last, {name}, follows {before} on {last.stream} ({last.gap_us:.1f} µs gap)"
    late = _late_starts(trace, spans)
    if late:
        said += f"; the branch captured second starts {_late_words(trace)} late"
    return said


def _replay_spans(records: Sequence[Record]) -> list[DeviceSpan]:
    return [r for r in records if isinstance(r, DeviceSpan) and r.phase == "replay"
            and r.replay == 0]


def _late_starts(trace: Trace, spans: Sequence[DeviceSpan]) -> list[tuple[DeviceSpan, float]]:
    """Replay kernels the graph executor held back: each with the time its inputs were ready.

    A replay's first kernel on a newly opened executor stream starts
    ``graph_branch_launch_us`` after the replay began (``simlib.runtime``), later
    than its dependencies allow. Found only where the trace names its profile.
    """
    profile = PROFILES.get(trace.meta.get("profile", ""))
    if profile is None or not spans:
        return []
    deps = {r.id: r.deps for r in trace.of(Launch)}
    by_launch = {s.launch: s for s in spans}
    t0 = min(s.start_us for s in spans)
    slack = profile.graph_node_gap_us + profile.cross_stream_gap_us + 1e-6
    late = []
    for s in spans:
        ready = max([t0] + [by_launch[d].end_us for d in deps.get(s.launch, ()) if d in by_launch])
        if (s.start_us - ready > slack
                and abs(s.start_us - t0 - profile.graph_branch_launch_us) < 1e-6):
            late.append((s, ready))
    return late


def _late_words(trace: Trace) -> str:
    return f"~{PROFILES[trace.meta['profile']].graph_branch_launch_us:.0f} µs"


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
            p.bars([(a, b - a) for _, a, b in extents], lane, _BAR_H, _tint(GREY, 0.4),
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
    p.bars([(begin, end - begin)], (lanes - 1.2) / 2, lanes + 0.2, _tint(GREY, 0.75),
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
    spans = _replay_spans(records)
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
    """Mark each kernel the executor held back: a dotted span from ready to start, and why."""
    late = _late_starts(trace, spans)
    if not late:
        return
    # A bracket over the wait, from the row above the lanes (``timeline`` makes room for it)
    # down to the held-back bar's lane, and the reason on that row.
    row = p.ylim[1] + 0.3
    lines, notes = [], []
    for s, ready in late:
        lane = lane_of[s.stream]
        a, b = ready - t0, s.start_us - t0
        lines += [[(a, row), (b, row)], [(a, row), (a, lane)], [(b, row), (b, lane - _BAR_H / 2)]]
        notes.append(Label(a, row - 0.05, "graph executor opens a second stream: "
                           f"{_late_words(trace)} late start", TEXT_PT, DANGER, ha="left",
                           va="bottom"))
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
            inside.append(Label(mid, lane, node.kernel, SMALL_PT, _ink(role_colour(node.role))))
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


# ================================================================ 2. captured graph
_NODE_PT = TEXT_PT
_NODE_PAD = 4.0          # points between a node's text and its box
_STREAMS_IN = 0.35       # inches above level 0 for the stream names


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
class _Edge:
    """A graph edge (indices into the nodes): stream order, or an event between streams.

    ``via`` names the stream an event edge went through when both its ends sit
    on one stream (a fork and join around a stream that captured nothing).
    """

    src: int
    dst: int
    event: bool
    via: str | None = None


@dataclass
class _Layout:
    nodes: list[_Node]
    streams: list[str]
    edges: list[_Edge]
    levels: int
    title: str
    full: bool                            # full addresses, not 0x7e…00000
    label_width: int                      # characters of the widest argument label
    captured: dict[str, bool]             # stream -> captured a node (not only skipped ones)
    raced: dict[int, int]                 # address -> rule of a race the checker found on it

    def pointer_column(self) -> int:
        """Characters before an argument line's pointer: access, label, spaces."""
        return self.label_width + 4

    def node_text(self, node: _Node) -> tuple[str, list[tuple[str, bool]]]:
        """The node's heading and its argument lines, each marked bad or not."""
        r = node.record
        head = r.label if r.label == r.kernel else f"{r.kernel} → {r.label}"
        if node.skipped:
            head += "\n(skipped: not in the graph)"
        lines = []
        width = 14 if self.full else 11
        for a, problem in zip(r.args, node.problems):
            lines.append((f"{a.access:<2} {a.label[:self.label_width]:<{self.label_width}} "
                          f"{_ptr(a.ptr, self.full):<{width}}"
                          + (f" {problem.upper()}" if problem else ""), problem is not None))
        return head, lines

    def box(self, node: _Node) -> tuple[float, float]:
        """Width and height in points of a node's text."""
        head, lines = self.node_text(node)
        return (text_width("\n".join([head] + [s for s, _ in lines]), _NODE_PT, MONO),
                text_height(len(lines) + head.count("\n") + 1, _NODE_PT))

    def extent(self) -> tuple[float, float]:
        """Points a stream column and a level need: the largest box, padded, plus room around."""
        sizes = [self.box(n) for n in self.nodes] or [(120.0, 30.0)]
        return (max(w for w, _ in sizes) + 2 * _NODE_PAD + 40,
                max(h for _, h in sizes) + 2 * _NODE_PAD + 18)


def _graph_layout(trace: Trace, graph: int, step: int | None, full: bool | None) -> _Layout:
    """Topological level x stream column for every node, skipped launches included.

    A node sits one level below its deepest dependency; a skipped launch, which
    has no dependencies, one level below what its stream had issued before it.
    The layout is the whole capture's, so that a slider over ``step`` only
    uncovers nodes and never moves them. An edge is stream order when its
    source is the node captured just before on the same stream; any other edge
    came through an event.
    """
    blocks = _Blocks()
    frontier: dict[str, int] = {}
    level_of: dict[int, int] = {}
    index_of: dict[int, int] = {}
    columns: dict[str, int] = {}
    last_on: dict[str, int] = {}                 # stream -> its latest captured launch id
    recorded_on: dict[int, str] = {}             # event -> stream it was recorded on
    via: dict[tuple[str, int], str] = {}         # (waiting stream, dependency) -> event's stream
    nodes: list[_Node] = []
    edges: list[_Edge] = []
    for r in trace.records:
        blocks.apply(r)
        if isinstance(r, EventOp) and r.graph == graph and r.stream:
            if r.op == "record":
                recorded_on[r.event] = r.stream
            elif r.op == "wait":
                frontier[r.stream] = max([frontier.get(r.stream, -1)]
                                         + [level_of[d] for d in r.deps])
                for d in r.deps:
                    if recorded_on.get(r.event) not in (None, r.stream):
                        via[(r.stream, d)] = recorded_on[r.event]
        elif isinstance(r, (Launch, SkippedLaunch)) and r.graph == graph:
            deps = r.deps if isinstance(r, Launch) else ()
            level = 1 + max([frontier.get(r.stream, -1)] + [level_of[d] for d in deps])
            frontier[r.stream] = level
            column = columns.setdefault(r.stream, len(columns))
            nodes.append(_Node(r, level, column, [arg_problem(a, blocks) for a in r.args]))
            if isinstance(r, Launch):
                level_of[r.id] = level
                index_of[r.id] = len(nodes) - 1
                for d in deps:
                    event = d != last_on.get(r.stream)
                    edges.append(_Edge(index_of[d], len(nodes) - 1, event,
                                       via.get((r.stream, d)) if event else None))
                last_on[r.stream] = r.id
    levels = 1 + max((n.level for n in nodes), default=0)
    captured = {s: any(n.record.stream == s and not n.skipped for n in nodes) for s in columns}
    shown_records = _until(trace, step)
    ended = any(isinstance(r, Capture) and r.graph == graph and r.op == "end" for r in shown_records)
    raced = {ptr: f.rule for f in (races(check(Trace(list(shown_records)))) if ended else [])
             for ptr in f.pointers}
    widest = max((len(a.label) for n in nodes for a in n.record.args), default=8)
    if step is not None:
        shown = [i for i, n in enumerate(nodes) if n.record.step <= step]
        index = {old: new for new, old in enumerate(shown)}
        nodes = [nodes[i] for i in shown]
        edges = [_Edge(index[e.src], index[e.dst], e.event, e.via) for e in edges
                 if e.src in index and e.dst in index]
    return _Layout(nodes, list(columns), edges, levels, _capture_title(shown_records, graph),
                   _full_pointers(full, trace, graph), min(widest, 24), captured, raced)


_RACE = _tint(term(UNORDERED).colour, 0.35)


def _graph_keys(drawn: set[str]) -> list[Key]:
    return [key for name, key in (
        ("bad", Key("frozen null / empty / freed pointer", "s", "white", DANGER)),
        ("race", Key("address of a race the checker finds (rule 3 or 4: unordered)", "s", _RACE)),
        ("skipped", Key("launch skipped at capture (not in the graph)", "s", "#EEEEEE", GREY)),
        ("stream", Key("stream order (next node on the same stream)", "-", GREY)),
        ("event", Key("event edge (fork or join between streams)", "--", "black")),
    ) if name in drawn]


def captured_graph(source: "Trace | ScenarioResult", graph: int = 0, *, step: int | None = None,
                   takeaway: str | None = None, full_pointers: bool | None = None,
                   fig: Figure | None = None) -> Figure:
    """The captured DAG: one column per stream, one box per node with its frozen arguments.

    Arguments frozen null, empty or freed are vermillion and their node is
    outlined in vermillion; launches the host skipped (zero elements) are grey
    and dashed: they are not in the graph, so replays never run them. Grey
    arrows are stream order, dashed black ones event edges (a fork or a join).
    ``full_pointers`` shows whole addresses (default: where the capture hands a
    freed block out again, so that equal addresses can be seen to be equal).
    ``takeaway`` replaces the title the picture derives from the capture.
    """
    layout = _graph_layout(_trace(source), graph, step, full_pointers)
    column_pt, level_pt = layout.extent()
    width = max(7.0, column_pt / 72 * max(len(layout.streams), 1) + 0.4)
    title = takeaway or layout.title
    head_in, legend_in = _title_in(title, width) + 0.1, 0.55
    graph_in = level_pt / 72 * layout.levels
    height = head_in + _STREAMS_IN + graph_in + legend_in
    fig = _figure(fig, (width, height))
    p = _graph_panel(fig, (0.02, legend_in / height, 0.96, (_STREAMS_IN + graph_in) / height),
                     layout, level_pt)
    drawn = _draw_graph(p, layout)
    _title(fig, title)
    _legend(fig, _graph_keys(drawn), 0.03, 0.62 * legend_in / height, width=0.94)
    return fig


def _graph_panel(fig: Figure, rect: tuple[float, float, float, float], layout: _Layout,
                 level_pt: float) -> Panel:
    """Columns at x = 0, 1, ...; level k at y = -k, ``level_pt`` apart; stream names on top.

    Level 0 sits at the same height in every panel of one figure, whatever its depth.
    """
    top = 0.5 + _STREAMS_IN * 72 / level_pt
    units = rect[3] * fig.get_figheight() * 72 / level_pt
    return Panel(fig, rect, (-0.5, max(len(layout.streams), 1) - 0.5), (top - units, top))


def _draw_graph(p: Panel, layout: _Layout) -> set[str]:
    """Draw the nodes and edges; return what was drawn (for the legend)."""
    top = p.ylim[1] - 8 / p.points_per_unit()[1]       # a gap under the panel's title
    p.labels([Label(c, top, f"stream {s}", 10, weight="bold", va="top")
              for c, s in enumerate(layout.streams)], gid="graph-streams")
    if not layout.nodes:
        p.labels([Label(0.5, 0.5, "nothing captured yet", TEXT_PT, GREY)], gid="graph-notes",
                 anchors=p.frac)
        return set()
    px, py = p.points_per_unit()
    advance = text_width("0", _NODE_PT, MONO)
    plain: list[Label] = []
    bad: list[Label] = []
    sizes: list[tuple[float, float]] = []
    marked: list[tuple[float, float, float]] = []     # raced pointers: centre x, y, width
    for node in layout.nodes:
        head, lines = layout.node_text(node)
        width, height = layout.box(node)
        sizes.append((width, height))
        x, y = node.column - width / 2 / px, -node.level + height / 2 / py
        colour = GREY if node.skipped else "black"
        plain.append(Label(x, y, head, _NODE_PT, colour, ha="left", va="top", family=MONO))
        below_head = head.count("\n") + 1
        for i, ((text, wrong), arg) in enumerate(zip(lines, node.record.args), start=below_head):
            top = y - i * _LINE * _NODE_PT / py
            label = Label(x, top, text, _NODE_PT, DANGER if wrong else colour,
                          "bold" if wrong else "normal", ha="left", va="top", family=MONO)
            (bad if wrong else plain).append(label)
            if arg.ptr in layout.raced and arg.numel and not node.skipped:
                chars = len(_ptr(arg.ptr, layout.full))
                marked.append((x + (layout.pointer_column() + chars / 2) * advance / px,
                               top - 0.48 * _NODE_PT / py, chars * advance))
    danger = [any(n.problems) for n in layout.nodes]
    draw_shapes(p.fig, [_box(w, h, _NODE_PAD) for w, h in sizes],
                [(n.column, -n.level) for n in layout.nodes], p.data, gid="graph-nodes", zorder=3,
                facecolors=["#EEEEEE" if n.skipped else _tint(role_colour(n.record.role))
                            for n in layout.nodes],
                edgecolors=[DANGER if d else (GREY if n.skipped else "black")
                            for n, d in zip(layout.nodes, danger)],
                linewidths=[2.0 if d else 0.8 for d in danger],
                linestyles=["--" if n.skipped else "-" for n in layout.nodes])
    if marked:
        draw_shapes(p.fig, [_box(w, _NODE_PT, 1.5) for *_, w in marked],
                    [(cx, cy) for cx, cy, _ in marked], p.data, gid="graph-races", zorder=3.5,
                    facecolors=[_RACE], edgecolors="none")
    p.labels(plain, gid="graph-text")
    p.labels(bad, gid="graph-bad-args")
    drawn = {"bad"} if any(danger) else set()
    drawn |= {"race"} if marked else set()
    drawn |= {"skipped"} if any(n.skipped for n in layout.nodes) else set()
    return drawn | _graph_edges(p, layout, sizes)


def _graph_edges(p: Panel, layout: _Layout, sizes: list[tuple[float, float]]) -> set[str]:
    px, py = p.points_per_unit()
    pad = _NODE_PAD + 1
    lines, colours, notes = [], [], []
    for e in layout.edges:
        src, dst = layout.nodes[e.src], layout.nodes[e.dst]
        (wa, ha), (wb, hb) = sizes[e.src], sizes[e.dst]
        if src.column != dst.column or dst.level - src.level == 1:
            lines.append([(src.column, -src.level - (ha / 2 + pad) / py),
                          (dst.column, -dst.level + (hb / 2 + pad) / py)])
        else:   # an edge that skips levels on one stream: go round the boxes in between
            side = src.column + (max(wa, wb) / 2 + pad + 10) / px
            lines.append([(src.column + (wa / 2 + pad) / px, -src.level), (side, -src.level),
                          (side, -dst.level), (dst.column + (wb / 2 + pad) / px, -dst.level)])
            if e.via:
                what = (f"join via {e.via}:\nnothing captured on {e.via}"
                        if not layout.captured.get(e.via) else f"via {e.via}")
                notes.append(Label(side + 6 / px, -(src.level + dst.level) / 2, what, TEXT_PT,
                                   ha="left"))
        colours.append("black" if e.event else GREY)
    p.arrows(lines, colours, [e.event for e in layout.edges], gid="graph-edges")
    if notes:
        p.labels(notes, gid="graph-edge-notes")
    return ({"event"} if any(e.event for e in layout.edges) else set()) | (
        {"stream"} if any(not e.event for e in layout.edges) else set())


# ================================================================ 3. side by side
def _banner(result: "ScenarioResult") -> tuple[str, list[tuple[str, str]], str]:
    """Headline (the verdict's badge), detail lines (text, colour) and colour of a banner."""
    findings = check(result.trace)
    said = verdict(result.outcome, findings)
    head, colour = badge(said), term(said).colour
    error = str(result.error).split(". ")[0] if result.error else ""
    if said.startswith(CAPTURE_ERROR_PREFIX) or said == ILLEGAL_ADDRESS:
        return head, [(s, "black") for s in textwrap.wrap(error, 80)], colour
    details: list[tuple[str, str]] = []
    if result.replays:
        r = result.replays[0]
        details = [(f"replay with fresh input {r.input}:", "black"),
                   (f"got:  {render(r.got, 80)}", "black" if r.ok else DANGER),
                   (f"want: {render(r.want, 80)}", "black")]
    if said == UNORDERED:
        rules = ", ".join(dict.fromkeys(f"rule {f.rule} ({f.code}) on {f.label!r}"
                                        for f in races(findings)))
        details += [(term(said).meaning.split(";")[0], "black"), (f"checker: {rules}", "black")]
    return head, details, colour


def side_by_side(result_a: "ScenarioResult", result_b: "ScenarioResult", *,
                 takeaway: str | None = None, full_pointers: bool | None = None,
                 fig: Figure | None = None) -> Figure:
    """Two configurations' captured graphs under badges with each one's verdict.

    The badge is ``simlib.verdict``'s: what the replays did, or ``unordered``
    where they came out right but the checker finds a race.
    """
    results = (result_a, result_b)
    layouts = [_graph_layout(r.trace, r.graph.id if r.graph else 0, None, full_pointers)
               for r in results]
    banners = [_banner(r) for r in results]
    widths = [max(len(layout.streams), 1) for layout in layouts]
    column_pt = max(layout.extent()[0] for layout in layouts)
    level_pt = max(layout.extent()[1] for layout in layouts)
    levels = max(layout.levels for layout in layouts)
    lines = max(len(details) for _, details, _ in banners)
    width = max(13.0, column_pt / 72 * sum(widths) + 0.6)
    title = takeaway or _comparison_takeaway(result_a, result_b)
    title_in, banner_in, legend_in = _title_in(title, width) + 0.1, 0.75 + lines * 14 / 72, 0.55
    spans = [0.96 * w / sum(widths) for w in widths]
    panel_title_pt = max(text_height(_wrap(layout.title, (span - 0.02) * width * 72, _PANEL_PT)
                                     .count("\n") + 1, _PANEL_PT) + 20
                         for layout, span in zip(layouts, spans))
    graph_in = level_pt / 72 * levels + _STREAMS_IN + panel_title_pt / 72
    height = title_in + banner_in + graph_in + legend_in
    fig = _figure(fig, (width, height))
    left = 0.02
    drawn: set[str] = set()
    for result, banner, layout, span in zip(results, banners, layouts, spans):
        _draw_banner(fig, result.config.name, banner, left + span / 2, 1 - title_in / height)
        rect = (left + 0.01, legend_in / height, span - 0.02,
                (graph_in - panel_title_pt / 72) / height)
        p = _graph_panel(fig, rect, layout, level_pt)
        drawn |= _draw_graph(p, layout)
        p.title(layout.title)
        left += span
    _title(fig, title)
    _legend(fig, _graph_keys(drawn), 0.03, 0.62 * legend_in / height, width=0.94)
    return fig


def _draw_banner(fig: Figure, name: str, banner: tuple[str, list[tuple[str, str]], str],
                 x: float, top: float) -> None:
    head, details, colour = banner
    pt = 1 / (fig.get_figheight() * 72)
    y_head = top - 28 * pt
    draw_shapes(fig, [_box(text_width(head, 13, weight="bold"), 13, pad=5)], [(x, y_head)],
                fig.transFigure, gid="banner-box", facecolors=colour, edgecolors="none")
    labels = [Label(x, top, name, 11, family=MONO, va="top"),
              Label(x, y_head, head, 13, _ink(colour), "bold")]
    labels += [Label(x, y_head - (28 + 14 * i) * pt, text, TEXT_PT, c, family=MONO)
               for i, (text, c) in enumerate(details)]
    draw_labels(fig, labels, fig.transFigure, gid="banner")


def _comparison_takeaway(a: "ScenarioResult", b: "ScenarioResult") -> str:
    da, db = a.config.to_dict(), b.config.to_dict()
    changed = [k for k in da if da[k] != db[k]]
    what = ", ".join(f"{k} ({da[k]} vs {db[k]})" for k in changed) or "nothing"
    said = [words(verdict(r.outcome, check(r.trace))) for r in (a, b)]
    if said[0] == said[1]:
        return f"Only {what} differs, and both are {said[0]}"
    return f"Same program, same streams; only {what} differs: {said[0]} vs {said[1]}"


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


_DOT_PT = 6.0


def pointer_table(trace: Trace, *, graph: int = 0, step: int | None = None,
                  labels: Sequence[str] | None = None, takeaway: str | None = None,
                  full_pointers: bool | None = None, fig: Figure | None = None) -> Figure:
    """Each tensor label's pointer over the host steps of a capture, and who froze it.

    A row per tensor label (by default every label a launch of the capture took
    as an argument; the rows and columns do not change with ``step``); its bar
    changes colour and text where the host repointed it (``set_``, a new
    allocation), and a dashed line marks a host ``set_`` at that boundary. A dot
    marks a launch freezing that value: black for a live pointer, white for a
    null/empty/freed one or a launch the host skipped. The launches name the
    columns. ``full_pointers`` shows whole addresses (default: where the
    capture hands a freed block out again); ``takeaway`` replaces the title.
    """
    first, last = _window(trace, graph)
    shown = last if step is None else min(step, last)
    full = _full_pointers(full_pointers, trace, graph)
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

    title = takeaway or _capture_title(_until(trace, shown), graph)
    names = max((text_width(n, TEXT_PT, MONO) for n in rows), default=40.0) + 14
    below = max((text_width(c + " (skipped)", SMALL_PT) for _, c, _ in columns), default=40.0)
    title_in = _title_in(title, 13.0)
    head_in, row_in, foot_in = title_in + 0.8, 0.27, 0.3 + (below * 0.82 + 14) / 72
    height = head_in + row_in * max(len(rows), 3) + foot_in
    fig = _figure(fig, (13.0, height))
    pt = 1 / (fig.get_figheight() * 72)
    left = names / (13.0 * 72)
    p = Panel(fig, (left, foot_in / height, 0.985 - left, 1 - (head_in + foot_in) / height),
              (first - 0.5, last + 0.5), (max(len(rows), 1) - 0.5, -0.5))
    p.lane_names(rows)
    px = p.points_per_unit()[0]
    row_of = {label: i for i, label in enumerate(rows)}
    cells: list[Label] = []
    pooled: set[str | None] = set()
    any_empty = False
    for label, y in row_of.items():
        segments = _segments(history.get(label, []), first, shown)
        if not segments:
            continue
        pooled |= {None if empty else _pool_name(pools.get(ptr)) for _, _, ptr, empty in segments}
        any_empty |= any(empty for *_, empty in segments)
        p.bars([(a - 0.5, b - a + 1) for a, b, _, _ in segments], y, 0.8,
               [DANGER if empty else _tint(_pool_colour(pools.get(ptr)), 0.55)
                for _, _, ptr, empty in segments], gid=f"row:{label}")
        dots = sorted(s for s, lb, _ in freezes if lb == label)
        for a, b, ptr, empty in segments:
            text = f"{_ptr(ptr, full)} (empty)" if empty else _ptr(ptr, full)
            x = _free_spot(a, b, dots, (text_width(text, TEXT_PT, MONO) + 4) / px,
                           _DOT_PT / 2 / px)
            if x is not None:
                cells.append(Label(x, y, text, TEXT_PT, "white" if empty else "black",
                                   family=MONO))
    p.labels(cells, gid="cells")
    dots = [(s, row_of[lb], white) for s, lb, white in freezes if lb in row_of]
    if dots:
        p.marks([(s, y) for s, y, _ in dots], "o", _DOT_PT, gid="freezes", edge="black",
                face=["white" if white else "black" for *_, white in dots])
    # A set_ at host step s changes the row from s on: its line sits on the bar's boundary.
    notes = [Label(m.step - 0.5, -0.55, f"{m.label}.{m.op}("
                   f"{'empty' if m.new_numel == 0 else _ptr(m.new_ptr, full)})",
                   TEXT_PT, DANGER, "bold", va="bottom") for m in mutations]
    marks = [[(m.step - 0.5, -0.5), (m.step - 0.5, len(rows) - 0.5)] for m in mutations]
    if step is not None and step < last:
        marks.append([(step + 0.5, -0.5), (step + 0.5, len(rows) - 0.5)])
        notes.append(Label(step + 0.5, len(rows) - 0.45, f"host step {step}", SMALL_PT, va="top"))
    p.lines(marks, gid="pointer-marks", colors=[DANGER] * len(mutations) + ["black"] * (
        len(marks) - len(mutations)), linestyles="--", linewidths=1.2, zorder=4)
    p.labels(notes, gid="pointer-notes")
    p.labels([Label(s, -0.01, name + (" (skipped)" if skipped else ""), SMALL_PT,
                    GREY if skipped else "black", ha="right", rotation=55)
              for s, name, skipped in columns], gid="columns", anchors=p.under)
    whites = {white for *_, white in dots}
    _legend(fig, [key for shown_, key in (
        ("default" in pooled, Key("eager pool", "s", _tint(_pool_colour("default"), 0.55))),
        ("graph" in pooled, Key("graph's private pool", "s", _tint(_pool_colour("graph0"), 0.55))),
        ("unknown" in pooled, Key("pool not recorded", "s", _tint(GREY, 0.55))),
        (any_empty, Key("0x0 / empty", "s", DANGER)),
        (False in whites, Key("a launch froze a live pointer", "o", "black", "black")),
        (True in whites, Key("froze null / empty / freed, or was skipped", "o", "white", "black")),
    ) if shown_], left, 1 - (title_in * 72 + 12) * pt, width=0.98 - left)
    draw_labels(fig, [Label(0.5, 6 * pt, f"host steps {first}–{last} of the capture; each "
                            "column is a launch the capture froze", TEXT_PT, va="bottom")],
                fig.transFigure, gid="caption")
    _title(fig, title)
    return fig


def _free_spot(a: int, b: int, dots: list[int], need: float, radius: float) -> float | None:
    """Middle of the widest stretch of steps ``a..b`` clear of freeze dots, if ``need`` fits.

    ``need`` and ``radius`` (a dot's) are in steps; the stretch runs from the
    bar's edge or a dot's rim to the next dot's rim or the bar's other edge.
    """
    inner = [d for d in dots if a <= d <= b]
    lefts = [a - 0.5] + [d + radius for d in inner]
    rights = [d - radius for d in inner] + [b + 0.5]
    room, lo, hi = max((r - l, l, r) for l, r in zip(lefts, rights))
    return (lo + hi) / 2 if room >= need else None


def _pool_name(pool: str | None) -> str:
    if pool is None:
        return "unknown"
    return "default" if pool == "default" else "graph"


def _pool_colour(pool: str | None) -> str:
    if pool is None:
        return GREY
    return OKABE_ITO["sky_blue"] if pool == "default" else OKABE_ITO["green"]
