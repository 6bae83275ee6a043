"""The pointer table: each tensor's pointer over the host steps of a capture, and who froze it."""

from __future__ import annotations

from typing import Sequence

from matplotlib.figure import Figure

from ...trace import Alloc, Capture, Launch, Mutation, SkippedLaunch, Trace
from .kit import (
    MONO,
    SMALL_PT,
    TEXT_PT,
    Key,
    Label,
    Panel,
    draw_labels,
    draw_legend,
    draw_title,
    fresh_figure,
    text_width,
    title_inches,
)
from .palette import DANGER, GREY, OKABE_ITO, tint
from .reading import Blocks, arg_problem, pointer_text, show_full_pointers, until
from .takeaways import capture_title


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
_TO_COME = tint(GREY, 0.3)           # the names of launches the host has not issued yet
_TO_COME_BAND = tint(GREY, 0.9)      # the host steps still to come
_EMPTY_VIEW = tint(DANGER, 0.55)     # zero elements at a real address: empty, but not null


def pointer_table(trace: Trace, *, graph: int = 0, step: int | None = None,
                  labels: Sequence[str] | None = None, takeaway: str | None = None,
                  full_pointers: bool | None = None, fig: Figure | None = None) -> Figure:
    """Each tensor label's pointer over the host steps of a capture, and who froze it.

    A row per tensor label (by default every label a launch of the capture took
    as an argument; the rows and columns do not change with ``step``); its bar
    changes colour and text where the host repointed it (``set_``, a new
    allocation), and a dashed line marks a host ``set_`` at that boundary. Pointer
    0 has its own colour; a tensor of zero elements at a real address (an empty
    view) another, lighter one, since no launch that reads it faults. A dot marks a
    launch freezing that value: black for a live pointer, white for a
    null/empty/freed one or a launch the host skipped. The launches name the
    columns; before ``step``'s end of the capture, the host steps still to come are
    shaded and their launches named in grey (what the host will issue, not yet what
    it froze), so the picture keeps its width as the slider moves.
    ``full_pointers`` shows whole addresses (default: where the capture hands a
    freed block out again); ``takeaway`` replaces the title.
    """
    first, last = _window(trace, graph)
    shown = last if step is None else min(step, last)
    full = show_full_pointers(full_pointers, trace, graph)
    pools = {r.ptr: r.pool for r in trace.of(Alloc)}
    history: dict[str, list[tuple[int, int, bool]]] = {}
    freezes: list[tuple[int, str, bool]] = []   # step, label, white (wrong or skipped)
    columns: list[tuple[int, str, str]] = []   # step, name, colour
    order: dict[str, None] = {}
    mutations: list[Mutation] = []
    blocks = Blocks()
    for r in trace.records:
        if r.step > last:
            break
        if isinstance(r, (Launch, SkippedLaunch)) and r.graph == graph:
            order.update(dict.fromkeys(a.label for a in r.args))
            if r.step > shown:   # still to come: named, not judged
                columns.append((r.step, r.kernel, _TO_COME))
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
                columns.append((r.step, r.kernel + (" (skipped)" if skipped else ""), GREY if skipped else "black"))
                for a in r.args:
                    freezes.append((r.step, a.label, skipped or arg_problem(a, blocks) is not None))
    rows = list(labels) if labels is not None else list(order)

    title = takeaway or capture_title(until(trace, shown), graph)
    names = max((text_width(n, TEXT_PT, MONO) for n in rows), default=40.0) + 14
    below = max((text_width(c.removesuffix(" (skipped)") + " (skipped)", SMALL_PT) for _, c, _ in columns),
                default=40.0)
    title_in = title_inches(title, 13.0)
    head_in, row_in, foot_in = title_in + 0.8, 0.27, 0.3 + (below * 0.82 + 14) / 72
    height = head_in + row_in * max(len(rows), 3) + foot_in
    fig = fresh_figure(fig, (13.0, height))
    pt = 1 / (fig.get_figheight() * 72)
    left = names / (13.0 * 72)
    p = Panel(fig, (left, foot_in / height, 0.985 - left, 1 - (head_in + foot_in) / height),
              (first - 0.5, last + 0.5), (max(len(rows), 1) - 0.5, -0.5))
    p.lane_names(rows)
    px = p.points_per_unit()[0]
    row_of = {label: i for i, label in enumerate(rows)}
    if shown < last:
        p.bars([(shown + 0.5, last - shown)], (len(rows) - 1) / 2, max(len(rows), 1), _TO_COME_BAND,
               gid="to-come", zorder=0)
    cells: list[Label] = []
    pooled: set[str | None] = set()
    kinds: set[str] = set()   # "null", "empty view"
    for label, y in row_of.items():
        segments = _segments(history.get(label, []), first, shown)
        if not segments:
            continue
        pooled |= {None if empty else _pool_name(pools.get(ptr)) for _, _, ptr, empty in segments}
        kinds |= {"null" if ptr == 0 else "empty view" for _, _, ptr, empty in segments if empty}
        p.bars([(a - 0.5, b - a + 1) for a, b, _, _ in segments], y, 0.8,
               [(DANGER if ptr == 0 else _EMPTY_VIEW) if empty else tint(_pool_colour(pools.get(ptr)), 0.55)
                for _, _, ptr, empty in segments], gid=f"row:{label}")
        dots = sorted(s for s, lb, _ in freezes if lb == label)
        for a, b, ptr, empty in segments:
            text = f"{pointer_text(ptr, full)} (empty)" if empty else pointer_text(ptr, full)
            x = _free_spot(a, b, dots, (text_width(text, TEXT_PT, MONO) + 4) / px,
                           _DOT_PT / 2 / px)
            if x is not None:
                cells.append(Label(x, y, text, TEXT_PT, "white" if empty and ptr == 0 else "black",
                                   family=MONO))
    p.labels(cells, gid="cells")
    dots = [(s, row_of[lb], white) for s, lb, white in freezes if lb in row_of]
    if dots:
        p.marks([(s, y) for s, y, _ in dots], "o", _DOT_PT, gid="freezes", edge="black",
                face=["white" if white else "black" for *_, white in dots])
    # A set_ at host step s changes the row from s on: its line sits on the bar's boundary.
    notes = [Label(m.step - 0.5, -0.55, f"{m.label}.{m.op}("
                   f"{'empty' if m.new_numel == 0 else pointer_text(m.new_ptr, full)})",
                   TEXT_PT, DANGER, "bold", va="bottom") for m in mutations]
    marks = [[(m.step - 0.5, -0.5), (m.step - 0.5, len(rows) - 0.5)] for m in mutations]
    if step is not None and step < last:
        # Named above the table, right of its line: below it the launch names would cross it.
        marks.append([(step + 0.5, -0.5), (step + 0.5, len(rows) - 0.5)])
        notes.append(Label(step + 0.5 + 3 / px, -1.1, f"host step {step}: still to come →", SMALL_PT,
                           ha="left", va="bottom"))
    p.lines(marks, gid="pointer-marks", colors=[DANGER] * len(mutations) + ["black"] * (
        len(marks) - len(mutations)), linestyles="--", linewidths=1.2, zorder=4)
    p.labels(notes, gid="pointer-notes")
    p.labels([Label(s, -0.01, name, SMALL_PT, colour, ha="right", rotation=55)
              for s, name, colour in columns], gid="columns", anchors=p.under)
    whites = {white for *_, white in dots}
    draw_legend(fig, [key for shown_, key in (
        ("default" in pooled, Key("eager pool", "s", tint(_pool_colour("default"), 0.55))),
        ("graph" in pooled, Key("graph's private pool", "s", tint(_pool_colour("graph0"), 0.55))),
        ("unknown" in pooled, Key("pool not recorded", "s", tint(GREY, 0.55))),
        ("null" in kinds, Key("0x0 (null, empty)", "s", DANGER)),
        ("empty view" in kinds, Key("empty at a live address (0 elements)", "s", _EMPTY_VIEW)),
        (False in whites, Key("a launch froze a live pointer", "o", "black", "black")),
        (True in whites, Key("froze null / empty / freed, or was skipped", "o", "white", "black")),
    ) if shown_], left, 1 - (title_in * 72 + 12) * pt, width=0.98 - left)
    to_come = "; shaded: host steps still to come, their launches in grey" if shown < last else ""
    draw_labels(fig, [Label(0.5, 6 * pt, f"host steps {first}–{last} of the capture; each "
                            f"column is a launch the capture froze{to_come}", TEXT_PT, va="bottom")],
                fig.transFigure, gid="caption")
    draw_title(fig, title)
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
