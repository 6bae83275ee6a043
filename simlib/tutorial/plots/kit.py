"""The drawing kit every picture is made of: labels, panels, legends, titles.

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
from dataclasses import dataclass
from typing import NamedTuple, Sequence

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import Collection, LineCollection, PathCollection, PolyCollection
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.markers import MarkerStyle
from matplotlib.path import Path
from matplotlib.textpath import TextPath, text_to_path
from matplotlib.ticker import MaxNLocator
from matplotlib.transforms import (
    Affine2D,
    Bbox,
    BboxTransformFrom,
    BboxTransformTo,
    Transform,
    TransformedBbox,
    blended_transform_factory,
)

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
LINE_EMS = 1.25          # line height, in ems


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
    return ((lines - 1) * LINE_EMS + 1.0) * size


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
                verts.append(v + (x, -i * LINE_EMS * _GLYPH_PT))
                codes.append(c)
            x += advance
        width = max(width, x)
    if not verts:
        return Path(np.zeros((1, 2)))
    top, bottom = 0.75 * _GLYPH_PT, -((len(lines) - 1) * LINE_EMS + 0.22) * _GLYPH_PT
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


def box_path(width: float, height: float, pad: float = 4.0) -> Path:
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
                           wrap(text, self.rect[2] * self.fig.get_figwidth() * 72, PANEL_PT),
                           PANEL_PT, weight="bold", ha="left", va="bottom")],
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


def fresh_figure(fig: Figure | None, size: tuple[float, float]) -> Figure:
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


def draw_legend(fig: Figure, keys: Sequence[Key], x: float, y: float, *,
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
PANEL_PT = 10.0


def wrap(text: str, width_pt: float, size: float) -> str:
    return textwrap.fill(text, int(width_pt / (size * 0.62)), break_on_hyphens=False)


def title_inches(text: str, width_in: float) -> float:
    """Inches the figure's title takes at the top of a figure ``width_in`` wide."""
    lines = wrap(text, width_in * 72 * 0.9, _TITLE_PT).count("\n") + 1
    return (text_height(lines, _TITLE_PT) + 14) / 72


def draw_title(fig: Figure, text: str) -> None:
    """The figure's takeaway, bold across the top (wrapped to the figure's width)."""
    top = 1 - 8 / (fig.get_figheight() * 72)
    draw_labels(fig, [Label(0.5, top, wrap(text, fig.get_figwidth() * 72 * 0.9, _TITLE_PT),
                            _TITLE_PT, weight="bold", va="top")], fig.transFigure, gid="title")
