"""The whole-process check's entry points: ``CAPTURE_ORDER_CHECK`` and ``python -m gpu_demo.autocheck``.

For a whole program, unmodified, in the spirit of ``TORCH_CUDA_SANITIZER=1``::

    CAPTURE_ORDER_CHECK=1 python your_script.py args...                  # needs the .pth (below)
    CAPTURE_ORDER_CHECK=1 python -m gpu_demo.autocheck your_script.py args...

``1`` (or ``warn``) warns at the end of every capture with a finding;
``strict`` raises ``AssertionError`` there (after ``torch.cuda.graph`` has
restored the current stream). The first form works where the package's
``capture_order_check.pth`` is in site-packages: a normal ``pip install``
puts it there, and so does ``make`` for its ``.venv``; an editable install
alone (``pip install -e .``, the conda environment) does not, so there use
``python -m gpu_demo.autocheck``, which works everywhere the package imports.

The checking itself is ``gpu_demo.guard.process`` (``check_process``, and
``capture_checked()`` for one block of a test or a script).
"""

from __future__ import annotations

import os
import runpy
import sys
from typing import Mapping, Sequence

from gpu_demo.guard.process import CaptureChecker, check_process, process_checker

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


def check_process_from_env(environ: Mapping[str, str] = os.environ) -> CaptureChecker | None:
    """Start whole-process checking if ``CAPTURE_ORDER_CHECK`` asks for it (the .pth calls this).

    Python can run the .pth twice (a venv's ``lib64`` links to ``lib``): the second call
    only returns what the first started.
    """
    global _env_read
    if _env_read:
        return process_checker()
    _env_read = True
    try:
        mode = mode_from(environ)
    except ValueError as exc:
        print(f"capture-order check is off: {exc}", file=sys.stderr)
        return None
    return None if mode is None else check_process(mode)


USAGE = "usage: python -m gpu_demo.autocheck [--strict] (script.py | -m module) [args...]"


def main(argv: Sequence[str] | None = None) -> int:
    """Run a script or module (``python -m gpu_demo.autocheck``) with every capture checked."""
    args = list(sys.argv[1:] if argv is None else argv)
    strict = bool(args) and args[0] == "--strict"
    args = args[strict:]
    if not args or args[0] in ("-h", "--help") or (args[0] == "-m" and len(args) < 2):
        print(USAGE, file=sys.stderr)
        return 2
    try:
        mode = "raise" if strict else mode_from(os.environ) or "warn"
    except ValueError as exc:
        print(f"{exc}\n{USAGE}", file=sys.stderr)
        return 2
    check_process(mode)
    if args[0] == "-m":
        sys.argv = [args[1], *args[2:]]
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = args
        runpy.run_path(args[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    # Run the package's copy of this module, the one a .pth may already have started.
    from gpu_demo.autocheck import main as package_main

    sys.exit(package_main())
