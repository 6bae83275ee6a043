"""Plain-PyTorch programs the guard is measured on: hazardous ones and safe ones.

Each program is one small module written the way users write capture code
(``torch.cuda.Stream``, ``alt.wait_stream(main)``, ``with torch.cuda.stream(alt)``,
``tensor.set_``, a ``@triton.jit`` kernel called directly) and imports nothing
from this project, so the guard cannot lean on the project's own annotations.
Each exposes the same interface:

``make(device, dtype) -> (fn, example_inputs)``
    a fresh instance (an ``nn.Module``) and its example inputs
``EXPECTED``
    ``"hazardous"`` or ``"safe"``, declared by the program; its docstring says why
``RUNS_ON_CPU`` (optional, default true)
    false when ``fn`` cannot run eagerly on a CPU at all (a Triton kernel)

``gpu_demo.corpus.runner`` runs them all on a GPU: the GPU's truth, and the
guard's verdict (``python -m gpu_demo corpus``).
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

HAZARDOUS, SAFE = "hazardous", "safe"
_NOT_PROGRAMS = {"runner"}

PROGRAMS: tuple[str, ...] = tuple(sorted(
    m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_") and m.name not in _NOT_PROGRAMS
))


def load(name: str) -> ModuleType:
    """The program module ``name`` (one of ``PROGRAMS``)."""
    if name not in PROGRAMS:
        raise ValueError(f"{name!r} is not a corpus program; the programs are: {', '.join(PROGRAMS)}")
    return importlib.import_module(f"{__name__}.{name}")


def target(name: str) -> str:
    """The ``module:callable`` string the guard checks for program ``name``."""
    return f"{__name__}.{name}:make"
