"""A warm child process for many checks: torch and the user's modules are imported once.

``run_in_child`` starts a fresh interpreter per call, and importing torch (and
transformers, timm, the user's package), initialising CUDA and compiling kernels
costs seconds every time. Inside ``warm_checks()`` the guard hands its checks to
one ``Worker`` instead: a child started once (``python -m gpu_demo.guard.protocol.worker``),
fed one call at a time over a socket, answering with exactly what ``run_in_child``
answers (checkpoints, ``child_error``).

It is as isolated from the caller as a fresh child: a fault kills the worker,
never the caller, and the caller gets the last checkpoint and the reason. A
worker is retired after any call that may have left its CUDA context or
streams unusable (a result saying ``"retire": True``, a ``child_error``, a
death, a timeout); the next call starts a new one. What a call leaves behind
in the worker's modules stays for the next call, like two tests in one pytest
session: the guard builds a fresh instance per check, and the recorder takes
its hooks off when it stops.
"""

from __future__ import annotations

import importlib
import json
import os
import pickle
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from contextlib import contextmanager
from multiprocessing.connection import Connection
from typing import Any, Iterator

from gpu_demo.guard.protocol.child import ChildError, child_env, run_in_child

_session: list["Worker"] = []


class Worker:
    """One warm child; ``run`` has ``run_in_child``'s signature and answer."""

    def __init__(self) -> None:
        self._process: subprocess.Popen[bytes] | None = None
        self._connection: Connection | None = None
        self._stderr: Any = None
        self._lock = threading.Lock()
        self.started = 0
        """how many processes this worker has started (a retired one is replaced on the next call)"""

    def run(self, entry: str, payload: dict[str, Any], timeout: float) -> dict[str, Any]:
        """``entry(payload, checkpoint)`` in the warm child; its result, or what it left and why it died."""
        with self._lock:
            if self._connection is None:
                self._start()
            assert self._connection is not None
            known: dict[str, Any] = {}
            deadline = time.monotonic() + timeout
            try:
                self._connection.send(("run", entry, list(sys.path), pickle.dumps(payload)))
                while True:
                    left = deadline - time.monotonic()
                    if left <= 0 or not self._connection.poll(left):
                        raise TimeoutError(f"the worker ran past {timeout} s and was killed")
                    kind, partial = self._connection.recv()
                    known.update(partial)
                    if kind == "done":
                        break
            except (EOFError, OSError, TimeoutError) as exc:
                known["child_error"] = self._death(exc).to_dict()
            if known.get("retire") or "child_error" in known:
                self.close()
            return known

    def close(self) -> None:
        """Stop the child (politely, then by force)."""
        if self._connection is not None:
            try:
                self._connection.send(("stop",))
            except OSError:
                pass
            self._connection.close()
            self._connection = None
        if self._process is not None:
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def _start(self) -> None:
        ours, theirs = socket.socketpair()
        self._stderr = tempfile.TemporaryFile()
        self._process = subprocess.Popen(
            [sys.executable, "-m", "gpu_demo.guard.protocol.worker", str(theirs.fileno())],
            pass_fds=[theirs.fileno()], stdout=self._stderr, stderr=self._stderr, env=child_env())
        theirs.close()
        self._connection = Connection(ours.detach())
        self.started += 1

    def _death(self, exc: BaseException) -> ChildError:
        if isinstance(exc, TimeoutError) and self._process is not None:
            self._process.kill()
        if self._process is not None:
            try:
                self._process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._process.kill()
        self._stderr.seek(0)
        stderr = self._stderr.read().decode(errors="replace")
        if isinstance(exc, TimeoutError):
            stderr += f"\n{exc}"
        return ChildError.died(stderr, "worker")


@contextmanager
def warm_checks() -> Iterator[Worker]:
    """Checks inside share one warm worker (``run_checked``); it is stopped at the end."""
    worker = Worker()
    _session.append(worker)
    try:
        yield worker
    finally:
        _session.remove(worker)
        worker.close()


def run_checked(entry: str, payload: dict[str, Any], timeout: float) -> dict[str, Any]:
    """``run_in_child``, or the innermost ``warm_checks()`` worker's ``run`` when one is open."""
    if _session:
        return _session[-1].run(entry, payload, timeout)
    return run_in_child(entry, payload, timeout)


def main(fd: int) -> None:
    """The worker side: answer calls until told to stop or the caller goes away. Answers travel
    as JSON would (``run_in_child``'s answer, exactly)."""
    connection = Connection(fd)
    while True:
        try:
            message = connection.recv()
        except EOFError:
            break
        if message[0] == "stop":
            break
        _, entry, sys_path, payload = message
        known: dict[str, Any] = {}

        def checkpoint(partial: dict[str, Any]) -> None:
            known.update(partial)
            connection.send(("checkpoint", json.loads(json.dumps(partial))))

        try:
            sys.path[:] = [*sys_path, *(p for p in sys.path if p not in sys_path)]
            module_name, _, function = entry.partition(":")
            run = getattr(importlib.import_module(module_name), function)
            result = run(pickle.loads(payload), checkpoint)
        except BaseException as exc:  # everything the worker knows goes back, the reason included
            text = "".join(traceback.format_exception(exc))
            print(text, file=sys.stderr, flush=True)
            result = {"child_error": ChildError.raised(exc, text).to_dict()}
        connection.send(("done", json.loads(json.dumps(result))))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(int(sys.argv[1]))
