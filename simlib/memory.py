"""Memory as a trace names it: the pools blocks come from, and how a pointer prints.

Both worlds write these names into their traces (the simulator's allocator and
``gpu_demo``'s recorder of real runs) and the checker and the pictures read
them, so they are defined here, beside the trace, once.
"""

from __future__ import annotations

DEFAULT_POOL = "default"


def graph_pool(graph: int) -> str:
    """Name of the private memory pool of captured graph ``graph``."""
    return f"graph{graph}"


def short_ptr(ptr: int) -> str:
    """``0x7e000000c400`` -> ``0x7e…0c400``: the pool prefix and the block offset, as printed."""
    h = f"{ptr:x}"
    return f"0x{h}" if len(h) <= 8 else f"0x{h[:2]}…{h[-5:]}"
