"""The tutorial's interactive explorer: controls that re-simulate the MoE step and redraw it.

``dispose_bug_explorer(...)`` builds ipywidgets controls (issue order, how the
shared expert consumes its input, the dispose policy, a clone checkbox, which
picture, and a slider over the host steps of the capture) that re-simulate
and redraw the MoE decode step. Scenario runs are cached per configuration
(``simulated``) and one matplotlib ``Figure`` per picture is reused (``fig=``), so a
redraw is a cache lookup, a redraw into an existing figure and one PNG encoding.

Every piece of state a test or a curious reader wants is a plain attribute of
the returned ``Explorer``: ``config``, ``step``, ``view``, ``redraws``,
``redraw_ms``, ``figure``, ``title``, ``status``, and ``box`` (the widget).
Displayed, an ``Explorer`` carries a static PNG of its view beside the widget,
so a notebook shows one picture where widgets run and where they do not
(GitHub, nbviewer); ``Explorer.snapshot()`` prints the view's status, and its
picture only once the view has changed since. ipywidgets, IPython and matplotlib
are imported inside the functions that need them: ``import simlib.tutorial.explorer``
works without any of them.
"""

from __future__ import annotations

import base64
import textwrap
import time
from typing import TYPE_CHECKING, Any, Sequence

from ..engine.values import relative_error, render
from ..glossary import UNORDERED, UNORDERED_MEANS, words
from ..programs.scenarios import ScenarioResult
from ..programs.spec import DISPOSE_POLICIES, SHARED_MODES, MoEConfig
from .describe import capture_window, describe_step, landmarks
from .pictures import Picture, figure_title, png, small_png
from .simulated import judged, scenario
from .tables import checker_verdict

if TYPE_CHECKING:
    from matplotlib.figure import Figure

VIEWS = ("pointers", "graph")


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
