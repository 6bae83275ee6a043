"""What the two installs cost on this machine: time and size of a fresh virtual environment.

    python3 benchmarks/install_cost.py --out benchmarks/results/install-cost.json   # minutes
    python3 benchmarks/install_cost.py --summary     # the README's block, from that file

Runs the Makefile's own recipes into two new folders (``make install VENV=...``, the learner's,
and the tests' stamp target ``VENV=...``), never into ``.venv``, and records for each the wall
time, the folder's size, the torch it holds (a CUDA build pulls ``nvidia-*`` packages), and
whether a test or lint tool came with it. Run it with the machine otherwise idle: the time is
pip's downloads and unpacking. Writes JSON with provenance.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine_provenance import hand_back, provenance

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "install-cost.json"
TOOLS = ("pytest", "ruff", "playwright", "transformers", "timm")


def size_mb(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink()) // 2**20


def packages(venv: Path) -> dict[str, str]:
    listed = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "list", "--format=json"],
                            capture_output=True, text=True, check=True).stdout
    return {p["name"].lower(): p["version"] for p in json.loads(listed)}


def install(target: str, venv: Path) -> dict:
    """Run ``make target VENV=venv`` in a fresh folder; what it cost and what it installed."""
    began = time.perf_counter()
    done = subprocess.run(["make", "--no-print-directory", target, f"VENV={venv}"], cwd=ROOT,
                          capture_output=True, text=True)
    seconds = time.perf_counter() - began
    if done.returncode != 0:
        raise SystemExit(f"make {target} failed ({done.returncode}): {done.stderr.strip().splitlines()[-1:]}")
    have = packages(venv)
    return {"seconds": round(seconds, 1), "size_mb": size_mb(venv), "torch": have.get("torch"),
            "nvidia_packages": sorted(n for n in have if n.startswith("nvidia-")),
            "test_tools": sorted(n for n in TOOLS if n in have),
            "said": [line for line in done.stdout.splitlines() if line.startswith("torch: ")]}


def tester_stamp(venv: Path) -> str:
    """The Makefile's stamp of the tests' install, keyed by pyproject.toml's ``cksum``."""
    ck = subprocess.run(["cksum", "pyproject.toml"], cwd=ROOT, capture_output=True, text=True, check=True)
    return f"{venv}/.tester-{ck.stdout.split()[0]}"


def summary(results: dict) -> str:
    p = results["provenance"]
    rows = ["| install | fresh `.venv` | time | torch | test and lint tools |", "|---|---|---|---|---|"]
    for name, r in (("learner's (`make tutorial`)", results["learner"]), ("tests' (`make test`)", results["tests"])):
        torch = f"{r['torch']}" + (f" ({len(r['nvidia_packages'])} `nvidia-*` packages)" if r["nvidia_packages"] else "")
        rows.append(f"| {name} | {r['size_mb']:,} MB | {r['seconds']:.0f} s | {torch or 'none'} | "
                    f"{', '.join(r['test_tools']) or 'none'} |")
    return "\n".join([f"On {p['machine']} (Python {p['python']}, {p['date_utc'][:10]}; `{p['command']}`):", "", *rows])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="write the results as JSON, with provenance")
    parser.add_argument("--summary", action="store_true", help=f"print the README's block from {RESULTS.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    if args.summary:
        print(summary(json.loads(RESULTS.read_text())))
        return 0
    if args.out is not None and not args.out.parent.is_dir():
        parser.error(f"--out {args.out}: no folder {args.out.parent}")
    if shutil.which("make") is None:
        parser.error("needs make")
    with tempfile.TemporaryDirectory(prefix="install-cost-") as folder:
        learner, tests = Path(folder, "learner"), Path(folder, "tests")
        results = {"provenance": provenance(), "learner": install("install", learner),
                   "tests": install(tester_stamp(tests), tests)}
    return hand_back(results, summary, args.out)


if __name__ == "__main__":
    sys.exit(main())
