"""Plain-PyTorch programs the guard is measured on: hazardous ones and safe ones.

Each program is one small module written the way users write capture code
(``torch.cuda.Stream``, ``alt.wait_stream(main)``, ``with torch.cuda.stream(alt)``,
``tensor.set_``, a ``@triton.jit`` kernel called directly) and imports nothing
from this project, so the guard cannot lean on the project's own annotations.
Each docstring cites the public thread the program is modelled on. A program
is one of two kinds:

a function (``make``)
    ``make(device, dtype) -> (fn, example_inputs)``: a fresh instance (an
    ``nn.Module``) and its example inputs, checked by ``check_capture`` and,
    driven like a server's start-up (eager calls, capture, replays), by the
    whole-process check;
a script (``run``)
    ``run(device, dtype) -> errors``: a whole program that captures and
    replays by itself (several graphs, one pool, ``torch.compile``) and
    returns the relative error of each output it checked against eager. Only
    the whole-process check (``CAPTURE_ORDER_CHECK=1``) can check it: there is
    no one function to hand to ``check_capture``. Scripts need CUDA (the
    ``hf_*`` loops transformers too, imported only when they run).

Both declare ``EXPECTED``: ``"hazardous"`` or ``"safe"``, and the docstring
says why; ``RUNS_ON_CPU`` (optional, default true) is false when ``fn``
cannot run eagerly on a CPU at all (a Triton kernel).

``gpu_demo.lab.corpus.runner`` runs them all on a GPU: the GPU's truth, and the
verdicts of ``check_capture`` and of the whole-process check
(``python -m gpu_demo corpus``).
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

HAZARDOUS, SAFE = "hazardous", "safe"
_NOT_PROGRAMS = {"runner", "anchors", "serving"}   # the corpus's tooling, not programs

PROGRAMS: tuple[str, ...] = tuple(sorted(
    m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_") and m.name not in _NOT_PROGRAMS
))


def load(name: str) -> ModuleType:
    """The program module ``name`` (one of ``PROGRAMS``)."""
    if name not in PROGRAMS:
        raise ValueError(f"{name!r} is not a corpus program; the programs are: {', '.join(PROGRAMS)}")
    return importlib.import_module(f"{__name__}.{name}")


def is_script(name: str) -> bool:
    """Is program ``name`` a whole script (``run``) rather than a function (``make``)?"""
    return hasattr(load(name), "run")


def target(name: str) -> str:
    """The ``module:callable`` string the guard checks for program ``name``."""
    return f"{__name__}.{name}:make"
