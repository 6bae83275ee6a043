"""The notebooks' tables, as text: launches, the measured GPU table, outcomes, fixes and their costs.

Each table is a few lines of fixed-width text, the same on every run, so a notebook's saved
output is checked as it is (nbval). The simulated cells come from ``simulated``'s caches.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Sequence

from .. import checker
from ..checker.rules import CAPTURE_FAILED
from ..engine.values import relative_error
from ..glossary import UNORDERED, UNORDERED_MEANS, badge
from ..programs.latency import replay_timing
from ..programs.predictions import agrees, possible_outcomes
from ..programs.spec import ORDERS, SHARED_MODES, MoEConfig
from ..trace import Alloc, DeviceSpan, Launch, Trace
from .gpu_results import load_gpu_results
from .simulated import findings, judged, scenario

_ORDER_WORDS = {"shared_first": "shared expert issued first",
                "routed_first": "routed experts issued first"}


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
    lines.append(f"{'file':<13} {'/'.join(path.parts[-3:])}")   # gpu_demo/lab/results/matrix-h200.json
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
    if scenario(config).graph is None and all(f.rule == CAPTURE_FAILED.number for f in found):
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
