"""Install a GPU seat exactly as the instructor guide says, then run the README's test command.

    python3 scripts/check_gpu_install.py --out "$OUT/seat-h200.json"

The commands are read from the documents themselves, not copied here, so what this
checks is what a reader is told: the first ``bash`` block after the guide's
**GPU seats** paragraph (install next to the seat's own torch, offline), and the block
after the README's **The test command for a seat without `make`**. It runs them from
the repository root, then checks from outside the repository, without ``PYTHONPATH``,
that the install took and that ``CAPTURE_ORDER_CHECK=1`` reaches ``gpu_demo.autocheck``
(the ``.pth`` copy). It writes what each step printed last and its exit status, the
test summary line, and the provenance (GPU, driver, torch, date, command) as JSON.
Exit status: 0 when every step succeeded, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "notebooks" / "INSTRUCTOR-GUIDE.md"
README = ROOT / "README.md"
GUIDE_MARK = "**GPU seats**"
README_MARK = "**The test command for a seat without `make`**"
TAIL = 4000   # characters of each step's output kept in the JSON


def bash_block(document: Path, mark: str) -> str:
    """The first ```bash block after ``mark`` in ``document``."""
    text = document.read_text()
    if mark not in text:
        raise SystemExit(f"check_gpu_install: {document.name} has no {mark!r}; the commands to check are found by it")
    found = re.search(r"```bash\n(.*?)```", text[text.index(mark):], re.DOTALL)
    if found is None:
        raise SystemExit(f"check_gpu_install: no ```bash block after {mark!r} in {document.name}")
    return found.group(1)


def run(script: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 200) -> dict[str, Any]:
    """Run ``script`` in bash (stopping at the first failing line); its status and output's tail."""
    try:
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=cwd, env=env, timeout=timeout,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return {"script": script, "rc": None, "timed_out_s": timeout, "output_tail": out[-TAIL:]}
    return {"script": script, "rc": done.returncode, "output_tail": done.stdout[-TAIL:]}


def pytest_summary(output: str) -> str | None:
    """pytest's last line of counts ("957 passed, 27 skipped in 63.08s")."""
    lines = [line.strip("= ") for line in output.splitlines() if re.search(r"\d+ (passed|failed|error)", line)]
    return lines[-1] if lines else None


def outside_checks() -> dict[str, Any]:
    """From a folder outside the repository and without PYTHONPATH: the installed project and its .pth."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    probe = ("import sys; loaded = 'gpu_demo.autocheck' in sys.modules; import simlib, gpu_demo; "
             "print(simlib.__file__); print('autocheck loaded at start-up:', loaded)")
    with tempfile.TemporaryDirectory() as away:
        plain = run(f"{shlex.quote(sys.executable)} -c {shlex.quote(probe)}", Path(away), env)
        checked = run(f"CAPTURE_ORDER_CHECK=1 {shlex.quote(sys.executable)} -c {shlex.quote(probe)}", Path(away), env)
    return {"import_without_pythonpath": plain, "capture_order_check_1": checked,
            "autocheck_loaded": "autocheck loaded at start-up: True" in checked["output_tail"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, metavar="FILE.json", help="where the JSON goes")
    args = parser.parse_args(argv)
    install = run(bash_block(GUIDE, GUIDE_MARK), ROOT)
    tests = run(bash_block(README, README_MARK), ROOT, timeout=210) if install["rc"] == 0 else None
    outside = outside_checks() if install["rc"] == 0 else None
    # An install made by this process is seen only by the interpreters it starts, not by itself:
    # the provenance comes from the checkout this script belongs to.
    sys.path.insert(0, str(ROOT))
    from gpu_demo.lab.measure.provenance import provenance

    command = shlex.join(["python3", "scripts/check_gpu_install.py", *(sys.argv[1:] if argv is None else argv)])
    record = {"provenance": {**provenance([]), "command": command},
              "install_as_the_guide_says": install,
              "readme_test_command": tests and {**tests, "summary": pytest_summary(tests["output_tail"])},
              "after_install": outside}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    ok = install["rc"] == 0 and tests is not None and tests["rc"] == 0 and bool(outside and outside["autocheck_loaded"])
    summary = record["readme_test_command"]["summary"] if tests else "not run"
    print(f"install: rc={install['rc']}; tests: {summary}; CAPTURE_ORDER_CHECK=1 reaches autocheck: "
          f"{outside and outside['autocheck_loaded']}; wrote {args.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
