"""Fixtures shared by the simulator's story tests."""

import pytest

from simlib import Runtime


@pytest.fixture
def rt():
    """A runtime whose current stream is a fresh non-default stream, ``main``."""
    rt = Runtime()
    main = rt.Stream("main")
    with rt.stream(main):
        yield rt
