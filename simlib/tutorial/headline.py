"""The headline comparison: the picture the README opens with, and the measured table of docs/results.md.

``write_headline(out_dir)`` runs the incident both ways (shared expert issued
first, routed experts first; the shared expert writing into a static buffer,
the silent failure of the measured table), saves their side-by-side picture,
and tabulates the simulator's outcome for every cell of docs/results.md's measured
H200 table next to a real GPU's, when the caller names ``gpu_demo``'s recorded
matrix (``python -m simlib headline --gpu-results FILE``). The returned
text holds no wall-clock time and no address, so it is the same on every run.
"""

from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..checker import check
from ..checker.verdict import races, verdict
from ..engine.values import render
from ..glossary import term, words
from ..programs.scenarios import ScenarioResult, run
from ..programs.spec import ORDERS, SHARED_MODES, MoEConfig
from .gpu_results import GpuResults, load_gpu_results
from .pictures import small_png

HEADLINE = MoEConfig(shared_mode="static_buffer")   # the silent row; order varies


@dataclass(frozen=True)
class Judged:
    """One simulated configuration: its verdict, its replays' outcome and the races found."""

    result: ScenarioResult
    verdict: str
    races: tuple[str, ...]        # "rule 4 (reuse_after_free) on 'x'"

    @property
    def cell(self) -> str:
        """The table cell: the verdict, and for ``unordered`` what the replays showed and why."""
        if self.verdict == self.result.outcome:
            return f"`{self.verdict}`"
        return (f"`{self.verdict}` (replays {words(self.result.outcome)}; "
                f"checker: {', '.join(self.races)})")


def judge(config: MoEConfig) -> Judged:
    """Simulate ``config`` and give its verdict."""
    result = run(config)
    findings = check(result.trace)
    found = tuple(dict.fromkeys(f"rule {f.rule} ({f.code}) on {f.label!r}" for f in races(findings)))
    return Judged(result, verdict(result.outcome, findings), found)


def design_rows(gpu: GpuResults | None) -> list[dict[str, Any]]:
    """One row per cell of docs/results.md's measured 3x2 table (shared mode x order).

    ``simulator`` is the verdict, ``replays`` what the simulated replays did,
    ``races`` the checker's race findings, ``gpu`` the recorded GPU outcome.
    """
    rows = []
    for mode in SHARED_MODES:
        for order in ORDERS:
            config = HEADLINE.with_(shared_mode=mode, order=order)
            judged = judge(config)
            rows.append({"shared_mode": mode, "order": order, "config": config.to_dict(),
                         "simulator": judged.verdict, "replays": judged.result.outcome,
                         "races": list(judged.races), "cell": judged.cell,
                         "gpu": gpu.outcomes.get(config) if gpu else None})
    return rows


def _markdown_table(rows: list[dict[str, Any]], gpu: GpuResults | None) -> str:
    head = ["shared expert consumes x", "issue order", "simulator"]
    if gpu:
        head.append(f"GPU ({gpu.provenance})")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["shared_mode"], r["order"], r["cell"]]
        if gpu:
            cells.append(f"`{r['gpu']}`" if r["gpu"] else "not run")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _expressions(judged: Judged) -> list[str]:
    result = judged.result
    lines = [f"{result.config.name}: {judged.verdict}"]
    if judged.races:
        lines += textwrap.wrap(f"{term(judged.verdict).meaning} (checker: {', '.join(judged.races)})",
                               86, initial_indent="  ", subsequent_indent="  ")
    if result.replays:
        r = result.replays[0]
        lines.append(f"  replay with fresh input {r.input}")
        lines.append(f"    got:  {render(r.got)}")
        lines.append(f"    want: {render(r.want)}")
    return lines


def write_headline(out_dir: Path, *, gpu_results: Path | None = None) -> str:
    """Save ``headline.png``, ``headline.md`` and ``headline.json`` under ``out_dir``; return the summary.

    ``gpu_results`` is the GPU's matrix file (``matrix-h200.json``) for the table's GPU column.
    """
    from . import plots  # here, not at the top: importing simlib must not import matplotlib

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    judged = [judge(HEADLINE.with_(order=order)) for order in ORDERS]
    (out_dir / "headline.png").write_bytes(small_png(plots.side_by_side(*(j.result for j in judged)),
                                                     dpi=110))

    gpu = load_gpu_results(gpu_results) if gpu_results is not None else None
    rows = design_rows(gpu)
    table = _markdown_table(rows, gpu)
    missing = f"no {gpu_results.name}" if gpu_results is not None else "none given"
    gpu_note = (f"GPU column: {gpu.path.name} ({gpu.provenance})." if gpu else
                f"No GPU results are recorded yet ({missing}); "
                "`python -m gpu_demo run --matrix` on a CUDA machine records them.")
    lead = ("The same dual-stream MoE decode step, captured as a CUDA graph with the shared "
            "expert issued first and with the routed experts issued first. Only the host's "
            "issue order differs.")
    expressions = [line for j in judged for line in _expressions(j)]
    markdown = "\n".join([
        "# Headline: host order decides what a CUDA graph captures", "", lead, "",
        "![shared first versus routed first](headline.png)", "", "```", *expressions, "```", "",
        "## The measured H200 table (docs/results.md), cell by cell", "", table, "", gpu_note, ""])
    (out_dir / "headline.md").write_text(markdown)
    (out_dir / "headline.json").write_text(json.dumps(
        {"headline": [{"config": j.result.config.to_dict(), "verdict": j.verdict,
                       "replays": j.result.outcome, "races": list(j.races)} for j in judged],
         "design_table": rows, "gpu_provenance": gpu.provenance if gpu else None},
        indent=1, sort_keys=True) + "\n")

    written = ", ".join(str(out_dir / name) for name in
                        ("headline.png", "headline.md", "headline.json"))
    return "\n".join([textwrap.fill(lead, 88), "", *expressions, "", table, "",
                      textwrap.fill(gpu_note, 88), "", f"wrote {written}"])
