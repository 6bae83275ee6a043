"""What ``capture_order_check.pth`` adds to every Python start when ``CAPTURE_ORDER_CHECK=1`` is set.

    python benchmarks/pth_startup_cost.py --out benchmarks/results/pth-startup-cost.json
    python benchmarks/pth_startup_cost.py --summary     # docs/benchmarks.md's block, from that file

The .pth runs in every interpreter of the environment, most of which never import torch (pip,
Jupyter, a build step). Each repeat starts ``python -c pass`` in a fresh process twice, with the
variable unset and set, alternating; the cost is the difference of the medians (target: under
0.2 s). It also asks one such process whether torch was imported at start-up. Where the running
interpreter has no .pth in its site-packages (an editable install), both sides run ``import site;
site.addsitedir(FOLDER)`` over a folder holding a copy of it: Python processes that folder's .pth
files as it does site-packages'. Any machine; writes JSON with provenance.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from machine_provenance import hand_back, provenance

ROOT = Path(__file__).resolve().parents[1]
PTH = "capture_order_check.pth"
RESULTS = ROOT / "benchmarks" / "results" / "pth-startup-cost.json"
TARGET_S = 0.2


def program(site_folder: str | None, body: str) -> list[str]:
    """``python -c body``, processing ``site_folder``'s .pth files first where one is given."""
    head = f"import site; site.addsitedir({site_folder!r}); " if site_folder else ""
    return [sys.executable, "-c", head + body]


def start_s(argv: list[str], env: dict[str, str]) -> float:
    began = time.perf_counter()
    subprocess.run(argv, env=env, check=True)
    return time.perf_counter() - began


def measure(repeats: int, site_folder: str | None) -> dict:
    off = {k: v for k, v in os.environ.items() if k != "CAPTURE_ORDER_CHECK"}
    on = {**off, "CAPTURE_ORDER_CHECK": "1"}
    argv = program(site_folder, "pass")
    start_s(argv, off), start_s(argv, on)   # warm the file cache first
    unset, checked = [], []
    for _ in range(repeats):
        unset.append(start_s(argv, off))
        checked.append(start_s(argv, on))
    probe = program(site_folder, "import sys; print('torch' in sys.modules)")
    torch_at_start = subprocess.run(probe, env=on, capture_output=True, text=True, check=True).stdout.strip()
    cost = statistics.median(checked) - statistics.median(unset)
    return {"unset_s": unset, "checked_s": checked, "cost_s": cost, "target_s": TARGET_S,
            "within_target": cost < TARGET_S, "torch_imported_at_start": torch_at_start == "True",
            "pth": "site-packages" if site_folder is None else "site.addsitedir (no .pth in site-packages)"}


def summary(results: dict) -> str:
    """The Markdown block docs/benchmarks.md quotes."""
    p = results["provenance"]
    verdict = "within the target" if results["within_target"] else "over the target"
    return (f"On {p['machine']} (Python {p['python']}, {p['date_utc'][:10]}, commit {p['commit'][:10]}; `{p['command']}`): "
            f"`python -c pass` took {statistics.median(results['unset_s']):.3f} s without the variable and "
            f"{statistics.median(results['checked_s']):.3f} s with `CAPTURE_ORDER_CHECK=1` (medians of "
            f"{len(results['unset_s'])} fresh processes each): {results['cost_s']:.3f} s more, {verdict} of "
            f"{results['target_s']} s; torch imported at start-up: {'yes' if results['torch_imported_at_start'] else 'no'}.")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=20, help="fresh processes per side (default: 20)")
    parser.add_argument("--out", type=Path, help="write the results as JSON, with provenance")
    parser.add_argument("--summary", action="store_true", help=f"print the docs' block from {RESULTS.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    if args.summary:
        print(summary(json.loads(RESULTS.read_text())))
        return 0
    if args.out is not None and not args.out.parent.is_dir():
        parser.error(f"--out {args.out}: no folder {args.out.parent}")
    installed = Path(sysconfig.get_paths()["purelib"], PTH).exists()
    with tempfile.TemporaryDirectory() as folder:
        if not installed:
            shutil.copy(ROOT / PTH, folder)
        results = {"provenance": provenance(), **measure(args.repeats, None if installed else folder)}
    return hand_back(results, summary, args.out)


if __name__ == "__main__":
    sys.exit(main())
