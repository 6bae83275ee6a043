"""Programs that free a block a graph still uses: a workspace resized for a bigger batch, or freed inside capture."""

from __future__ import annotations

from typing import Mapping

from ...engine.runtime import Runtime
from ...engine.tensor import TensorHandle
from ..harness import Build, Program, Session
from .case import refreshed
from .frozen import H

PLAN = 8                  # plan entries per batch row


def workspace_resized(fixed: bool) -> Build:
    """An attention wrapper whose workspace holds the plan the host writes before every call
    (``wrapper.plan(...)``); a bigger batch makes it ``resize_`` the workspace, freeing the
    block the graphs captured before still read.

    Fixed: the workspace is sized once, for the largest batch, before any capture.
    """
    def build(rt: Runtime) -> Mapping[str, Program]:
        wrapper = {"workspace": rt.empty((PLAN * (8 if fixed else 1),), "workspace", itemsize=4)}

        def program(rows: int) -> Program:
            x = rt.empty((rows, H), f"x_bs{rows}")

            def feed(k: int) -> None:
                refreshed(rt, x, "x", k)
                ws = wrapper["workspace"]
                if ws.numel < PLAN * rows:                       # too small for this batch: grow it
                    rt.resize_(ws, (PLAN * rows,))
                plan = rt.from_host((PLAN * rows,), "plan_host", value=f"plan{k}", itemsize=4)
                head = rt.view(ws, (PLAN * rows,), label="workspace")
                rt.copy_(head, plan)
                rt.release(plan)
                rt.release(head)

            def forward() -> TensorHandle:
                plan = rt.view(wrapper["workspace"], (PLAN * rows,), label=f"plan_bs{rows}")
                out = rt.op("attention", x, plan, out_shape=(rows, H), label=f"attn_bs{rows}")
                rt.release(plan)
                return out
            return Program(forward, feed, [x])
        return {"bs1": program(1), "bs8": program(8)}
    return build


def two_batch_sizes(session: Session, order: str, fixed: bool) -> None:
    """Capture bs1, then bs8 (whose first call resizes the workspace), then replay both."""
    for name in ("bs1", "bs8"):
        session.warm_up(name, calls=2)
        session.capture(name)
    for name in order.split():
        session.replay(name)


def workspace_freed_in_capture(fixed: bool) -> Build:
    """A plugin whose workspace holds a table it builds once, on the first call; at the end of
    the captured call it frees the workspace, as if the graph kept what it captured.

    Fixed: the workspace stays alive, held as long as the graph is.
    """
    def build(rt: Runtime) -> Program:
        x = rt.empty((4, H), "x")
        plugin: dict[str, TensorHandle | None] = {"workspace": None}

        def forward() -> TensorHandle:
            ws = plugin["workspace"]
            if ws is None:
                ws = plugin["workspace"] = rt.empty((4, H), "workspace")
                rt.launch("build_table", writes=[ws], label="build table")
            out = rt.op("gemm", x, ws, out_shape=(4, H))
            if rt.is_current_stream_capturing() and not fixed:
                rt.release(ws)                                   # "the graph has it now"
                plugin["workspace"] = None
            return out
        return Program(forward, lambda k: refreshed(rt, x, "x", k), [x])
    return build
