#!/usr/bin/env python3
"""Draw gpu_demo's floors from the code's own imports: ``docs/img/gpu-demo-floors.png``.

    python scripts/draw_floors.py [--out docs/img/gpu-demo-floors.png]

The floors and the imports are ``tests/test_layout.py``'s (``FLOORS``, and ``GRAPH``: every
import of every module, deferred ones too), so the picture shows what that test holds. A box
is one of gpu_demo's entries in ``FLOORS`` (a folder, or a module), on its floor, lowest first,
with its lines of code; an arrow is one import or more (between the rooms, how many); simlib is one
box at the bottom. The guard's room stands on the left with the public face above it, the lab's
on the right, the commands between them.
"""

from __future__ import annotations

import argparse
import importlib.util
from collections import Counter
from pathlib import Path
from types import ModuleType

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import FancyBboxPatch

ROOT = Path(__file__).resolve().parents[1]
SIMLIB = "simlib"
# Each room: its title and the x of its column; the face stands above the guard it hands over
# to, the commands in a column of their own between the rooms.
ROOMS = {"gpu_demo.guard": ("gpu_demo/guard/: all that a user's check needs", 0.0, "#dbe8f5"),
         "gpu_demo.lab": ("gpu_demo/lab/: the lab around the guard", 5.8, "#f3e6d6")}
FACE, FACE_X, COMMANDS_X = ("gpu_demo", "gpu_demo.autocheck"), 0.0, 2.4
BOX_W, BOX_H, GAP, ROW_H, PANEL_W = 1.5, 0.5, 0.15, 0.75, 3.2


def layout_test() -> ModuleType:
    """``tests/test_layout.py``, loaded as a module (it is not a package's)."""
    spec = importlib.util.spec_from_file_location("test_layout", ROOT / "tests" / "test_layout.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def boxes(layout: ModuleType) -> list[tuple[str, int]]:
    """Each of gpu_demo's entries in ``FLOORS`` with its floor, counted from gpu_demo's lowest."""
    floors = [[p for p in prefixes if p.startswith("gpu_demo")] for prefixes in layout.FLOORS]
    floors = [f for f in floors if f]
    return [(prefix, level) for level, prefixes in enumerate(floors) for prefix in prefixes]


def box_of(module: str, prefixes: list[str]) -> str | None:
    """The box ``module`` is drawn in: the longest prefix that holds it, or simlib's."""
    if module == SIMLIB or module.startswith(SIMLIB + "."):
        return SIMLIB
    held = [p for p in prefixes if module == p or module.startswith(p + ".")]
    return max(held, key=len) if held else None


def arrows(layout: ModuleType, prefixes: list[str]) -> Counter[tuple[str, str]]:
    """How many imports run from each box to each other box."""
    counted: Counter[tuple[str, str]] = Counter()
    for module, imported in layout.GRAPH.items():
        source = box_of(module, prefixes)
        if source is None or source == SIMLIB:
            continue
        for name in imported:
            target = box_of(name, prefixes)
            if target is not None and target != source:
                counted[source, target] += 1
    return counted


def _label(prefix: str, layout: ModuleType) -> str:
    if prefix == "gpu_demo":
        return "gpu_demo/__init__.py"
    name = prefix.removeprefix("gpu_demo.").replace(".", "/")
    if prefix in ROOMS:
        return f"{name}/*.py"   # the modules at the room's top
    return f"{name}/" if layout.MODULES[prefix].name == "__init__.py" else f"{name}.py"


def _lines(prefix: str, prefixes: list[str], layout: ModuleType) -> int:
    """The lines of a box: a folder's modules (those no longer prefix draws), or one module's."""
    one = prefix == "gpu_demo" or layout.MODULES[prefix].name != "__init__.py"
    return sum(len(path.read_text().splitlines()) for module, path in layout.MODULES.items()
               if (module == prefix if one else box_of(module, prefixes) == prefix))


Rect = tuple[float, float, float, float]   # x0, y0, x1, y1


def _room(box: str) -> str | None:
    """The room ``box`` stands in (its key in ``ROOMS``), simlib, or ``None`` (the face, the commands)."""
    return SIMLIB if box == SIMLIB else next((r for r in ROOMS if box == r or box.startswith(r + ".")), None)


def _edge(rect: Rect, toward: Rect) -> tuple[float, float]:
    """Where the line from ``rect``'s centre to ``toward``'s leaves ``rect``."""
    x0, y0, x1, y1 = rect
    cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
    dx, dy = (toward[0] + toward[2]) / 2 - cx, (toward[1] + toward[3]) / 2 - cy
    scale = min((x1 - x0) / 2 / abs(dx) if dx else float("inf"), (y1 - y0) / 2 / abs(dy) if dy else float("inf"))
    return cx + dx * scale, cy + dy * scale


def draw(out: Path) -> Path:
    """The picture (module docstring), written to ``out``. Inside a room each box's imports are
    drawn; between the rooms, the face and simlib, one arrow says how many imports cross."""
    layout = layout_test()
    placed = boxes(layout)
    prefixes = [p for p, _ in placed]
    column = {p: ROOMS[room][1] if (room := _room(p)) in ROOMS else FACE_X if p in FACE else COMMANDS_X
              for p in prefixes}
    rects: dict[str, Rect] = {}
    for level in sorted({level for _, level in placed}):
        row = [p for p, lv in placed if lv == level]
        for x in sorted({column[p] for p in row}):
            shared = [p for p in row if column[p] == x]
            for k, prefix in enumerate(shared):
                cx, cy = x + (k - (len(shared) - 1) / 2) * (BOX_W + GAP), (level + 1.6) * ROW_H
                rects[prefix] = (cx - BOX_W / 2, cy - BOX_H / 2, cx + BOX_W / 2, cy + BOX_H / 2)
    left, right = min(r[0] for r in rects.values()) - 0.2, max(r[2] for r in rects.values()) + 0.2
    rects[SIMLIB] = (left + 0.2, -BOX_H / 2, right - 0.2, BOX_H / 2)
    panels: dict[str, Rect] = {}
    for room in ROOMS:
        inside = [rects[p] for p in prefixes if _room(p) == room]
        x0, x1 = min(r[0] for r in inside) - 0.12, max(r[2] for r in inside) + 0.12
        half = max(x1 - x0, PANEL_W) / 2   # wide enough for its title
        panels[room] = ((x0 + x1) / 2 - half, min(r[1] for r in inside) - 0.45,
                        (x0 + x1) / 2 + half, max(r[3] for r in inside) + 0.12)
    top = max(r[3] for r in [*rects.values(), *panels.values()]) + 0.5
    fig = Figure(figsize=((right - left) * 1.1, (top + 0.5) * 1.1), dpi=110)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(left, right)
    ax.set_ylim(-0.5, top)
    ax.axis("off")
    for room, (title, _, colour) in ROOMS.items():
        x0, y0, x1, y1 = panels[room]
        ax.add_patch(FancyBboxPatch((x0, y0), x1 - x0, y1 - y0, boxstyle="round,pad=0.02", fc=colour, ec="none", zorder=0))
        ax.text((x0 + x1) / 2, y0 + 0.14, title, ha="center", fontsize=9, weight="bold")
    ends = {**rects, **panels}
    crossing: Counter[tuple[str, str]] = Counter()
    for (source, target), count in arrows(layout, prefixes).items():
        if _room(source) == _room(target) and _room(source) is not None:
            _arrow(ax, rects[source], rects[target], count)
        else:
            crossing[_room(source) or source, _room(target) or target] += count
    for (source, target), count in sorted(crossing.items()):
        _arrow(ax, ends[source], ends[target], count, said=True)
    for prefix, (x0, y0, x1, y1) in rects.items():
        label = "simlib/  (pure Python, no torch)" if prefix == SIMLIB else (
            f"{_label(prefix, layout)}\n{_lines(prefix, prefixes, layout)} lines")
        ax.add_patch(FancyBboxPatch((x0, y0), x1 - x0, y1 - y0, boxstyle="round,pad=0.02",
                                    fc="white", ec="#34495e", lw=1.0, zorder=2))
        ax.text((x0 + x1) / 2, (y0 + y1) / 2, label, ha="center", va="center", fontsize=8.5, zorder=3)
    ax.text(left + 0.1, top - 0.3, "gpu_demo's floors (tests/test_layout.py): a box imports only from its floor and "
            "those below it", fontsize=9, color="#34495e")
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    return out


def _arrow(ax: Axes, source: Rect, target: Rect, count: int, said: bool = False) -> None:
    """An arrow from ``source``'s edge to ``target``'s, as thick as the imports it stands for
    (``said``: and how many, written on it)."""
    start, end = _edge(source, target), _edge(target, source)
    ax.annotate("", xy=end, xytext=start, zorder=1, arrowprops={
        "arrowstyle": "-|>", "color": "#5b6b7b", "lw": 0.7 + 0.25 * min(count, 12), "alpha": 0.75,
        "shrinkA": 0, "shrinkB": 1})
    if said:
        ax.text((start[0] + end[0]) / 2, (start[1] + end[1]) / 2, f"{count} import{'s' * (count > 1)}",
                fontsize=7.5, color="#34495e", ha="center", zorder=3, bbox={"fc": "white", "ec": "none", "pad": 1})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img" / "gpu-demo-floors.png")
    print(f"wrote {draw(parser.parse_args().out)}")


if __name__ == "__main__":
    main()
