"""The tutorial's interactive explorer and the small text helpers its notebooks call.

``dispose_bug_explorer(...)`` builds ipywidgets controls (issue order, how the
shared expert consumes its input, the dispose policy, a clone checkbox, which
picture, and a slider over the host steps of the capture) that re-simulate
and redraw the MoE decode step. Scenario runs are cached per configuration
and one matplotlib ``Figure`` per picture is reused (``fig=``), so a redraw is
a cache lookup, a redraw into an existing figure and one PNG encoding.

Every piece of state a test or a curious reader wants is a plain attribute of
the returned ``Explorer``: ``config``, ``step``, ``view``, ``redraws``,
``redraw_ms``, ``figure``, ``title``, ``status``, and ``box`` (the widget).
Displayed, an ``Explorer`` carries a static PNG of its view beside the widget,
so a notebook shows one picture where widgets run and where they do not
(GitHub, nbviewer); ``Explorer.snapshot()`` prints the view's status, and its
picture only once the view has changed since.

The notebooks' other helpers: ``show(fig)`` displays a ``simlib.tutorial.plots``
figure (IPython's inline backend skips figures without Axes, which is what
plots draws for speed); the text helpers (``describe_step``, ``landmarks``,
``landmark_table``, ``launch_table``, ``gpu_table``, ``outcome_table``,
``fix_table``, ``cost_table``, ``checker_verdict``, ``print_error``) need
neither ipywidgets nor matplotlib. ipywidgets, IPython and matplotlib are
imported inside the functions that need them: ``import simlib.tutorial.explorer``
works without any of them.
"""

from __future__ import annotations

import base64
import functools
import textwrap
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from .. import checker
from ..checker.verdict import verdict
from ..engine.values import relative_error, render
from ..glossary import UNORDERED, UNORDERED_MEANS, badge, words
from ..memory import short_ptr
from ..programs.latency import replay_timing
from ..programs.predictions import agrees, possible_outcomes
from ..programs.scenarios import ScenarioResult, run
from ..programs.spec import DISPOSE_POLICIES, ORDERS, SHARED_MODES, MoEConfig
from ..trace import (
    Alloc,
    Capture,
    DeviceSpan,
    EventOp,
    Fault,
    Free,
    HostSync,
    Launch,
    Mutation,
    Replay,
    SkippedLaunch,
    Trace,
    View,
)
from .gpu_results import load_gpu_results
from .png import png, small_png

if TYPE_CHECKING:
    from matplotlib.figure import Figure

VIEWS = ("pointers", "graph")
_ORDER_WORDS = {"shared_first": "shared expert issued first",
                "routed_first": "routed experts issued first"}


# ================================================================ cached simulation
@functools.lru_cache(maxsize=256)
def scenario(config: MoEConfig) -> ScenarioResult:
    """``scenarios.run(config)``, cached: a configuration is simulated once per process."""
    return run(config)


@functools.lru_cache(maxsize=256)
def findings(config: MoEConfig) -> tuple[checker.Finding, ...]:
    """The checker's findings on ``config``'s trace, cached like ``scenario``."""
    return tuple(checker.check(scenario(config).trace))


def judged(config: MoEConfig) -> str:
    """``config``'s verdict (``simlib.checker.verdict``): its replays' outcome, or ``unordered``."""
    return verdict(scenario(config).outcome, findings(config))


# ================================================================ reading a trace in words
def _args(args: Iterable[Any]) -> str:
    return ", ".join(f"{a.label}={short_ptr(a.ptr)}" + ("" if a.numel else " (empty)")
                     for a in args)


def describe_record(r: Any, recorded_on: dict[int, str] | None = None) -> str | None:
    """One host record in words (``None`` for device-side records).

    ``recorded_on`` maps event ids to the stream each was recorded on, so that a
    wait can say what it waits for (``describe_step`` passes it).
    """
    if isinstance(r, Launch):
        if r.graph is not None:
            return (f"capture {r.kernel} on stream {r.stream} as a graph node, freezing "
                    f"{_args(r.args)} (it runs only on replay)")
        return f"launch {r.kernel} on stream {r.stream} with {_args(r.args)}"
    if isinstance(r, SkippedLaunch):
        return (f"skip {r.kernel} on stream {r.stream}: {r.reason} (froze {_args(r.args)}), "
                "so it is not in the graph")
    if isinstance(r, Mutation):
        new = "0x0 (empty)" if r.new_numel == 0 else short_ptr(r.new_ptr)
        why = f" ({r.why})" if r.why else ""
        return f"{r.label}.{r.op}: {short_ptr(r.old_ptr)} -> {new}{why}; no kernel runs"
    if isinstance(r, Alloc):
        return f"allocate {r.label} at {short_ptr(r.ptr)} ({r.nbytes} bytes, pool {r.pool})"
    if isinstance(r, Free):
        return f"free {r.label}'s block {short_ptr(r.ptr)}: back to pool {r.pool} for reuse"
    if isinstance(r, View):
        return f"view {r.label} at {short_ptr(r.ptr)} ({r.numel} elements)"
    if isinstance(r, EventOp):
        if r.op == "record":
            return f"record an event on stream {r.stream}"
        if r.op == "wait":
            source = (recorded_on or {}).get(r.event)
            return (f"stream {r.stream} waits for stream {source}'s event" if source
                    else f"stream {r.stream} waits on event {r.event}")
        return f"event.{r.op}()"
    if isinstance(r, Capture):
        if r.op == "begin":
            return f"begin capturing graph {r.graph} on stream {r.stream}"
        return f"end the capture of graph {r.graph}" + (f" ({r.error})" if r.error else "")
    if isinstance(r, HostSync):
        return f"host waits for the device ({r.op})"
    if isinstance(r, Replay):
        return f"replay graph {r.graph} (replay {r.index})"
    if isinstance(r, Fault):
        return f"device fault: {r.error}"
    return None


def describe_step(trace: Trace, step: int) -> str:
    """What the host did at host step ``step``, in words."""
    recorded_on = {r.event: r.stream for r in trace.of(EventOp)
                   if r.op == "record" and r.step < step and r.stream is not None}
    parts = [d for r in trace.records if r.step == step
             if not isinstance(r, DeviceSpan) and (d := describe_record(r, recorded_on))]
    return f"host step {step}: " + ("; ".join(parts) if parts else "nothing recorded")


def capture_window(trace: Trace, graph: int = 0) -> tuple[int, int]:
    """First and last host step of the capture of ``graph`` (the whole trace without one)."""
    marks = {r.op: r.step for r in trace.of(Capture) if r.graph == graph}
    last = trace.records[-1].step if trace.records else 0
    return marks.get("begin", 0), marks.get("end", last)


def landmarks(source: Trace | ScenarioResult, graph: int = 0) -> dict[str, int]:
    """Host steps worth stopping at in a capture of the MoE step.

    ``capture_begin``, ``fork`` (a second stream joins the capture),
    ``dispose`` (a host ``set_`` during capture), ``first_shared`` (the first
    shared-expert launch, made or skipped), ``join`` and ``capture_end``;
    absent when they did not happen.
    """
    trace = source if isinstance(source, Trace) else source.trace
    first, last = capture_window(trace, graph)
    origin = next((r.stream for r in trace.of(Capture) if r.graph == graph), None)
    marks: dict[str, int] = {"capture_begin": first}
    for r in trace.records:
        if not first <= r.step <= last:
            continue
        if isinstance(r, EventOp) and r.op == "wait" and r.graph == graph:
            if r.stream != origin:
                marks.setdefault("fork", r.step)
            else:
                marks["join"] = r.step
        elif isinstance(r, Mutation) and r.graph == graph:
            marks.setdefault("dispose", r.step)
        elif isinstance(r, (Launch, SkippedLaunch)) and r.graph == graph and r.role == "shared":
            marks.setdefault("first_shared", r.step)
    marks["capture_end"] = last
    return dict(sorted(marks.items(), key=lambda kv: kv[1]))


def launch_table(trace: Trace) -> str:
    """Each eager launch: when the host issued it and when the device ran it."""
    spans = {s.launch: s for s in trace.of(DeviceSpan) if s.phase == "eager"}
    rows = [("step", "host issued (µs)", "kernel", "stream", "device start", "device end")]
    for r in trace.of(Launch):
        s = spans.get(r.id)
        if r.graph is None and s is not None:
            rows.append((str(r.step), f"{r.t_us:.1f}", r.kernel, r.stream,
                         f"{s.start_us:.1f}", f"{s.end_us:.1f}"))
    return _table(rows, right=(0, 1, 4, 5))


def _table(rows: Sequence[Sequence[str]], right: Iterable[int] = ()) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    right = set(right)
    lines = ["  ".join(c.rjust(w) if i in right else c.ljust(w)
                       for i, (c, w) in enumerate(zip(row, widths))).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


# ================================================================ tables for the notebooks
def gpu_table(path: Path) -> str:
    """The measured 3x2 table (shared mode x issue order) from a recorded GPU run (its matrix file).

    Provenance lines first (where the numbers come from), then each cell's
    outcome with the mean relative error of its replays against eager runs on
    fresh inputs, then whether the simulator agrees: the GPU's outcome must be
    one that some simulated schedule produces (``simlib.programs.predictions.possible_outcomes``).
    """
    path = Path(path)
    gpu = load_gpu_results(path)
    if gpu is None:
        return (f"No GPU results recorded at {path}; `python -m gpu_demo run --matrix` on a "
                "CUDA machine records them.")
    prov, cases = gpu.recorded, gpu.cases
    lines = [f"{key:<13} {prov[key]}" for key in
             ("gpu", "driver", "cuda_runtime", "torch", "triton", "date_utc", "command")
             if prov.get(key)]
    lines.append(f"{'file':<13} {'/'.join(path.parts[-3:])}")   # gpu_demo/results/matrix-h200.json
    rows = [("shared expert consumes x", *(_ORDER_WORDS[o] for o in ORDERS))]
    agree, differ, races = 0, [], []
    for mode in SHARED_MODES:
        cells = []
        for order in ORDERS:
            config = MoEConfig(order=order, shared_mode=mode)
            case = cases.get(config)
            if case is None:
                cells.append("not run")
                continue
            errors = [e for e in case.get("errors", []) if e is not None]
            cells.append(case["outcome"] + (f" (err {sum(errors) / len(errors):.2f})"
                                            if errors else ""))
            predicted = judged(config)
            if not agrees(possible_outcomes(config).outcomes, case["outcome"]):
                differ.append(f"{config.name}: the simulator says {predicted}, "
                              f"the GPU showed {case['outcome']}")
                continue
            agree += 1
            if predicted == UNORDERED:
                races.append(f"{config.name}: {UNORDERED} (the GPU's replays: {case['outcome']})")
        rows.append((mode, *cells))
    said = (f"simulator: its verdict agrees with {agree} of {agree + len(differ)} measured cells"
            + "".join(f"\n  {d}" for d in differ))
    if races:
        said += (f"\n{len(races)} of them {UNORDERED} ({UNORDERED_MEANS}); the checker "
                 "finds the race in the trace:" + "".join(f"\n  {r}" for r in races))
    return "\n".join(lines) + "\n\n" + _table(rows) + "\n\n" + said


def outcome_table(base: MoEConfig | None = None) -> str:
    """The simulator's 3x2 table (shared mode x issue order) for ``base``'s other options.

    Each cell is the verdict (``unordered`` where the replays are right but the checker
    finds a race), with the relative error of the first replay against the eager run on
    the same fresh input when there was a replay.
    """
    base = base or MoEConfig()
    rows = [("shared expert consumes x", *(_ORDER_WORDS[o] for o in ORDERS))]
    for mode in SHARED_MODES:
        cells = []
        for order in ORDERS:
            config = base.with_(order=order, shared_mode=mode)
            r = scenario(config)
            err = (f" (err {relative_error(r.replays[0].got, r.replays[0].want):.2f})"
                   if r.replays else "")
            cells.append(judged(config) + err)
        rows.append((mode, *cells))
    return _table(rows)


def checker_verdict(config: MoEConfig) -> str:
    """``'2 errors (rule 1 host_mutation, rule 2 empty_argument)'``, or ``'clean'``."""
    found = findings(config)
    if not found:
        return "clean"
    parts = []
    for severity in (checker.ERROR, checker.WARNING):
        hits = [f for f in found if f.severity == severity]
        if hits:
            rules = ", ".join(dict.fromkeys(f"rule {f.rule} {f.code}" for f in hits))
            parts.append(f"{len(hits)} {severity}{'s' if len(hits) > 1 else ''} ({rules})")
    return "; ".join(parts)


def graph_pool_bytes(trace: Trace) -> int:
    """Bytes of the distinct blocks captures took from their graphs' private pools."""
    blocks: dict[int, int] = {}
    for a in trace.of(Alloc):
        if a.pool != "default":
            blocks[a.ptr] = max(blocks.get(a.ptr, 0), a.nbytes)
    return sum(blocks.values())


def _verdict_short(config: MoEConfig) -> str:
    found = findings(config)
    if scenario(config).graph is None and all(f.rule == 0 for f in found):   # rule 0: capture failed
        return "no graph"
    errors = sorted({f.rule for f in found if f.severity == checker.ERROR})
    warnings = sorted({f.rule for f in found if f.severity == checker.WARNING})
    parts = [f"err {','.join(map(str, errors))}"] if errors else []
    parts += [f"warn {','.join(map(str, warnings))}"] if warnings else []
    return " + ".join(parts) or "clean"


def fix_table(fixes: dict[str, MoEConfig], modes: Sequence[str] = SHARED_MODES) -> str:
    """Each fix in each shared mode: its verdict, and what the checker says.

    A cell reads ``verdict; checker``: the verdict as the glossary's badge
    (``correct``, ``unordered: a race``, ``silently wrong``, ``illegal address``,
    ``capture fails: <name>``), then ``clean`` or the checker's rules with
    ``err``/``warn`` findings (``no graph`` when the capture failed). The checker
    never runs the program: it reads the trace, so it also judges captures whose
    replays happened to come out right.
    """
    rows = [("fix", *modes)]
    for name, config in fixes.items():
        cells = []
        for mode in modes:
            c = config.with_(shared_mode=mode)
            cells.append(f"{badge(judged(c))}; {_verdict_short(c)}")
        rows.append((name, *cells))
    return ("shared expert consumes x as:\n" + _table(rows)
            + "\n(verdict; checker: err/warn = error/warning findings by rule number)")


def cost_table(fixes: dict[str, MoEConfig]) -> str:
    """What each fix costs: replay time, graph nodes, graph-pool memory.

    ``replay µs`` is the simulated device time of one captured decode step
    (the first replay, default ``Profile``); ``pool KiB`` is the memory the
    graph's private pool keeps for as long as the graph lives, which is what
    disposing early was meant to save.
    """
    rows = [("fix", "configuration", "replay µs", "graph nodes", "pool KiB")]
    for name, config in fixes.items():
        r = scenario(config)
        step_us = nodes = "-"
        if r.graph is not None:
            step_us = f"{replay_timing(r.trace, r.graph.id)[0]:.1f}"
            nodes = str(len(r.graph.nodes))
        rows.append((name, config.name, step_us, nodes,
                     f"{graph_pool_bytes(r.trace) / 1024:.0f}"))
    return _table(rows, right=(2, 3, 4))


def landmark_table(source: ScenarioResult, graph: int = 0) -> str:
    """The capture's landmarks, each with what the host did at that step."""
    marks = landmarks(source, graph)
    width = max(map(len, marks))
    return "\n".join(textwrap.fill(f"{name:<{width}}  {describe_step(source.trace, step)}", 100,
                                   subsequent_indent=" " * (width + 2))
                     for name, step in marks.items())


def print_error(error: BaseException, width: int = 100) -> None:
    """Print an exception's message wrapped to ``width`` (CUDA error name first)."""
    print(textwrap.fill(str(error), width, subsequent_indent="    "))


def status_lines(config: MoEConfig, step: int | None) -> list[str]:
    """What the explorer says under its controls: configuration, step, outcome, verdict."""
    r = scenario(config)
    first, last = capture_window(r.trace, r.graph.id if r.graph else 0)
    shown = last if step is None else step
    said = judged(config)
    lines = [f"{config.name}: "
             + (f"{UNORDERED}: {UNORDERED_MEANS}" if said == UNORDERED else words(said)),
             describe_step(r.trace, shown) + f"   (capture: steps {first}-{last})"]
    if r.replays:
        rp = r.replays[0]
        verdict = "matches eager" if rp.ok else \
            f"relative error {relative_error(rp.got, rp.want):.2f} against eager"
        lines.append(f"replay with fresh input {rp.input}: got {render(rp.got, 70)}  ({verdict})")
    elif r.error is not None:
        lines.append(textwrap.shorten(str(r.error), 160, placeholder=" …"))
    lines.append(f"checker: {checker_verdict(config)}")
    return lines


# ================================================================ pictures
class Picture:
    """A figure as a notebook shows it: a PNG, with the figure's takeaway as its text.

    ``simlib.tutorial.plots`` draws without Axes (for speed), and IPython's inline
    backend skips such figures, so notebooks wrap them: ``show(plots.timeline(trace))``.
    Where images do not render, the text form still says what the picture shows.
    """

    def __init__(self, fig: "Figure", dpi: float = 100) -> None:
        self.fig, self.dpi = fig, dpi

    def _repr_png_(self) -> bytes:
        return small_png(self.fig, self.dpi)

    def __repr__(self) -> str:
        return f"[picture] {figure_title(self.fig)}"


def show(fig: "Figure", dpi: float = 100) -> Picture:
    """Wrap a ``simlib.tutorial.plots`` figure so that a notebook cell displays it."""
    return Picture(fig, dpi)


def figure_title(fig: "Figure") -> str:
    """The takeaway sentence a ``simlib.tutorial.plots`` figure carries as its title."""
    for artist in fig.artists:
        if artist.get_gid() == "title":
            return " ".join(" ".join(artist.strings).split())
    return ""


def draw(config: MoEConfig, view: str = "pointers", step: int | None = None, *,
         fig: "Figure | None" = None) -> "Figure":
    """The explorer's picture of ``config`` at host ``step`` (into ``fig`` if given)."""
    from . import plots

    r = scenario(config)
    graph = r.graph.id if r.graph is not None else 0
    if view == "pointers":
        return plots.pointer_table(r.trace, graph=graph, step=step, fig=fig)
    if view == "graph":
        return plots.captured_graph(r, graph, step=step, fig=fig)
    raise ValueError(f"view={view!r} is not one of {VIEWS}")


# ================================================================ the explorer
def _allowed_values(control: Any) -> list[Any]:
    """The values a control takes: a toggle's options (the value of a ``(label, value)`` pair), or on/off."""
    if hasattr(control, "options"):
        return [o[1] if isinstance(o, tuple) else o for o in control.options]
    return [False, True]


class Explorer:
    """Controls that re-simulate the dual-stream MoE capture and redraw one picture.

    Attributes a test (or a reader) can inspect: ``config`` (the ``MoEConfig``
    the controls describe), ``step`` (host step shown; the slider spans the
    capture), ``view``, ``redraws`` (how many times it drew), ``redraw_ms``
    (how long each redraw took, simulation, drawing and PNG encoding included),
    ``figure`` (the figure of the current view), ``title`` (its takeaway),
    ``status`` (the lines under the controls) and ``box`` (the widget).
    """

    def __init__(self, config: MoEConfig | None = None, *, step: int | str | None = None,
                 view: str = "pointers", dpi: float = 100,
                 controls: Sequence[str] = ("order", "shared_mode", "dispose", "clone", "view")
                 ) -> None:
        import ipywidgets as w

        if view not in VIEWS:
            raise ValueError(f"view={view!r} is not one of {VIEWS}")
        self._base = config or MoEConfig()
        self.dpi = dpi
        self.redraws = 0
        self.redraw_ms: list[float] = []
        self._figures: dict[str, Figure] = {}
        self._png = b""
        self._quiet = False
        self._displayed: tuple[MoEConfig, str, int] | None = None   # what the output shows
        c = self._base
        style = {"description_width": "150px"}
        buttons = {"description_width": "150px", "button_width": "auto"}
        self.controls: dict[str, Any] = {
            "order": w.ToggleButtons(options=[("shared expert first", "shared_first"),
                                              ("routed experts first", "routed_first")],
                                     value=c.order, description="issue order", style=buttons),
            "shared_mode": w.ToggleButtons(options=list(SHARED_MODES), value=c.shared_mode,
                                           description="shared expert reads x", style=buttons),
            "dispose": w.ToggleButtons(options=list(DISPOSE_POLICIES), value=c.dispose,
                                       description="dispose_tensor", style=buttons),
            "clone": w.Checkbox(value=c.clone, description="shared branch reads a clone of x",
                                indent=False),
            "view": w.ToggleButtons(options=[("pointers over host steps", "pointers"),
                                             ("captured graph", "graph")],
                                    value=view, description="picture", style=buttons),
        }
        self.slider = w.IntSlider(description="host step", style=style, continuous_update=True,
                                  layout=w.Layout(width="70%"))
        self.play = w.Play(interval=600, description="play")
        w.jslink((self.play, "value"), (self.slider, "value"))
        self.status_html = w.HTML()
        self.image = w.Image(format="png", layout=w.Layout(max_width="100%", height="auto"))
        shown = [self.controls[name] for name in controls]
        self.box = w.VBox([*shown, w.HBox([self.play, self.slider]), self.status_html, self.image])
        self.box.explorer = self
        self._set_range(step)
        for name in self.controls:
            self.controls[name].observe(self._on_config, names="value")
        self.slider.observe(self._on_step, names="value")
        self.redraw()

    # -------------------------------------------------------------- state
    @property
    def config(self) -> MoEConfig:
        c = self.controls
        return self._base.with_(order=c["order"].value, shared_mode=c["shared_mode"].value,
                                dispose=c["dispose"].value, clone=c["clone"].value)

    @property
    def result(self) -> ScenarioResult:
        return scenario(self.config)

    @property
    def step(self) -> int:
        return self.slider.value

    @property
    def view(self) -> str:
        return self.controls["view"].value

    @property
    def figure(self) -> "Figure":
        return self._figures[self.view]

    @property
    def title(self) -> str:
        return figure_title(self.figure)

    @property
    def status(self) -> list[str]:
        return status_lines(self.config, self.step)

    @property
    def landmarks(self) -> dict[str, int]:
        r = self.result
        return landmarks(r, r.graph.id if r.graph else 0)

    # -------------------------------------------------------------- driving it
    def set(self, *, step: Any = "keep", **controls: Any) -> "Explorer":
        """Change controls from code (``ex.set(order="shared_first", step="dispose")``).

        ``step`` may be a host step, a ``landmarks`` name, ``None`` for the end
        of the capture, or left out to keep the current step (clamped to the
        new capture, as the slider does). One redraw, however many controls change.
        """
        unknown = set(controls) - set(self.controls)
        if unknown:
            raise ValueError(f"unknown control(s) {sorted(unknown)}; "
                             f"controls: {sorted(self.controls)}")
        for name, value in controls.items():   # all checked before any changes: no half-set explorer
            allowed = _allowed_values(self.controls[name])
            if value not in allowed or (isinstance(value, bool) != isinstance(allowed[0], bool)):
                raise ValueError(f"{name}={value!r} is not one of its values; "
                                 f"use one of {', '.join(map(repr, allowed))}")
        self._quiet = True
        try:
            for name, value in controls.items():
                self.controls[name].value = value
            self._set_range(self.step if step == "keep" else step)
        finally:
            self._quiet = False
        self.redraw()
        return self

    def _set_range(self, step: int | str | None) -> None:
        """Fit the slider to the current capture's host steps and place it at ``step``."""
        r = self.result
        first, last = capture_window(r.trace, r.graph.id if r.graph else 0)
        if isinstance(step, str):
            marks = landmarks(r, r.graph.id if r.graph else 0)
            if step not in marks:
                raise ValueError(f"step={step!r}: this capture has no such landmark; "
                                 f"it has {sorted(marks)}")
            step = marks[step]
        value = last if step is None else min(max(step, first), last)
        quiet, self._quiet = self._quiet, True
        try:
            for bounded in (self.slider, self.play):
                # Widen first, so that neither bound ever crosses the other.
                bounded.min, bounded.max = min(first, bounded.min), max(last, bounded.max)
                bounded.value = value
                bounded.min, bounded.max = first, last
        finally:
            self._quiet = quiet

    def _on_config(self, change: dict[str, Any]) -> None:
        if self._quiet:
            return
        self._quiet = True
        try:
            self._set_range(self.step)
        finally:
            self._quiet = False
        self.redraw()

    def _on_step(self, change: dict[str, Any]) -> None:
        if not self._quiet:
            self.redraw()

    def redraw(self) -> None:
        """Re-simulate (cached) and redraw the current view; time it."""
        t0 = time.perf_counter()
        view = self.view
        fig = draw(self.config, view, self.step, fig=self._figures.get(view))
        self._figures[view] = fig
        # The first picture is also what a saved notebook keeps in its widget state, so it
        # is encoded small; later redraws favour speed.
        self._png = png(fig, self.dpi) if self.redraws else small_png(fig, self.dpi)
        self.image.value = self._png
        self.status_html.value = _html(self.status)
        self.redraws += 1
        self.redraw_ms.append((time.perf_counter() - t0) * 1e3)

    # -------------------------------------------------------------- showing it
    def _view(self) -> tuple[MoEConfig, str, int]:
        return self.config, self.view, self.step

    def snapshot(self) -> None:
        """Print the current view's status; show its picture unless one already shows it.

        Displaying the explorer leaves one picture: the widget's, or where widgets
        do not run (GitHub, nbviewer, a saved page) the static copy in the same
        output. So the picture appears here only if the view changed since.
        """
        from IPython.display import display

        print("\n".join(textwrap.fill(line, 100, subsequent_indent="    ")
                        for line in self.status))
        if self._displayed != self._view():
            display(Picture(self.figure, dpi=self.dpi))

    def _ipython_display_(self) -> None:
        """The widget, with a static copy of its picture for front ends without widgets.

        A front end shows one of the two: JupyterLab and the HTML edition (which
        ranks the widget view first) the widget, others the PNG.
        """
        from IPython.display import display

        bundle = self.box._repr_mimebundle_()
        bundle["image/png"] = base64.b64encode(small_png(self.figure, self.dpi)).decode()
        bundle["text/plain"] = (f"[explorer: needs a running Python kernel] {self.config.name}, "
                                f"{self.view} at host step {self.step}: {self.title}")
        self._displayed = self._view()
        display(bundle, raw=True)

    def __repr__(self) -> str:
        return f"<Explorer {self.config.name} view={self.view} step={self.step}>"


def _html(lines: Sequence[str]) -> str:
    from html import escape

    body = "<br>".join(escape(line) for line in lines)
    return f"<div style='font-family:monospace;font-size:12px;line-height:1.4'>{body}</div>"


def dispose_bug_explorer(config: MoEConfig | None = None, *, step: int | str | None = None,
                         view: str = "pointers", **kwargs: Any) -> Explorer:
    """The explorer of notebook 03: display it (``.snapshot()`` prints what it shows).

    ``config`` sets the starting controls (default: the incident, routed
    experts first, shared expert writing into a static buffer); ``step`` a
    host step, a ``landmarks`` name or ``None`` (end of the capture).
    """
    return Explorer(config or MoEConfig(), step=step, view=view, **kwargs)


def fixes_explorer(config: MoEConfig | None = None, **kwargs: Any) -> Explorer:
    """The explorer of notebook 04: the captured graph at the end of capture, fixes first."""
    kwargs.setdefault("view", "graph")
    return Explorer(config or MoEConfig(dispose="skip_in_capture"),
                    controls=("dispose", "clone", "order", "shared_mode", "view"), **kwargs)
