"""What every ``python -m gpu_demo`` command shares: argument types, the no-CUDA answer, results files."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import torch

from gpu_demo.lab.measure.provenance import RESULTS_DIR, provenance


def no_cuda(command: str, hint: str = "") -> bool:
    """True, after saying so on stderr, when ``command`` needs a CUDA GPU and none is visible."""
    if torch.cuda.is_available():
        return False
    print(f"gpu_demo {command}: needs a CUDA GPU and none is visible{hint}", file=sys.stderr)
    return True


def positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def cannot_write(command: str, flag: str, path: Path, why: str) -> int:
    print(f"gpu_demo {command}: cannot write --{flag.replace('_', '-')} {path}: {why}", file=sys.stderr)
    return 2


def refuse_with_summary(command: str, args: argparse.Namespace, parser: argparse.ArgumentParser,
                        run_flags: tuple[str, ...]) -> int | None:
    """2, after saying why, when a flag of a run on the GPU (``run_flags``, by dest) came with
    ``--summary``, which prints the committed results and runs nothing: a flag said and then ignored
    would answer a question nobody asked; ``None`` when none did."""
    given = [f"--{dest}" for dest in run_flags if getattr(args, dest) != parser.get_default(dest)]
    if not given:
        return None
    print(f"{command}: --summary prints the committed results and runs nothing: leave out {', '.join(given)}, "
          "or leave out --summary to run on a GPU", file=sys.stderr)
    return 2


def refuse_unwritable(command: str, args: argparse.Namespace, *flags: str) -> int | None:
    """2, after saying why, when an output flag of ``args`` names a path that cannot be written
    (checked before a long run rather than after it); ``None`` when every one can be."""
    for flag in flags:
        path = getattr(args, flag, None)
        problem = unwritable(path) if path is not None else None
        if problem:
            return cannot_write(command, flag, path, problem)
    return None


def unwritable(path: Path, *, try_it: bool = True) -> str | None:
    """Why ``path`` cannot be written, checked before a long run rather than after it. A missing
    folder is an error, never created: a typo must not leave a folder behind (``/nonexistent/r.json``).
    A new file is tried for real (made and removed; ``try_it=False`` where several processes ask at
    once): ``os.access`` says yes to root under ``/proc``."""
    if path.is_dir():
        return "it is a directory"
    if path.exists():
        return None if os.access(path, os.W_OK) else "permission denied"
    if not path.parent.exists():
        return f"its folder {path.parent} does not exist (create it first)"
    if not path.parent.is_dir():
        return f"{path.parent} is not a directory"
    if not try_it:
        return None if os.access(path.parent, os.W_OK) else f"permission denied in {path.parent}"
    try:
        path.open("x").close()
    except OSError as exc:
        return exc.strerror or str(exc)
    path.unlink()
    return None


def refuse_overwrite(command: str, args: argparse.Namespace, defaults: dict[str, Path]) -> int | None:
    """Fill each output flag of ``args`` left unset with its default path, or return 2, after
    saying why, when that file is already there: the results under ``gpu_demo/lab/results`` are the
    committed recordings the docs and the notebooks read, replaced only on purpose."""
    for flag, path in defaults.items():
        if getattr(args, flag) is None:
            if path.exists():
                print(f"gpu_demo {command}: {path} is already there (the committed results); pass "
                      f"--{flag.replace('_', '-')} FILE, that path itself to replace them", file=sys.stderr)
                return 2
            setattr(args, flag, path)
    return None


def format_table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(x)) for x in column) for column in zip(headers, *rows)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def cell_text(value: Any) -> str:
    return "" if value is None else (f"{value:.3f}" if isinstance(value, float) else str(value))


def default_path(kind: str) -> Path:
    name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower().removeprefix("nvidia").strip()).strip("-") or "gpu"
    return RESULTS_DIR / f"{kind}-{slug}.json"


def write_result(path: Path, argv: list[str], payload: dict[str, Any]) -> None:
    """``payload`` with provenance as JSON at ``path``, whose folder exists (``unwritable``)."""
    path.write_text(json.dumps({"provenance": provenance(argv), **payload}, indent=1) + "\n")
    print(f"wrote {path}")
