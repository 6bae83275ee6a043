"""The package tree is the architecture: no import circle, and every import goes down a floor.

simlib's floors: the vocabulary both worlds use (trace, glossary, memory, export); the engine and
the checker, each standing on the vocabulary alone; the programs; the tutorial; the package's face
and command lines. No module under simlib builds a path into gpu_demo: GPU results come in as
arguments, read through ``gpu_demo.lab.results``.

gpu_demo's: the guard's room (the protocol, the recorder, the checks users call, the job-wide
check), which imports nothing else of gpu_demo; the public face; then the lab around the guard
(its results, the corpus, the MoE demo, its distributed form, the measurements and the zoo, the
command lines, the exercise). ``python scripts/draw_floors.py`` draws them.

Every import is counted, including those inside functions (a deferred import
can hide a circle, not remove it); only imports under ``if TYPE_CHECKING:``
are left out, since they never run.
"""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("simlib", "gpu_demo")

# Floors, lowest first: a module may import its own floor and those below, never above.
VOCABULARY = ("simlib.trace", "simlib.glossary", "simlib.memory", "simlib.export")
FLOORS = [
    VOCABULARY,                             # what both worlds write and read: records, words, pool names
    ("simlib.engine", "simlib.checker"),    # the simulator; the checker (each on the vocabulary alone)
    ("simlib.programs",),                   # simulated programs, the harness that runs them, their verdicts
    ("simlib.tutorial",),                   # the notebooks' pictures, tables, widgets and exercises
    ("simlib",),                            # its face (__init__) and command lines (__main__, bench)
    ("gpu_demo.guard.protocol",),           # capture, replay, compare; the child process, the warm worker
    ("gpu_demo.guard.record",),             # the recorder of real captures
    ("gpu_demo.guard",),                    # the checks users run: check_capture, capture_checked, autocheck
    ("gpu_demo.guard.job",),                # the whole-process check across a torchrun job's ranks
    ("gpu_demo", "gpu_demo.autocheck"),     # the package's public surface; python -m gpu_demo.autocheck
    ("gpu_demo.lab.results",),              # the lab's recorded GPU results: json and pathlib, no torch
    ("gpu_demo.lab.corpus",),               # plain-PyTorch programs; their runner uses the guard
    ("gpu_demo.lab.moe",),                  # the incident's dual-stream MoE
    ("gpu_demo.lab.distributed",),          # that MoE, tensor-parallel
    ("gpu_demo.lab.measure", "gpu_demo.lab.zoo"),   # measurements; real models the guard must pass
    ("gpu_demo.lab.cli", "gpu_demo.__main__", "gpu_demo.distributed"),   # the command lines
    ("gpu_demo.lab.exercise",),             # the tutorial's exercise: uses the public surface
]
# The lab around the guard, and the command lines that reach it: what the guard must never need.
DEMO = ("gpu_demo.lab", "gpu_demo.__main__", "gpu_demo.distributed")


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
    # gpu_demo.lab.cli.main imports the harness inside a command's function only
    assert "gpu_demo.lab.moe.harness" in GRAPH["gpu_demo.lab.cli.main"]


def test_no_module_takes_part_in_an_import_circle():
    assert _cycles() == []


def test_a_planted_circle_would_be_found(monkeypatch):
    metric = "gpu_demo.guard.protocol.metric"
    monkeypatch.setitem(GRAPH, metric, GRAPH[metric] | {"gpu_demo.lab.cli.main"})
    assert any(metric in c for c in _cycles())


@pytest.mark.parametrize("name", sorted(MODULES))
def test_every_import_goes_to_the_same_floor_or_below(name):
    upward = sorted(m for m in GRAPH[name] if _floor(m) > _floor(name))
    assert upward == [], f"{name} (floor {_floor(name)}) imports from a higher floor: {upward}"


def test_simlib_imports_nothing_from_gpu_demo():
    assert not [(m, i) for m in GRAPH if m.startswith("simlib") for i in GRAPH[m] if i.startswith("gpu_demo")]


def _within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _strays(package: str, allowed: tuple[str, ...]) -> list[tuple[str, str]]:
    """(module, import) for each import of ``package``'s modules outside itself and ``allowed``."""
    return sorted((m, i) for m in GRAPH if _within(m, (package,)) for i in GRAPH[m]
                  if not _within(i, (package, *allowed)))


def test_the_engine_imports_nothing_from_the_programs_the_tutorial_or_the_checker():
    strays = _strays("simlib.engine", VOCABULARY)
    assert not [s for s in strays if _within(s[1], ("simlib.programs", "simlib.tutorial"))], strays
    assert strays == [], "the engine stands on the vocabulary alone"


def test_the_checker_reads_the_vocabulary_alone():
    assert _strays("simlib.checker", VOCABULARY) == []


def test_a_planted_import_of_a_program_by_the_engine_would_be_found(monkeypatch):
    monkeypatch.setitem(GRAPH, "simlib.engine.device", GRAPH["simlib.engine.device"] | {"simlib.programs.harness"})
    assert ("simlib.engine.device", "simlib.programs.harness") in _strays("simlib.engine", VOCABULARY)


GUARD = "gpu_demo.guard"   # the room that holds everything a user's check needs


def test_the_guard_room_imports_only_itself_and_simlib():
    """Besides torch and the standard library (not modules of this tree): no lab, no results, not the face."""
    assert _strays(GUARD, ("simlib",)) == []


def test_a_planted_import_of_the_lab_or_the_face_by_the_guard_would_be_found(monkeypatch):
    monkeypatch.setitem(GRAPH, "gpu_demo.guard.check", GRAPH["gpu_demo.guard.check"] | {"gpu_demo.lab.moe.model"})
    monkeypatch.setitem(GRAPH, "gpu_demo.guard.record.ops", GRAPH["gpu_demo.guard.record.ops"] | {"gpu_demo"})
    assert _strays(GUARD, ("simlib",)) == [("gpu_demo.guard.check", "gpu_demo.lab.moe.model"),
                                           ("gpu_demo.guard.record.ops", "gpu_demo")]


def test_the_floors_picture_draws_what_this_file_holds(tmp_path):
    """``scripts/draw_floors.py`` (the picture in docs/) draws no arrow up a floor and none from the
    guard's room into the lab, and writes a PNG."""
    spec = importlib.util.spec_from_file_location("draw_floors", ROOT / "scripts" / "draw_floors.py")
    drawing = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(drawing)
    prefixes = [prefix for prefix, _ in drawing.boxes(drawing.layout_test())]
    drawn = drawing.arrows(drawing.layout_test(), prefixes)
    assert ("gpu_demo.lab.cli", "gpu_demo.lab.moe") in drawn and ("gpu_demo.guard", "gpu_demo.guard.record") in drawn
    assert [(s, t) for s, t in drawn if t != "simlib" and _floor(s) < _floor(t)] == []
    assert [(s, t) for s, t in drawn if _within(s, (GUARD,)) and not _within(t, (GUARD, "simlib"))] == []
    assert drawing.draw(tmp_path / "floors.png").read_bytes()[:4] == b"\x89PNG"


# --------------------------------------------------------------------------- no path into gpu_demo
_PATH_CALLS = ("Path", "PurePath", "open", "joinpath", "join")


def _climb(node: ast.AST) -> int | None:
    """How many folders ``Path(__file__)[.resolve()].parent.parent`` (or ``.parents[k]``) climbs
    from the module's file; ``None`` when ``node`` is no such walk."""
    levels = 0
    while True:
        if isinstance(node, ast.Attribute) and node.attr == "parent":
            levels, node = levels + 1, node.value
        elif (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "parents"
              and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, int)):
            levels, node = levels + node.slice.value + 1, node.value.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("resolve", "absolute"):
            node = node.func.value
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("Path", "PurePath")
              and [ast.unparse(a) for a in node.args] == ["__file__"]):
            return levels
        else:
            return None


def _names_gpu_demo(node: ast.AST) -> bool:
    return (isinstance(node, ast.Constant) and isinstance(node.value, str)
            and "gpu_demo" in node.value.replace("\\", "/").split("/"))


def paths_into_gpu_demo(relative: Path, source: str) -> list[tuple[int, str]]:
    """Where the module at ``relative`` (from the repository's root) builds a path into gpu_demo.

    Two ways: a path expression (``/``, ``Path(...)``, ``open(...)``, ``joinpath``, ``os.path.join``)
    with a string whose folders name ``gpu_demo``; and a walk from ``Path(__file__)`` that climbs out
    of simlib (to the repository's root) and joins a name to it, whatever the name: from there any
    folder is reachable. A walk that stays in simlib, or names the root without joining anything to
    it (a launch's call site is named relative to the checkout), is no path into gpu_demo.
    """
    depth = len(relative.parts)          # the file's own folders and its name
    tree = ast.parse(source)

    def escapes(node: ast.AST) -> bool:
        climbed = _climb(node)
        return climbed is not None and depth - climbed < 1

    roots = {t.id for node in ast.walk(tree) if isinstance(node, ast.Assign) and escapes(node.value)
             for t in node.targets if isinstance(t, ast.Name)}     # ROOT = Path(__file__).parents[2]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            if _names_gpu_demo(node.left) or _names_gpu_demo(node.right):
                found.append((node.lineno, "joins a path to gpu_demo"))
            if escapes(node.left) or (isinstance(node.left, ast.Name) and node.left.id in roots):
                found.append((node.lineno, "climbs out of simlib from its file and joins a path"))
        elif isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in _PATH_CALLS and any(_names_gpu_demo(a) for a in node.args):
                found.append((node.lineno, f"opens a path into gpu_demo ({name})"))
    return sorted(found)


def test_no_module_under_simlib_opens_a_path_into_gpu_demo():
    found = [f"{path.relative_to(ROOT)}:{line}: {why}" for path in sorted((ROOT / "simlib").rglob("*.py"))
             for line, why in paths_into_gpu_demo(path.relative_to(ROOT), path.read_text())]
    assert found == [], "simlib takes GPU results as arguments (gpu_demo.lab.results):\n" + "\n".join(found)


def test_the_path_scan_catches_what_simlib_read_before_and_passes_what_it_reads_now():
    before = {   # simlib/gpu_results.py and simlib/lab.py, as they read gpu_demo/lab/results before
        "simlib/gpu_results.py": ('GPU_RESULTS = Path(__file__).resolve().parent.parent / "gpu_demo" / "results"'
                                  ' / "matrix-h200.json"\n'),
        "simlib/lab.py": 'RESULTS = Path(__file__).resolve().parent.parent / "gpu_demo" / "results"\n',
        "simlib/tutorial/table.py": 'data = open("../gpu_demo/results/matrix-h200.json").read()\n',
        "simlib/tutorial/root.py": 'ROOT = Path(__file__).resolve().parents[2]\nmatrix = ROOT / folder / "matrix-h200.json"\n',
    }
    for relative, source in before.items():
        assert paths_into_gpu_demo(Path(relative), source), relative
    fine = {   # a site named from the checkout's root; a file beside this one; prose that names gpu_demo
        "simlib/engine/runtime/launches.py": '_CHECKOUT = str(Path(__file__).resolve().parents[3]) + os.sep\n',
        "simlib/tutorial/plots/kit.py": 'FONT = Path(__file__).resolve().parent / "font.ttf"\n',
        "simlib/programs/eager_program.py": 'RECORD_COMMAND = "python -m gpu_demo bench --host-costs"\n',
    }
    for relative, source in fine.items():
        assert paths_into_gpu_demo(Path(relative), source) == [], relative


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


def test_the_recorded_results_import_without_torch_and_the_public_names_on_first_use():
    """``gpu_demo.lab.results`` is json and pathlib: a notebook hands it to simlib on a seat without torch.
    The package's public names are imported when first asked for (``gpu_demo.__getattr__``)."""
    script = textwrap.dedent('''
        import sys
        import gpu_demo, gpu_demo.lab.results
        print("TORCH", "torch" in sys.modules, gpu_demo.lab.results.load("matrix-h200")["provenance"]["gpu"])
        print("PUBLIC", all(callable(getattr(gpu_demo, name)) for name in gpu_demo.__all__), "torch" in sys.modules)
    ''')
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == ["TORCH False NVIDIA H200", "PUBLIC True True"]
