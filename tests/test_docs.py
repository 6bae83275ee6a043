"""The front page stays a front page: short, every page and file it links there, every command it
shows runs (or says why it cannot run here), and the measured figures it quotes are the committed runs'."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def load(script: str, monkeypatch: pytest.MonkeyPatch):
    """A benchmark script as a module (benchmarks/ is no package: its scripts import each other
    as ``python benchmarks/x.py`` lets them)."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location(Path(script).stem, ROOT / script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def anchors(page: Path) -> set[str]:
    """GitHub's anchors for the page's headings: lower case, punctuation dropped, spaces to hyphens."""
    headings = re.findall(r"^#+ (.+)$", page.read_text(), re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_the_readme_is_under_200_lines():
    lines = README.read_text().count("\n")
    assert lines < 200, f"README.md has {lines} lines: move the detail to a page under docs/"


def test_the_readme_maps_every_page_under_docs():
    text = README.read_text()
    unlinked = [p.name for p in PAGES[1:] if f"(docs/{p.name})" not in text]
    assert not unlinked, f"README.md's map of the docs leaves out {unlinked}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_local_link_and_anchor_exists(page):
    broken = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(target)
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)} links to what is not there: {broken}"


def test_the_incident_threads_are_linked_from_the_readme_and_notebook_00():
    overview = (ROOT / "notebooks" / "00-overview.ipynb").read_text()
    for number in (29142, 29452, 29463):
        url = f"https://github.com/sgl-project/sglang/pull/{number}"
        assert url in README.read_text() and url in overview, number
    for notebook in sorted((ROOT / "notebooks").glob("0*.ipynb")):
        assert f"]({notebook.name})" in overview or notebook.name == "00-overview.ipynb", notebook.name


def shown_commands() -> list[str]:
    """Every line of the README's bash blocks, its comment cut off."""
    blocks = re.findall(r"```bash\n(.*?)```", README.read_text(), re.DOTALL)
    return [line.split("  #", 1)[0].strip() for block in blocks for line in block.splitlines() if line.strip()]


MY_LAYERS = textwrap.dedent("""
    import torch

    def make(device, dtype):
        layer = torch.nn.Linear(16, 16).to(device=device, dtype=dtype)
        return layer, (torch.randn(4, 16, device=device, dtype=dtype),)
""")
MY_SERVER = textwrap.dedent("""
    import torch
    from gpu_demo.guard.process import process_checker

    print("served", torch.nn.Linear(4, 4)(torch.randn(2, 4)).shape, "checked", process_checker() is not None)
""")

# Each command the README shows is run below on a stand-in for the reader's code, or says here why not.
NOT_RUN = {
    "make tutorial": "tests/test_install.py dry-runs its recipe; CI's .ci/run runs make test, the same install and more",
    "make test": "CI's .ci/run runs it; tests/test_install.py dry-runs its recipe",
    'python3 -m pytest tests -m "not browser" -o addopts= -q -p no:cacheprovider -n 4':
        "the suite itself: scripts/check_gpu_install.py runs it on a GPU seat",
}


def test_every_command_the_readme_shows_is_run_by_this_test_or_says_why_not():
    handled = {"python -m gpu_demo check mypkg.layers:make",
               "CAPTURE_ORDER_CHECK=1 python my_server.py", *NOT_RUN}
    assert set(shown_commands()) == handled, "a command the README shows has no way of being checked here"


@pytest.fixture
def readers_code(tmp_path) -> dict[str, str]:
    """The reader's package and server of the README's examples, written as stand-ins."""
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "layers.py").write_text(MY_LAYERS)
    (tmp_path / "my_server.py").write_text(MY_SERVER)
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])}


def test_the_readmes_check_command_answers_on_this_machine(readers_code, tmp_path):
    torch = pytest.importorskip("torch")
    done = subprocess.run([sys.executable, "-m", "gpu_demo", "check", "mypkg.layers:make"], cwd=tmp_path,
                          env=readers_code, capture_output=True, text=True, timeout=600)
    # 0: passed on a GPU; 4: NOT CHECKED ON A GPU, a CPU dry run only (gpu: the same line passes there).
    assert done.returncode == (0 if torch.cuda.is_available() else 4), done.stdout + done.stderr


def test_the_readmes_whole_process_command_checks_the_program(readers_code, tmp_path):
    pytest.importorskip("torch")
    if not Path(sysconfig.get_paths()["purelib"], "capture_order_check.pth").exists():
        pytest.skip("no capture_order_check.pth in this environment's site-packages (make puts it there)")
    done = subprocess.run([sys.executable, "my_server.py"], cwd=tmp_path,
                          env={**readers_code, "CAPTURE_ORDER_CHECK": "1"}, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "served torch.Size([2, 4]) checked True" in done.stdout, done.stderr


@pytest.mark.parametrize("page, script, mark", [
    ("README.md", "benchmarks/install_cost.py", "install"),
    ("docs/benchmarks.md", "benchmarks/pth_startup_cost.py", "pth"),
])
def test_the_quoted_measurements_are_the_committed_runs(page, script, mark, monkeypatch):
    text = (ROOT / page).read_text()
    start = text.index(f"<!-- {mark}:start")
    quoted = text[start:text.index(f"<!-- {mark}:end -->")].split("\n", 1)[1].strip()
    module = load(script, monkeypatch)
    assert quoted == module.summary(json.loads(module.RESULTS.read_text())).strip(), (
        f"{page}'s {mark} block is stale: paste the output of `python3 {script} --summary`")
