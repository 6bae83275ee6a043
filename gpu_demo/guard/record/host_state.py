"""Host ints and flags the captured code changed (checker rule 16): snapshots at a capture's ends.

Host code inside a capture runs once; a replay runs none. A host int or flag
that the captured call changed (a cache's token count, a step, a "filled"
flag) is one every eager call changes too, and the graph keeps what the
capture's value chose: a branch, an index, a size. So at capture begin the
recorder notes every ``int`` and ``bool`` attribute of the objects the
capturing code can reach (the locals of the frames that opened the capture,
and what those reach: attributes, modules' submodules, list, tuple and dict
items, closures, bound methods' owners), and at capture end writes a
``HostState`` for each one that changed.

What is not the program's is not walked: torch's objects other than modules,
a module's own bookkeeping (its hooks, parameters and buffers), the guard's
and the simulator's objects, and what runs the program (a notebook's kernel,
whose output streams count the messages a cell prints; test runners; I/O); the walk stops after ``MAX_OBJECTS``
objects or ``MAX_DEPTH`` steps from a frame. An attribute set on an object
the capture created, or on one reached only through a global, is not seen.
"""

from __future__ import annotations

import sys
from collections import deque
from types import FrameType, FunctionType, MethodType
from typing import Any, Iterator

import torch

from gpu_demo.guard.record.journal import Journal
from simlib.trace import HostState

MAX_OBJECTS = 20_000
MAX_DEPTH = 8
MAX_FRAMES = 12          # frames above the capture's begin whose locals are walked
_NOT_THE_PROGRAMS = ("torch", "gpu_demo.guard", "simlib", "builtins", "typing", "collections", "functools",
                     "threading", "weakref", "types", "contextlib", "_thread",
                     # what runs the program, not the program: a notebook's kernel and its output streams
                     # (their message counters move whenever a cell prints), test runners, I/O, event loops
                     "IPython", "ipykernel", "jupyter_client", "traitlets", "zmq", "tornado", "asyncio",
                     "_pytest", "pytest", "pluggy", "io", "_io", "logging", "concurrent", "queue")
_CONTAINERS = (list, tuple, dict, set, frozenset)
_LEAVES = frozenset({int, bool, float, complex, str, bytes, type(None), torch.Tensor, torch.nn.Parameter})
# What every module's ``__dict__`` holds for torch (hooks, parameters, buffers): not the program's state.
_MODULE_INTERNALS = frozenset(torch.nn.Module().__dict__) - {"_modules", "training"}
_walked_types: dict[type, bool] = {}   # a type -> are its objects walked (``_walked``)


def _walked(kind: type) -> bool:
    """Are objects of ``kind`` the program's own (their attributes may be host state), or its modules?"""
    known = _walked_types.get(kind)
    if known is None:
        module = kind.__module__ or ""
        known = issubclass(kind, torch.nn.Module) or issubclass(kind, _CONTAINERS + (MethodType, FunctionType)) \
            or not any(module == p or module.startswith(p + ".") for p in _NOT_THE_PROGRAMS)
        _walked_types[kind] = known
    return known


def _children(obj: Any) -> Iterator[tuple[str, Any]]:
    """``(how it is reached, object)`` for what ``obj`` holds."""
    if isinstance(obj, dict):
        for key, value in list(obj.items())[:256]:
            yield f"[{key!r}]", value
    elif isinstance(obj, (list, tuple)):
        for i, value in enumerate(obj[:256]):
            yield f"[{i}]", value
    elif isinstance(obj, MethodType):
        yield "", obj.__self__
    elif isinstance(obj, FunctionType):
        for name, cell in zip(obj.__code__.co_freevars, obj.__closure__ or ()):
            try:
                yield f"<{name}>", cell.cell_contents
            except ValueError:   # an empty cell
                continue
    elif isinstance(obj, (set, frozenset)):
        return
    else:
        state = _state_of(obj)
        if state is None:
            return
        module = isinstance(obj, torch.nn.Module)
        for attr, value in list(state.items()):
            if module and attr in _MODULE_INTERNALS:
                continue
            if attr == "_modules" and type(value) is dict:
                yield from ((f".{name}", m) for name, m in value.items())
            elif not attr.startswith("__"):
                yield f".{attr}", value


def _state_of(obj: Any) -> dict[str, Any] | None:
    """``obj.__dict__``, or ``None`` where it has none (or a proxy refuses to say)."""
    try:
        state = object.__getattribute__(obj, "__dict__")
    except Exception:   # no __dict__ (slots, C types), or a proxy's own error: nothing to note
        return None
    return state if isinstance(state, dict) else None


def _capturing_frames(frame: FrameType | None) -> Iterator[FrameType]:
    for _ in range(MAX_FRAMES):
        if frame is None:
            return
        yield frame
        frame = frame.f_back


class HostSnapshot:
    """The ints and bools the capturing code reaches, noted at capture begin, compared at its end."""

    def __init__(self) -> None:
        self._noted: list[tuple[Any, str, str, int | bool]] = []   # (object, its name, attribute, value)
        self.module_names: dict[int, str] = {}   # id(module) -> the name it was first reached by (``rebinds``)

    def take(self, frame: FrameType | None = None) -> None:
        """Note what the locals of ``frame`` and the frames above it reach (default: the caller's)."""
        seen: set[int] = set()
        queue: deque[tuple[Any, str, int]] = deque()
        for f in _capturing_frames(frame or sys._getframe(1)):
            for name, value in list(f.f_locals.items()):
                queue.append((value, name, 0))
        noted: list[tuple[Any, str, str, int | bool]] = []
        while queue and len(seen) < MAX_OBJECTS:
            obj, path, depth = queue.popleft()
            kind = type(obj)
            if kind in _LEAVES or id(obj) in seen or not _walked(kind):
                continue
            seen.add(id(obj))
            if isinstance(obj, torch.nn.Module):
                self.module_names.setdefault(id(obj), path)
            container = issubclass(kind, _CONTAINERS)
            for how, child in _children(obj):
                leaf = type(child)
                if leaf is int or leaf is bool:
                    if not container and how[0] == ".":
                        noted.append((obj, path, how[1:], child))
                elif depth < MAX_DEPTH and leaf not in _LEAVES:
                    queue.append((child, f"{path}{how}", depth + 1))
        self._noted = noted

    def changed(self, journal: Journal, graph: int) -> None:
        """A ``HostState`` for each noted value that differs now; the snapshot is dropped."""
        noted, self._noted = self._noted, []
        for obj, path, attr, before in noted:
            after = (_state_of(obj) or {}).get(attr, before)
            if type(after) in (int, bool) and after != before:
                journal.emit(HostState, graph=graph, owner=path, attr=attr, before=repr(before), after=repr(after))
