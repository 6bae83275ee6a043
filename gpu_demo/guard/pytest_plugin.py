"""A pytest plugin: every guard check of a test session runs in one warm worker.

Enable it with ``pytest -p gpu_demo.guard.pytest_plugin`` or, in a ``conftest.py``,
``pytest_plugins = ["gpu_demo.guard.pytest_plugin"]``. The first check of the
session starts the worker (importing torch and your modules, initialising
CUDA); every later ``check_capture`` / ``assert_capture_safe`` reuses it
(``gpu_demo.guard.protocol.worker``). A check that faults retires the worker, and the
next check starts a fresh one, so one bad layer cannot spoil the next test.
"""

from __future__ import annotations

from typing import Iterator

import pytest

from gpu_demo.guard.protocol.worker import Worker, warm_checks


@pytest.fixture(scope="session", autouse=True)
def capture_check_worker() -> Iterator[Worker]:
    """The session's warm worker (request it to see ``.started``, how many processes it has used)."""
    with warm_checks() as worker:
        yield worker
