"""The package tree is the architecture: no import circle, and every import goes down a floor.

Every import is counted, including those inside functions (a deferred import
can hide a circle, not remove it); only imports under ``if TYPE_CHECKING:``
are left out, since they never run.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("simlib", "gpu_demo")

# Floors, lowest first: a module may import its own floor and those below, never above.
FLOORS = [
    ("simlib",),
    ("gpu_demo.results",),                  # the recorded GPU results: json and pathlib, no torch
    ("gpu_demo.protocol",),
    ("gpu_demo.record",),
    ("gpu_demo.guard", "gpu_demo.autocheck"),
    ("gpu_demo",),                          # the package's public surface: guard and record
    ("gpu_demo.corpus", "gpu_demo.zoo"),    # plain-PyTorch programs and real models; runners use the guard
    ("gpu_demo.moe",),
    ("gpu_demo.distributed",),              # the tensor-parallel MoE and the guard under torchrun
    ("gpu_demo.measure",),
    ("gpu_demo.cli", "gpu_demo.__main__", "gpu_demo.distributed.__main__"),
    ("gpu_demo.lab",),                      # the tutorial's exercise: uses the public surface
]
DEMO = ("gpu_demo.moe", "gpu_demo.measure", "gpu_demo.cli", "gpu_demo.lab")


def _module_names() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


MODULES = _module_names()


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(name: str, path: Path) -> set[str]:
    """The project modules ``name`` imports (a ``from X import Y`` of a submodule counts as Y)."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for other in child.orelse:
                    visit(other)
                continue
            if isinstance(child, ast.Import):
                found.update(a.name for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - child.level + 1] + ([base] if base else []))
                for alias in child.names:
                    found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base)
            visit(child)

    visit(tree)
    return {m for m in found if m in MODULES and m != name}


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _floor(name: str) -> int:
    best = None
    for level, prefixes in enumerate(FLOORS):
        for prefix in prefixes:
            if name == prefix or name.startswith(prefix + "."):
                if best is None or len(prefix) > best[1]:
                    best = (level, len(prefix))
    assert best is not None, f"{name} sits on no floor: add its package to FLOORS in {__file__}"
    return best[0]


def _cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(GRAPH):
        if v not in index:
            strong(v)
    return found


def test_the_walk_sees_deferred_imports():
    # gpu_demo.cli.main imports the harness inside a command's function only
    assert "gpu_demo.moe.harness" in GRAPH["gpu_demo.cli.main"]


def test_no_module_takes_part_in_an_import_circle():
    assert _cycles() == []


def test_a_planted_circle_would_be_found(monkeypatch):
    monkeypatch.setitem(GRAPH, "gpu_demo.protocol.metric", GRAPH["gpu_demo.protocol.metric"] | {"gpu_demo.cli.main"})
    assert any("gpu_demo.protocol.metric" in c for c in _cycles())


@pytest.mark.parametrize("name", sorted(MODULES))
def test_every_import_goes_to_the_same_floor_or_below(name):
    upward = sorted(m for m in GRAPH[name] if _floor(m) > _floor(name))
    assert upward == [], f"{name} (floor {_floor(name)}) imports from a higher floor: {upward}"


def test_simlib_imports_nothing_from_gpu_demo():
    assert not [(m, i) for m in GRAPH if m.startswith("simlib") for i in GRAPH[m] if i.startswith("gpu_demo")]


def test_the_guard_checks_a_plain_program_with_the_demo_unimportable(tmp_path):
    """The recorder and the guard are for any user's code: with the demo's modules made unimportable,
    the guard still records and checks a plain-PyTorch program (a dry run on the CPU)."""
    (tmp_path / "plain_program.py").write_text(textwrap.dedent('''
        import torch

        def safe(x):
            return torch.relu(x) * 2

        def disposes_then_launches(x):
            h = x * 2
            out = h + 1
            h.set_(torch.empty(0, dtype=h.dtype))   # dispose_tensor(h): host-side, before a late launch
            return out + h.sum()
    '''))
    script = textwrap.dedent(f'''
        import importlib.abc, sys
        BLOCKED = {DEMO!r}

        class Refuse(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.startswith(BLOCKED):
                    raise ImportError(f"{{name}} is the demo; the guard must not need it")
                return None

        sys.meta_path.insert(0, Refuse())
        sys.path.insert(0, {str(tmp_path)!r})
        import torch
        from gpu_demo import check_capture
        safe = check_capture("plain_program:safe", torch.randn(4, 8), isolate=False)
        hazard = check_capture("plain_program:disposes_then_launches", torch.randn(4, 8), isolate=False)
        print("SAFE", [f.code for f in safe.findings])
        print("HAZARD", sorted({{f.code for f in hazard.findings}}))
        print("DEMO", sorted(m for m in sys.modules if m.startswith(BLOCKED)))
    ''')
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT,
                          env={"PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": ""}, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines() if line.split(" ", 1)[0] in
                 ("SAFE", "HAZARD", "DEMO"))
    assert lines["SAFE"] == "[]"
    assert "host_mutation" in lines["HAZARD"]
    assert lines["DEMO"] == "[]"
