"""Graphs that share memory: each graph's blocks on one address line, then who wrote and read them.

Two graphs captured into one pool (``pool=``), or one graph writing what another
created, may be handed the same block. That is safe only while each graph's result is
read before the other graph replays. The top panel draws each graph's blocks at their
full addresses, one row per graph, with the overlap between graphs shaded (vermillion
where the checker says a read got the other graph's bytes); the bottom one lists, in host
order, the replays that write the shared blocks and the eager reads of them, each read
marked with whose bytes it got.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from matplotlib.figure import Figure

from ...checker import check
from ...checker.rules import GRAPHS_CLOBBER, OUTPUT_OVERWRITTEN
from ...trace import Capture, Launch, Replay, Trace
from .kit import MONO, TEXT_PT, Key, Label, Panel, draw_labels, draw_legend, draw_title, fresh_figure, title_inches
from .palette import DANGER, GREY, OKABE_ITO, tint

_GRAPH_COLOURS = (OKABE_ITO["blue"], OKABE_ITO["orange"], OKABE_ITO["green"], OKABE_ITO["purple"])
_CLEAN = tint(GREY, 0.55)
WIDTH_IN = 13.0


@dataclass(frozen=True)
class Block:
    """A span a graph's nodes write: ``[ptr, ptr + nbytes)`` under ``label``."""

    graph: str
    label: str
    ptr: int
    nbytes: int

    def overlap(self, other: "Block") -> tuple[int, int] | None:
        lo, hi = max(self.ptr, other.ptr), min(self.ptr + self.nbytes, other.ptr + other.nbytes)
        return (lo, hi) if lo < hi else None


@dataclass(frozen=True)
class Event:
    """After the captures: a replay that writes shared blocks, or an eager read of one."""

    step: int
    text: str
    colour: str
    wrong: bool = False


NEAR = 4096    # bytes: blocks this close to a shared one are drawn beside it (others live elsewhere)


def graph_blocks(trace: Trace, graphs: Mapping[str, int]) -> list[Block]:
    """What each graph's nodes write, one block per (graph, address), in capture order."""
    ids = {gid: name for name, gid in graphs.items()}
    seen: dict[tuple[str, int], Block] = {}
    for r in trace.of(Launch):
        if r.graph in ids:
            for a in r.args:
                if a.writes and a.nbytes:
                    seen.setdefault((ids[r.graph], a.ptr), Block(ids[r.graph], a.label, a.ptr, a.nbytes))
    return list(seen.values())


def shared_spans(blocks: list[Block]) -> list[tuple[int, int, Block, Block]]:
    """Every overlap between two graphs' blocks: (lo, hi, one block, the other)."""
    out = []
    for i, a in enumerate(blocks):
        for b in blocks[i + 1:]:
            span = a.overlap(b) if a.graph != b.graph else None
            if span:
                out.append((*span, a, b))
    return out


def after_captures(trace: Trace, graphs: Mapping[str, int], blocks: list[Block]) -> list[Event]:
    """The replays after the last capture and the eager reads of the shared blocks, in host order.

    A read is wrong when the last replay that wrote its address belongs to another graph than
    the one whose block it reads (its label names that block).
    """
    ids = {gid: name for name, gid in graphs.items()}
    colour = {name: _GRAPH_COLOURS[i % len(_GRAPH_COLOURS)] for i, name in enumerate(graphs)}
    shared = [(lo, hi) for lo, hi, _, _ in shared_spans(blocks)]
    owner = {(b.label, b.ptr): b.graph for b in blocks}
    ended = max((r.step for r in trace.of(Capture) if r.op == "end"), default=0)
    writer: dict[int, str] = {}
    events: list[Event] = []
    for r in trace.records:
        if r.step <= ended:
            continue
        if isinstance(r, Replay) and r.graph in ids:
            name = ids[r.graph]
            mine = [b for b in blocks if b.graph == name and any(b.ptr < hi and lo < b.ptr + b.nbytes
                                                                  for lo, hi in shared)]
            for b in mine:
                writer[b.ptr] = name
            events.append(Event(r.step, f"replay {name}\nwrites " + ",\n".join(b.label for b in mine),
                                colour[name]))
        elif isinstance(r, Launch) and r.graph is None:
            for a in r.args:
                if a.reads and (a.label, a.ptr) in owner and a.ptr in writer:
                    got, want = writer[a.ptr], owner[(a.label, a.ptr)]
                    verdict = "its own bytes" if got == want else f"{got}'s bytes: WRONG"
                    events.append(Event(r.step, f"{r.label}\nreads {a.label}:\n{verdict}",
                                        DANGER if got != want else OKABE_ITO["green"], got != want))
    return events


def pool_blocks(trace: Trace, graphs: Mapping[str, int], *, takeaway: str = "",
                fig: Figure | None = None) -> Figure:
    """Each graph's blocks on one address line (overlaps shaded), then the replays and reads after
    the captures. ``graphs`` maps the graphs' names to their ids; ``takeaway`` is the title."""
    blocks = graph_blocks(trace, graphs)
    spans = shared_spans(blocks)
    if spans:   # only the neighbourhood of the shared memory: another pool may lie far away
        lo, hi = min(a.ptr for *_, a, _ in spans), max(b.ptr + b.nbytes for *_, b in spans)
        lo = min([lo] + [b.ptr for *_, b in spans])
        hi = max([hi] + [a.ptr + a.nbytes for *_, a, _ in spans])
        blocks = [b for b in blocks if b.ptr >= lo - NEAR and b.ptr + b.nbytes <= hi + NEAR]
    flagged = {p for f in check(trace) if f.code in (GRAPHS_CLOBBER.code, OUTPUT_OVERWRITTEN.code)
               for p in f.pointers}
    events = _first_steps(after_captures(trace, graphs, blocks))
    title = takeaway or "Blocks the graphs share, and who wrote them before each read"
    rows = list(graphs)
    title_in = title_inches(title, WIDTH_IN)
    map_in, seq_in, head_in, foot_in = 0.62 * len(rows) + 0.5, 1.35 if events else 0.0, title_in + 0.55, 0.35
    height = head_in + map_in + seq_in + foot_in
    fig = fresh_figure(fig, (WIDTH_IN, height))
    left = 0.09
    base = min((b.ptr for b in blocks), default=0)
    end = max((b.ptr + b.nbytes for b in blocks), default=1)
    p = Panel(fig, (left, (foot_in + seq_in) / height, 0.97 - left, (map_in - 0.5) / height),
              (0, end - base), (len(rows) - 0.5, -0.5))
    p.title(f"each graph's blocks, by address from {base:#x} (bytes)")
    p.lane_names(rows)
    bad = [(lo, hi) for lo, hi, _, _ in spans if any(lo <= q < hi for q in flagged)]
    clean = [(lo, hi) for lo, hi, _, _ in spans if (lo, hi) not in bad]
    for spans_, colour, gid in ((clean, _CLEAN, "shared"), (bad, tint(DANGER, 0.35), "clobbered")):
        if spans_:
            p.bars([(lo - base, hi - lo) for lo, hi in spans_], (len(rows) - 1) / 2, len(rows), colour,
                   gid=f"pool-{gid}", zorder=1)
    for i, name in enumerate(rows):
        mine = [b for b in blocks if b.graph == name]
        colour = _GRAPH_COLOURS[i % len(_GRAPH_COLOURS)]
        p.bars([(b.ptr - base, b.nbytes) for b in mine], i, 0.55, tint(colour, 0.45), gid=f"pool-row:{name}",
               edgecolors=colour, linewidths=1.0)
        p.labels([Label(b.ptr - base + b.nbytes / 2, i, f"{b.label}\n{b.ptr:#x} +{b.nbytes}", TEXT_PT,
                        family=MONO) for b in mine], gid=f"pool-labels:{name}")
    if events:
        _draw_events(fig, events, (left, foot_in / height, 0.97 - left, (seq_in - 0.35) / height))
    draw_legend(fig, [k for shown, k in (
        (bool(bad), Key("both graphs write it, and a read got the other graph's bytes", "s", tint(DANGER, 0.35))),
        (bool(clean), Key("both graphs write it; each rewrites it before reading", "s", _CLEAN)),
        (any(not e.wrong and e.colour == OKABE_ITO["green"] for e in events),
         Key("a read got its own graph's bytes", "s", tint(OKABE_ITO["green"], 0.6))),
    ) if shown], left, 1 - (title_in * 72 + 14) / (height * 72), width=0.97 - left)
    draw_labels(fig, [Label(0.5, 6 / (height * 72), "full addresses: equal numbers are one block of memory",
                            TEXT_PT, va="bottom")], fig.transFigure, gid="caption")
    draw_title(fig, title)
    return fig


SHOWN_EVENTS = 6


def _first_steps(events: list[Event]) -> list[Event]:
    """Up to the first wrong read (the story), else the first ``SHOWN_EVENTS``."""
    wrong = next((i for i, e in enumerate(events) if e.wrong), None)
    return events[:SHOWN_EVENTS if wrong is None else min(wrong + 1, SHOWN_EVENTS)]


def _draw_events(fig: Figure, events: list[Event], rect: tuple[float, float, float, float]) -> None:
    """The events as boxes left to right, in host order."""
    n = len(events)
    p = Panel(fig, rect, (-0.5, max(n, 4) - 0.5), (-0.5, 0.5))
    p.title("after the captures, in host order")
    p.bars([(i - 0.45, 0.9) for i in range(n)], 0, 0.9, [tint(e.colour, 0.6) for e in events], gid="events",
           edgecolors=[e.colour for e in events], linewidths=[2.0 if e.wrong else 0.8 for e in events])
    chars = int(p.points_per_unit()[0] * 0.85 / (TEXT_PT * 0.6))
    p.labels([Label(i, 0, "\n".join(line if len(line) <= chars else line[:chars - 1] + "…"
                                    for line in e.text.splitlines()),
                    TEXT_PT, "black", "bold" if e.wrong else "normal") for i, e in enumerate(events)],
             gid="event-text")
    if n > 1:
        p.arrows([[(i + 0.45, 0), (i + 0.55, 0)] for i in range(n - 1)], ["black"] * (n - 1), [False] * (n - 1),
                 gid="event-order")
