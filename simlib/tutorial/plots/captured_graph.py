"""The captured graph: one column per stream, one box per node with its frozen arguments."""

from __future__ import annotations

from dataclasses import dataclass, field

from matplotlib.figure import Figure

from ...checker import check
from ...checker.verdict import races
from ...glossary import UNORDERED, term
from ...programs.scenarios import ScenarioResult
from ...trace import GENERATOR, Capture, EventOp, Launch, SkippedLaunch, Trace
from .kit import (
    LINE_EMS,
    MONO,
    TEXT_PT,
    Key,
    Label,
    Panel,
    box_path,
    draw_labels,
    draw_legend,
    draw_shapes,
    draw_title,
    fresh_figure,
    text_height,
    text_width,
    title_inches,
    wrap,
)
from .marks import FROZEN, Marked, graph_notes, node_marks
from .palette import DANGER, GREY, role_colour, tint
from .reading import Blocks, arg_problem, pointer_text, show_full_pointers, trace_of, until
from .takeaways import capture_title

_NODE_PT = TEXT_PT
_NODE_PAD = 4.0          # points between a node's text and its box
STREAMS_IN = 0.35       # inches above level 0 for the stream names


@dataclass
class _Node:
    record: Launch | SkippedLaunch
    level: int
    column: int
    problems: list[str | None] = field(default_factory=list)
    marks: dict[Marked, str] = field(default_factory=dict)   # what the checker says it froze -> tag

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
class Layout:
    nodes: list[_Node]
    streams: list[str]
    edges: list[_Edge]
    levels: int
    title: str
    full: bool                            # full addresses, not 0x7e…00000
    label_width: int                      # characters of the widest argument label
    captured: dict[str, bool]             # stream -> captured a node (not only skipped ones)
    raced: dict[int, int]                 # address -> rule of a race the checker found on it
    host_notes: list[str] = field(default_factory=list)   # the hazards the boxes cannot show, a line each

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
            tag = node.marks.get((a.label, a.ptr)) or node.marks.get(a.label)
            shape = f" {'x'.join(map(str, a.shape))}" if tag == FROZEN else ""
            lines.append((f"{a.access:<2} {a.label[:self.label_width]:<{self.label_width}} "
                          f"{pointer_text(a.ptr, self.full):<{width}}"
                          + (f" {problem.upper()}" if problem else f"{shape} {tag}" if tag else ""),
                          problem is not None or tag is not None))
        for name, value in getattr(r, "scalars", ()):
            tag = node.marks.get(value if name == GENERATOR else name)
            text = f"rng {value}: its state at capture" if name == GENERATOR else f"=  {name} = {value}"
            lines.append((text + (f" {tag}" if tag else ""), tag is not None))
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


def graph_layout(trace: Trace, graph: int, step: int | None, full: bool | None) -> Layout:
    """Topological level x stream column for every node, skipped launches included.

    A node sits one level below its deepest dependency; a skipped launch, which
    has no dependencies, one level below what its stream had issued before it.
    The layout is the whole capture's, so that a slider over ``step`` only
    uncovers nodes and never moves them. An edge is stream order when its
    source is the node captured just before on the same stream; any other edge
    came through an event.
    """
    blocks = Blocks()
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
    shown_records = until(trace, step)
    ended = any(isinstance(r, Capture) and r.graph == graph and r.op == "end" for r in shown_records)
    findings = check(Trace(list(shown_records))) if ended else []
    raced = {ptr: f.rule for f in races(findings) for ptr in f.pointers}
    for node in nodes:
        node.marks = node_marks(findings, node.record)
    widest = max((len(a.label) for n in nodes for a in n.record.args), default=8)
    if step is not None:
        shown = [i for i, n in enumerate(nodes) if n.record.step <= step]
        index = {old: new for new, old in enumerate(shown)}
        nodes = [nodes[i] for i in shown]
        edges = [_Edge(index[e.src], index[e.dst], e.event, e.via) for e in edges
                 if e.src in index and e.dst in index]
    return Layout(nodes, list(columns), edges, levels, capture_title(shown_records, graph),
                   show_full_pointers(full, trace, graph), min(widest, 24), captured, raced,
                   graph_notes(findings, shown_records, graph, {a.ptr for n in nodes for a in n.record.args}))


_RACE = tint(term(UNORDERED).colour, 0.35)


def graph_keys(drawn: set[str]) -> list[Key]:
    return [key for name, key in (
        ("bad", Key("frozen null / empty / freed pointer", "s", "white", DANGER)),
        ("frozen", Key("a value the replays keep while the host changes it (FROZEN, REBOUND, ...)", "s", "white",
                       DANGER)),
        ("race", Key("address of a race the checker finds (rule 3 or 4: unordered)", "s", _RACE)),
        ("skipped", Key("launch skipped at capture (not in the graph)", "s", "#EEEEEE", GREY)),
        ("stream", Key("stream order (next node on the same stream)", "-", GREY)),
        ("event", Key("event edge (fork or join between streams)", "--", "black")),
    ) if name in drawn]


def captured_graph(source: Trace | ScenarioResult, graph: int = 0, *, step: int | None = None,
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
    layout = graph_layout(trace_of(source), graph, step, full_pointers)
    column_pt, level_pt = layout.extent()
    width = max(7.0, column_pt / 72 * max(len(layout.streams), 1) + 0.4)
    title = takeaway or layout.title
    notes = wrap(" ".join(layout.host_notes), width * 72 * 0.75, TEXT_PT) if layout.host_notes else ""
    notes_in = (text_height(notes.count("\n") + 1, TEXT_PT) + 16) / 72 if notes else 0.0
    head_in, legend_in = title_inches(title, width) + 0.1, 0.55 + notes_in
    graph_in = level_pt / 72 * layout.levels
    height = head_in + STREAMS_IN + graph_in + legend_in
    fig = fresh_figure(fig, (width, height))
    p = graph_panel(fig, (0.02, legend_in / height, 0.96, (STREAMS_IN + graph_in) / height),
                     layout, level_pt)
    drawn = draw_graph(p, layout)
    if notes:
        draw_labels(fig, [Label(0.03, (legend_in - 0.04) / height, notes, TEXT_PT, DANGER, "bold", ha="left",
                                va="top")], fig.transFigure, gid="graph-host-notes")
    draw_title(fig, title)
    draw_legend(fig, graph_keys(drawn), 0.03, 0.62 * (legend_in - notes_in) / height, width=0.94)
    return fig


def graph_panel(fig: Figure, rect: tuple[float, float, float, float], layout: Layout,
                 level_pt: float) -> Panel:
    """Columns at x = 0, 1, ...; level k at y = -k, ``level_pt`` apart; stream names on top.

    Level 0 sits at the same height in every panel of one figure, whatever its depth.
    """
    top = 0.5 + STREAMS_IN * 72 / level_pt
    units = rect[3] * fig.get_figheight() * 72 / level_pt
    return Panel(fig, rect, (-0.5, max(len(layout.streams), 1) - 0.5), (top - units, top))


def draw_graph(p: Panel, layout: Layout) -> set[str]:
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
        args = [*node.record.args, *[None] * (len(lines) - len(node.record.args))]   # then the scalars
        for i, ((text, wrong), arg) in enumerate(zip(lines, args), start=below_head):
            top = y - i * LINE_EMS * _NODE_PT / py
            label = Label(x, top, text, _NODE_PT, DANGER if wrong else colour,
                          "bold" if wrong else "normal", ha="left", va="top", family=MONO)
            (bad if wrong else plain).append(label)
            if arg is not None and arg.ptr in layout.raced and arg.numel and not node.skipped:
                chars = len(pointer_text(arg.ptr, layout.full))
                marked.append((x + (layout.pointer_column() + chars / 2) * advance / px,
                               top - 0.48 * _NODE_PT / py, chars * advance))
    danger = [any(n.problems) or bool(n.marks) for n in layout.nodes]
    draw_shapes(p.fig, [box_path(w, h, _NODE_PAD) for w, h in sizes],
                [(n.column, -n.level) for n in layout.nodes], p.data, gid="graph-nodes", zorder=3,
                facecolors=["#EEEEEE" if n.skipped else tint(role_colour(n.record.role))
                            for n in layout.nodes],
                edgecolors=[DANGER if d else (GREY if n.skipped else "black")
                            for n, d in zip(layout.nodes, danger)],
                linewidths=[2.0 if d else 0.8 for d in danger],
                linestyles=["--" if n.skipped else "-" for n in layout.nodes])
    if marked:
        draw_shapes(p.fig, [box_path(w, _NODE_PT, 1.5) for *_, w in marked],
                    [(cx, cy) for cx, cy, _ in marked], p.data, gid="graph-races", zorder=3.5,
                    facecolors=[_RACE], edgecolors="none")
    p.labels(plain, gid="graph-text")
    p.labels(bad, gid="graph-bad-args")
    drawn = {"bad"} if any(any(n.problems) for n in layout.nodes) else set()
    drawn |= {"frozen"} if any(n.marks for n in layout.nodes) else set()
    drawn |= {"race"} if marked else set()
    drawn |= {"skipped"} if any(n.skipped for n in layout.nodes) else set()
    return drawn | _graph_edges(p, layout, sizes)


def _graph_edges(p: Panel, layout: Layout, sizes: list[tuple[float, float]]) -> set[str]:
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
