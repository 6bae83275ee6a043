"""What ``capture_order_check.pth`` runs at every interpreter start: read ``CAPTURE_ORDER_CHECK``,
and start the whole-process check when the program imports torch, not before.

The .pth runs in every Python of the environment (pip, Jupyter, ``python -c pass``), most of
which never touch torch; importing torch there cost seconds each. So this module imports only the
standard library: it puts a finder on ``sys.meta_path`` that waits for ``import torch``, lets
torch's own loader run it, and only then imports the check (``gpu_demo.guard.process``), before
the program's ``import torch`` returns, so no capture comes before it.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
from typing import Any, Callable, Mapping

ENV = "CAPTURE_ORDER_CHECK"
ENV_MODES = {"1": "warn", "warn": "warn", "strict": "raise"}
_env_read = False


def mode_from(environ: Mapping[str, str]) -> str | None:
    """``warn``, ``raise`` or ``None`` (off) for ``CAPTURE_ORDER_CHECK`` in ``environ``."""
    value = environ.get(ENV, "").strip().lower()
    if value in ("", "0"):
        return None
    if value not in ENV_MODES:
        raise ValueError(f"{ENV}={value!r} is not one of {', '.join(ENV_MODES)} (or 0 for off)")
    return ENV_MODES[value]


def check_process_from_env(environ: Mapping[str, str] = os.environ) -> Any:
    """Start whole-process checking if ``CAPTURE_ORDER_CHECK`` asks for it (the .pth calls this):
    at once where torch is already imported (then the ``CaptureChecker`` is returned), else at
    the program's ``import torch`` (then ``None``).

    Python can run the .pth twice (a venv's ``lib64`` links to ``lib``): the second call
    changes nothing.
    """
    global _env_read
    if _env_read:
        return None
    _env_read = True
    try:
        mode = mode_from(environ)
    except ValueError as exc:
        print(f"capture-order check is off: {exc}", file=sys.stderr)
        return None
    if mode is None:
        return None
    if "torch" in sys.modules:
        return _start(mode)
    sys.meta_path.insert(0, AfterImport("torch", lambda: _start(mode)))
    return None


def _start(mode: str) -> Any:
    """The check itself, imported only now: it stands on torch (``gpu_demo.guard.process``)."""
    try:
        from gpu_demo.guard.process import check_process
        return check_process(mode)
    except Exception as exc:   # the program must run on, unchecked, and say so
        print(f"{ENV} is set, but the capture-order check did not start ({exc!r}): captures are not checked",
              file=sys.stderr)
        return None


class AfterImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: at the first import of ``name`` it steps aside, lets the other finders
    find the module, and has its loader call ``then()`` once the module has run."""

    def __init__(self, name: str, then: Callable[[], object]) -> None:
        self.name, self.then = name, then

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        execute = spec.loader.exec_module

        def execute_then(module: Any) -> None:
            execute(module)
            self.then()

        spec.loader.exec_module = execute_then   # this spec's loader alone
        return spec
