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
What the .pth runs at start-up is ``gpu_demo.guard.startup``: it imports nothing heavy.

The checking itself is ``gpu_demo.guard.process`` (``check_process``, and
``capture_checked()`` for one block of a test or a script).
"""

from __future__ import annotations

import builtins
import os
import runpy
import sys
import traceback
import types
from pathlib import Path
from typing import Callable, Sequence

from gpu_demo.guard.process import check_process, process_checker
from gpu_demo.guard.startup import check_process_from_env, mode_from

__all__ = ["check_process_from_env", "main", "mode_from", "process_checker"]

USAGE = "usage: python -m gpu_demo.autocheck [--strict] (script.py | -m module) [args...]"
HELP = USAGE + """

Run a Python script (or -m module) exactly as `python script.py` would, with every
CUDA-graph capture recorded and checked (gpu_demo.guard.process): the same sys.argv,
sys.path[0] (the script's folder; the current folder for -m), __main__ and exit code.

  --strict   raise AssertionError at the end of a capture with a finding
             (default: CAPTURE_ORDER_CHECK's mode, else warn with CaptureHazardWarning)

Exit code: the program's own; 2 when the script cannot be opened or on bad usage."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run a script or module (``python -m gpu_demo.autocheck``) with every capture checked."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] in (["-h"], ["--help"]):
        print(HELP)
        return 0
    strict = bool(args) and args[0] == "--strict"
    args = args[strict:]
    if not args or (args[0] == "-m" and len(args) < 2):
        print(USAGE, file=sys.stderr)
        return 2
    try:
        mode = "raise" if strict else mode_from(os.environ) or "warn"
    except ValueError as exc:
        print(f"{exc}\n{USAGE}", file=sys.stderr)
        return 2
    if args[0] == "-m":
        check_process(mode)
        sys.argv = [args[1], *args[2:]]
        sys.path[0] = os.getcwd()   # what `python -m module` puts first
        return _as_python_would(lambda: runpy.run_module(args[1], run_name="__main__", alter_sys=True))
    script = Path(args[0])
    try:
        source = script.read_bytes()
    except OSError as exc:   # python's own words for a script it cannot open
        print(f"python -m gpu_demo.autocheck: can't open file {str(script.resolve())!r}: "
              f"[Errno {exc.errno}] {exc.strerror}", file=sys.stderr)
        return 2
    check_process(mode)
    sys.argv = args
    sys.path[0] = str(script.resolve().parent)   # what `python script.py` puts first
    return _as_python_would(lambda: _run_as_main(script, source))


def _run_as_main(script: Path, source: bytes) -> None:
    """Execute ``source`` as ``__main__``, in a new module that *is* ``sys.modules["__main__"]``
    (so pickle, ``import __main__`` and dataclasses see the script's own names)."""
    main_module = types.ModuleType("__main__")
    main_module.__file__ = str(script)
    main_module.__builtins__ = builtins
    sys.modules["__main__"] = main_module
    exec(compile(source, str(script), "exec"), main_module.__dict__)


def _as_python_would(run: Callable[[], object]) -> int:
    """Run the program; an uncaught exception prints its traceback from the program's frames on
    (not this module's) and exits 1, as ``python script.py`` does; ``SystemExit`` passes through."""
    try:
        run()
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException as exc:
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename in (__file__, runpy.__file__):
            tb = tb.tb_next
        traceback.print_exception(type(exc), exc, tb)
        return 1
    return 0
