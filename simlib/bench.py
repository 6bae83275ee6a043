"""Speed benchmark of the simulator: ``python -m simlib.bench``.

Prints a table, then as its last line one JSON object with the figures the
project tracks (targets in parentheses):

us_per_launch_1k/10k/100k   eager run + capture + one replay, per launch, for
                            programs of 1k, 10k and 100k launches (< 20 µs, flat)
decode_step_61_layers_s     a 61-layer MoE decode step built, warmed up, captured,
                            replayed, checked and exported to Perfetto JSON (< 0.2 s)
widget_redraw_ms            a 1-layer scenario re-simulated and its timeline, captured
                            graph and pointer table redrawn, median (< 150 ms)

Like ``timeit``, the timed runs pause Python's cyclic garbage collector: its
full collections scan every live object, so with GC on the cost per launch
grows with the size of the trace a run keeps, which measures the interpreter,
not the simulator. Each figure is the best of several runs.
"""

from __future__ import annotations

import gc
import json
import statistics
import sys
import time
from typing import Callable

from .checker import check
from .engine.runtime import Runtime
from .export import to_chrome_trace
from .programs.scenarios import run as run_scenario
from .programs.spec import ORDERS, MoEConfig


def _timed(fn: Callable[[], object]) -> float:
    """Seconds one call of ``fn`` takes, with the cyclic GC paused (as timeit does)."""
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0
    finally:
        if enabled:
            gc.enable()


def _launch_chain(n: int) -> None:
    """Run n/2 launches eagerly, capture n/2 more (with a fork/join every 64), replay them."""
    rt = Runtime()
    main, alt = rt.Stream("main"), rt.Stream("alt")
    with rt.stream(main):
        x = rt.from_host((16, 512), "x", value="x1")
        a = rt.empty((16, 512), "a")
        b = rt.empty((16, 512), "b")
        for i in range(n // 2 - 1):
            rt.launch("k", reads=[x if i % 2 == 0 else a], writes=[a if i % 2 == 0 else b])
        with rt.graph(main, inputs=[x]) as g:
            for i in range(n // 2):
                if i % 64 == 0:
                    alt.wait_stream(main)
                    with rt.stream(alt):
                        rt.launch("side", reads=[x], writes=[b])
                    main.wait_stream(alt)
                else:
                    rt.launch("k", reads=[x if i % 2 == 0 else a], writes=[a if i % 2 == 0 else b])
        g.replay()
        rt.read(a)


def _decode_step_61_layers() -> None:
    result = run_scenario(MoEConfig(layers=61, replays=1))
    check(result.trace)
    to_chrome_trace(result.trace)


def _widget_redraw_ms(repeats: int = 15) -> float:
    """What one move of a tutorial control costs: simulate, then redraw three pictures."""
    import matplotlib
    matplotlib.use("Agg")
    from .tutorial import plots

    figs: dict[str, object] = {}
    samples = []
    for i in range(repeats + 1):
        t0 = time.perf_counter()
        result = run_scenario(MoEConfig(order=ORDERS[i % 2]))
        step = result.trace.records[-1].step * (i + 1) // (repeats + 1)
        for name, draw in (("timeline", lambda f: plots.timeline(result.trace, step=step, fig=f)),
                           ("graph", lambda f: plots.captured_graph(result, step=step, fig=f)),
                           ("pointers", lambda f: plots.pointer_table(result.trace, step=step, fig=f))):
            figs[name] = fig = draw(figs.get(name))
            fig.canvas.draw()
        if i:                       # the first pass fills matplotlib's caches
            samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples)


def run() -> dict[str, float]:
    figures: dict[str, float] = {}
    for label, n in (("1k", 1_000), ("10k", 10_000), ("100k", 100_000)):
        seconds = min(_timed(lambda: _launch_chain(n)) for _ in range(7 if n <= 10_000 else 3))
        figures[f"us_per_launch_{label}"] = round(seconds / n * 1e6, 2)
    figures["decode_step_61_layers_s"] = round(min(_timed(_decode_step_61_layers) for _ in range(3)), 3)
    figures["widget_redraw_ms"] = round(_widget_redraw_ms(), 1)
    return figures


def main() -> int:
    figures = run()
    width = max(map(len, figures))
    for name, value in figures.items():
        print(f"{name:<{width}}  {value:>10}")
    print(json.dumps(figures, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
