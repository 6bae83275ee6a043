"""Run one function in a fresh Python process, so a device fault cannot kill the caller.

``run_in_child("pkg.module:function", payload)`` pickles ``payload`` (tensors and
objects pickled by reference travel too), starts ``python -m gpu_demo.guard.protocol.child``
with the caller's ``sys.path``, and calls ``function(payload, checkpoint)`` there.
The function returns a JSON-able dict. ``checkpoint(partial)`` writes what is
known so far, so a child that dies hard (a segfault, a hung context killed by
the timeout) still hands back everything up to its last checkpoint, plus
``child_error`` (a ``ChildError``): the last line of its stderr and the tail of it.

A Python exception in the child is caught there: the result is the last
checkpoint plus ``child_error`` with the traceback. The child leaves with
``os._exit`` (a faulted CUDA context can hang or crash on a normal exit).
"""

from __future__ import annotations

import importlib
import json
import os
import pickle
import subprocess
import sys
import tempfile
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

Checkpoint = Callable[[dict[str, Any]], None]
DETAIL_CHARS = 3000   # the tail of a traceback or of stderr that a ChildError keeps


@dataclass(frozen=True)
class ChildError:
    """Why a child handed back less than a whole result: the one line a report shows, and the
    tail of what the child printed (its traceback, or its stderr when it died). It travels as
    ``result["child_error"]`` (``to_dict``)."""

    message: str
    detail: str = ""

    @classmethod
    def raised(cls, exc: BaseException, detail: str = "") -> ChildError:
        """A Python exception, caught: its type and first line."""
        return cls(f"{type(exc).__name__}: {exc}".splitlines()[0], detail[-DETAIL_CHARS:])

    @classmethod
    def died(cls, stderr: str, process: str) -> ChildError:
        """A ``process`` that died (a crash, a kill): the last line it printed."""
        lines = stderr.strip().splitlines()
        return cls(lines[-1] if lines else f"the {process} process died without a word", stderr[-DETAIL_CHARS:])

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


def run_in_child(entry: str, payload: dict[str, Any], timeout: float) -> dict[str, Any]:
    """``entry(payload, checkpoint)`` in its own process; its result, or what it left and why it died."""
    with tempfile.TemporaryDirectory(prefix="gpu_demo_child_") as tmp:
        payload_path, result_path = Path(tmp) / "payload.pkl", Path(tmp) / "result.json"
        # The payload is pickled inside: the child sets sys.path before it unpickles objects by reference.
        payload_path.write_bytes(pickle.dumps({"sys_path": list(sys.path), "payload": pickle.dumps(payload)}))
        command = [sys.executable, "-m", "gpu_demo.guard.protocol.child", entry, str(payload_path), str(result_path)]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=child_env())
            died = done.returncode != 0
            stderr = done.stderr
        except subprocess.TimeoutExpired as exc:
            died = True
            stderr = (exc.stderr or b"").decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
            stderr += f"\nthe child process ran past {timeout} s and was killed"
        result = json.loads(result_path.read_text()) if result_path.exists() else {}
    if died and "child_error" not in result:
        result["child_error"] = ChildError.died(stderr, "child").to_dict()
    return result


def child_env() -> dict[str, str]:
    """This process's environment, with the package's root first on ``PYTHONPATH``."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [_repo_root(), os.environ.get("PYTHONPATH")]))}


def main(argv: list[str]) -> None:
    """The child side: ``python -m gpu_demo.guard.protocol.child MODULE:FUNCTION PAYLOAD RESULT``."""
    entry, payload_path, result_path = argv
    result_file = Path(result_path)
    known: dict[str, Any] = {}

    def checkpoint(partial: dict[str, Any]) -> None:
        known.update(partial)
        scratch = result_file.with_suffix(".tmp")
        scratch.write_text(json.dumps(known))
        scratch.replace(result_file)

    status = 0
    try:
        sent = pickle.loads(Path(payload_path).read_bytes())
        sys.path[:] = [*sent["sys_path"], *(p for p in sys.path if p not in sent["sys_path"])]
        module_name, _, function = entry.partition(":")
        run = getattr(importlib.import_module(module_name), function)
        checkpoint(run(pickle.loads(sent["payload"]), checkpoint))
    except BaseException as exc:  # everything the child knows goes back, the reason included
        status = 1
        text = "".join(traceback.format_exception(exc))
        checkpoint({"child_error": ChildError.raised(exc, text).to_dict()})
        print(text, file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _repo_root() -> str:
    return str(Path(__file__).resolve().parents[3])


if __name__ == "__main__":
    main(sys.argv[1:])
