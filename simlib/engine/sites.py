"""Where in the program the host did something: the innermost frame outside the engine, as ``file:line``.

A launch records it (``Launch.site``), as the recorder of real runs records the
user's line: launches of one call site line up across calls. A host value a
capture changed records it too (``HostState.site``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# The engine's own frames (the runtime, tensor methods, streams): a site is the first frame above them.
_ENGINE = str(Path(__file__).resolve().parent) + os.sep

# A site in this checkout is named from its root (``simlib/programs/gallery/frozen.py:30``), so that a
# trace, and a report quoting it, read the same in every checkout.
_CHECKOUT = str(Path(__file__).resolve().parents[2]) + os.sep


def user_site() -> str:
    """``file:line`` of the innermost frame outside the engine: where the program did what it did."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_ENGINE):
        frame = frame.f_back
    return f"{frame.f_code.co_filename.removeprefix(_CHECKOUT)}:{frame.f_lineno}" if frame is not None else ""
