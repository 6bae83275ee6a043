"""What IPython shows for cells that raise: each error's rendered lines, as a learner sees them."""

from __future__ import annotations

import pytest


def tracebacks_shown(*cells: str) -> list[list[str]]:
    """Run ``cells`` in a fresh IPython shell; the lines it would show for each error raised."""
    interactiveshell = pytest.importorskip("IPython.core.interactiveshell")
    shell = interactiveshell.InteractiveShell.instance()
    shown: list[list[str]] = []
    shell._showtraceback = lambda etype, value, stb: shown.append(stb)
    try:
        for cell in cells:
            shell.run_cell(cell)
    finally:
        interactiveshell.InteractiveShell.clear_instance()
    return shown
