"""What a user sees when a capture fails inside ``with rt.graph(...)``: ``StreamCaptureInvalidated``
from ending the capture, raised over the first error (its ``__context__``)."""

from __future__ import annotations

import re
from contextlib import contextmanager
from typing import Iterator

import pytest

from simlib import StreamCaptureInvalidated
from simlib.engine.errors import first_error


@contextmanager
def raises_first(error: type[BaseException], match: str | None = None) -> Iterator[None]:
    """Expect ``StreamCaptureInvalidated`` whose first error is an ``error`` matching ``match``."""
    with pytest.raises(StreamCaptureInvalidated, match="previous error during capture") as seen:
        yield
    first = first_error(seen.value)
    assert isinstance(first, error), f"the first error is {first!r}, not a {error.__name__}"
    if match is not None:
        assert re.search(match, str(first)), (match, str(first))
    assert first.code in str(seen.value)          # the error the user sees names its cause
