"""Where the user's code issued an op: ``"file:line"`` of the innermost user frame (``Launch.site``).

The frozen-value rules line launches of one call up with the same launches of
another call by site, so a site must be the user's line, not torch's
(``torch/nn/functional.py``, a module's ``_call_impl``), the standard
library's (``contextlib``) or the recorder's own. Each code object is judged
once (a dict look-up per frame after that): a launch costs a walk of the few
frames between the dispatcher and the user's line.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path
from types import CodeType

import torch

_GUARD = Path(__file__).resolve().parents[1]
# Frames that are never the user's: torch, Triton, the standard library, and the guard's
# room (the recorder and what runs a check: the checks, the capture-replay protocol).
_NOT_USER = tuple(str(p) + os.sep for p in (
    Path(torch.__file__).resolve().parent, Path(sysconfig.get_paths()["stdlib"]).resolve(), _GUARD))
_NOT_USER_PARTS = (f"{os.sep}triton{os.sep}", "<frozen ")
UNKNOWN = ""

# Keyed by a code object's id: hashing a code object hashes its constants and names each time
# (hundreds of nanoseconds for a model's ``forward``, twice an op). Each code object met is held
# (``_held``), so its id stays its own.
_files: dict[int, str | None] = {}   # id(code object) -> its shown file name, None: not the user's
_sites: dict[tuple[int, int], str] = {}   # (id(user code), instruction offset) -> its ``"file:line"``
_held: list[CodeType] = []


def _shown(code: CodeType) -> str | None:
    """The file name a site shows for ``code`` (relative to the working directory when
    under it), or ``None`` when ``code`` is library code."""
    name = code.co_filename
    try:
        path = str(Path(name).resolve())
    except (OSError, ValueError):
        path = name
    if path.startswith(_NOT_USER) or any(part in path for part in _NOT_USER_PARTS):
        return None
    cwd = os.getcwd() + os.sep
    return path[len(cwd):] if path.startswith(cwd) else path


def _file_of(code: CodeType) -> str | None:
    """``_shown(code)``, worked out once per code object."""
    try:
        return _files[id(code)]
    except KeyError:
        _held.append(code)
        shown = _files[id(code)] = _shown(code)
        return shown


def user_site(skip: int = 1) -> str:
    """``"file:line"`` of the innermost frame above the caller (``skip`` frames up) that is
    the user's, or ``""`` when every frame is library code, or there is none: an op the
    autograd engine runs on its own thread (a CUDA backward) has no Python frame above the
    recorder's."""
    try:
        frame = sys._getframe(skip + 1)
    except ValueError:   # the stack is not that deep
        return UNKNOWN
    files = _files
    while frame is not None:
        code = frame.f_code
        try:
            shown = files[id(code)]
        except KeyError:
            shown = _file_of(code)
        if shown is not None:
            key = (id(code), frame.f_lasti)   # the instruction: its line is worked out once (``f_lineno`` scans)
            try:
                return _sites[key]
            except KeyError:
                site = _sites[key] = f"{shown}:{frame.f_lineno}"
                return site
        frame = frame.f_back
    return UNKNOWN


def user_stacklevel() -> int:
    """The ``stacklevel`` for a ``warnings.warn`` in the caller that names the innermost user
    frame above it (the line that ended a capture or replayed a graph); 1 when there is none."""
    frame, level = sys._getframe(2), 2
    while frame is not None:
        if _file_of(frame.f_code) is not None:
            return level
        frame, level = frame.f_back, level + 1
    return 1


def raised_at(exc: BaseException) -> str:
    """``"file:line"`` of the innermost user frame ``exc``'s traceback went through (the user's line
    that raised, or called the library that raised), or ``""`` when none was the user's."""
    site, tb = UNKNOWN, exc.__traceback__
    while tb is not None:
        shown = _file_of(tb.tb_frame.f_code)
        if shown is not None:
            site = f"{shown}:{tb.tb_lineno}"
        tb = tb.tb_next
    return site


def variable_name(tensor: object) -> str | None:
    """The name the innermost user frame knows ``tensor`` by: a local variable, else an attribute
    of its ``self`` (``self.buffer``); ``None`` when it has none there. A look through one frame's
    locals: for the rare records that name a tensor to a person (a mutation), not for every op."""
    frame = sys._getframe(1)
    while frame is not None and _file_of(frame.f_code) is None:
        frame = frame.f_back
    if frame is None:
        return None
    names = frame.f_locals
    for name, value in names.items():
        if value is tensor:
            return name
    owner = names.get("self")
    attributes = getattr(owner, "__dict__", {})
    for table in (attributes, attributes.get("_buffers") or {}, attributes.get("_parameters") or {}):
        for attr, value in table.items():   # plain attributes, then an nn.Module's buffers and parameters
            if value is tensor:
                return f"self.{attr}"
    return None
