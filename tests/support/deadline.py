"""``within(seconds)``: a test that would hang on a looping walk fails instead (SIGALRM).

A walk that follows links in a malformed trace may never end; run it under
this and the test reports the loop. Main thread only, as pytest runs tests.
"""

from __future__ import annotations

import signal
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def within(seconds: float) -> Iterator[None]:
    """Raise ``TimeoutError`` in the block if it runs longer than ``seconds``."""
    def expired(signum, frame):  # noqa: ANN001, ARG001
        raise TimeoutError(f"did not finish within {seconds} s: a walk loops")
    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
