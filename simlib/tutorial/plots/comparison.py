"""Two configurations side by side: each one's captured graph under its verdict's badge."""

from __future__ import annotations

import textwrap

from matplotlib.figure import Figure

from ...checker import check
from ...checker.verdict import races, verdict
from ...engine.values import render
from ...glossary import CAPTURE_ERROR_PREFIX, ILLEGAL_ADDRESS, UNORDERED, UNORDERED_MEANS, badge, term
from ...programs.scenarios import ScenarioResult
from .captured_graph import STREAMS_IN, draw_graph, graph_keys, graph_layout, graph_panel
from .kit import (
    MONO,
    PANEL_PT,
    TEXT_PT,
    Label,
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
from .palette import DANGER, ink
from .takeaways import comparison_takeaway


def _banner(result: ScenarioResult) -> tuple[str, list[tuple[str, str]], str]:
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
        details += [(line, "black") for line in textwrap.wrap(f"{UNORDERED}: {UNORDERED_MEANS}", 80)]
        details.append((f"checker: {rules}", "black"))
    return head, details, colour


def side_by_side(result_a: ScenarioResult, result_b: ScenarioResult, *,
                 takeaway: str | None = None, full_pointers: bool | None = None,
                 fig: Figure | None = None) -> Figure:
    """Two configurations' captured graphs under badges with each one's verdict.

    The badge is ``simlib.checker.verdict``'s: what the replays did, or ``unordered``
    where they came out right but the checker finds a race.
    """
    results = (result_a, result_b)
    layouts = [graph_layout(r.trace, r.graph.id if r.graph else 0, None, full_pointers)
               for r in results]
    banners = [_banner(r) for r in results]
    widths = [max(len(layout.streams), 1) for layout in layouts]
    column_pt = max(layout.extent()[0] for layout in layouts)
    level_pt = max(layout.extent()[1] for layout in layouts)
    levels = max(layout.levels for layout in layouts)
    lines = max(len(details) for _, details, _ in banners)
    width = max(13.0, column_pt / 72 * sum(widths) + 0.6)
    title = takeaway or comparison_takeaway(result_a, result_b)
    title_in, banner_in, legend_in = title_inches(title, width) + 0.1, 0.75 + lines * 14 / 72, 0.55
    spans = [0.96 * w / sum(widths) for w in widths]
    panel_title_pt = max(text_height(wrap(layout.title, (span - 0.02) * width * 72, PANEL_PT)
                                     .count("\n") + 1, PANEL_PT) + 20
                         for layout, span in zip(layouts, spans))
    graph_in = level_pt / 72 * levels + STREAMS_IN + panel_title_pt / 72
    height = title_in + banner_in + graph_in + legend_in
    fig = fresh_figure(fig, (width, height))
    left = 0.02
    drawn: set[str] = set()
    for result, banner, layout, span in zip(results, banners, layouts, spans):
        _draw_banner(fig, result.config.name, banner, left + span / 2, 1 - title_in / height)
        rect = (left + 0.01, legend_in / height, span - 0.02,
                (graph_in - panel_title_pt / 72) / height)
        p = graph_panel(fig, rect, layout, level_pt)
        drawn |= draw_graph(p, layout)
        p.title(layout.title)
        left += span
    draw_title(fig, title)
    draw_legend(fig, graph_keys(drawn), 0.03, 0.62 * legend_in / height, width=0.94)
    return fig


def _draw_banner(fig: Figure, name: str, banner: tuple[str, list[tuple[str, str]], str],
                 x: float, top: float) -> None:
    head, details, colour = banner
    pt = 1 / (fig.get_figheight() * 72)
    y_head = top - 28 * pt
    draw_shapes(fig, [box_path(text_width(head, 13, weight="bold"), 13, pad=5)], [(x, y_head)],
                fig.transFigure, gid="banner-box", facecolors=colour, edgecolors="none")
    labels = [Label(x, top, name, 11, family=MONO, va="top"),
              Label(x, y_head, head, 13, ink(colour), "bold")]
    labels += [Label(x, y_head - (28 + 14 * i) * pt, text, TEXT_PT, c, family=MONO)
               for i, (text, c) in enumerate(details)]
    draw_labels(fig, labels, fig.transFigure, gid="banner")
