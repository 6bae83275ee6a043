"""The .pth's start-up hook: nothing heavy until the program imports torch, then the check at once."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_demo.guard import startup

REPO = Path(__file__).resolve().parents[3]


def python_with_the_pth(tmp_path: Path, body: str, value: str = "1") -> subprocess.CompletedProcess:
    """``python -c body`` in a fresh process that processed the repository's .pth at start-up,
    as site-packages would have it, with ``CAPTURE_ORDER_CHECK=value``."""
    folder = tmp_path / "site"
    folder.mkdir(exist_ok=True)
    shutil.copy(REPO / "capture_order_check.pth", folder)
    env = {**os.environ, "CAPTURE_ORDER_CHECK": value, "PYTHONPATH": str(REPO)}
    code = f"import site; site.addsitedir({str(folder)!r}); {body}"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)


def test_the_hook_imports_neither_torch_nor_the_check_at_start_up(tmp_path):
    done = python_with_the_pth(tmp_path, "import sys; print(sorted(m for m in sys.modules if m.split('.')[0] in "
                                         "('torch', 'simlib') or m == 'gpu_demo.guard.process'))")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_check_starts_when_the_program_imports_torch(tmp_path):
    pytest.importorskip("torch")
    done = python_with_the_pth(tmp_path, "import torch.nn; from gpu_demo.guard.process import process_checker; "
                                         "print(process_checker() is not None)")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"


def test_a_bad_value_says_so_in_one_line_and_the_program_runs(tmp_path):
    done = python_with_the_pth(tmp_path, "print('ran')", value="yes")
    assert done.stdout.strip() == "ran"
    assert done.stderr.strip().splitlines() == [
        "capture-order check is off: CAPTURE_ORDER_CHECK='yes' is not one of 1, warn, strict (or 0 for off)"]


def test_the_finder_runs_its_callback_once_after_the_module_has_run(tmp_path, monkeypatch):
    (tmp_path / "late_module.py").write_text("VALUE = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    finder = startup.AfterImport("late_module", lambda: seen.append(sys.modules["late_module"].VALUE))
    monkeypatch.setattr(sys, "meta_path", [finder, *sys.meta_path])
    import late_module  # noqa: F401

    assert seen == [42] and finder not in sys.meta_path
    monkeypatch.delitem(sys.modules, "late_module")
