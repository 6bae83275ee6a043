"""Programs whose hazard lies between graphs: one pool shared by two graphs, a cache one graph created lazily."""

from __future__ import annotations

from typing import Mapping

from ...engine.runtime import Runtime
from ...engine.tensor import TensorHandle
from ..harness import Build, Program, Session
from .case import refreshed
from .frozen import H

READ_LATER = "replay bs1, replay bs2, then read both"
READ_AT_ONCE = "read each output before the next replay"


def shared_pool(fixed: bool) -> Build:
    """Two decode graphs, batch sizes 1 and 2, captured into one pool (``pool=g1.pool()``),
    each output kept as a weak reference, as serving engines do: the second capture may
    take the first graph's output block for its own output.

    The fix is in the runner (``replay_order``'s ``copied_out``): it copies each output out
    before replaying another graph into the pool; the program is the same.
    """
    def build(rt: Runtime) -> Mapping[str, Program]:
        def program(rows: int) -> Program:
            x = rt.empty((rows, H), f"x_bs{rows}")

            def forward() -> TensorHandle:
                h = rt.op("mlp_up", x, out_shape=(rows, 2 * H), label=f"h_bs{rows}")
                out = rt.op("mlp_down", h, out_shape=(rows, H), label=f"out_bs{rows}")
                rt.release(h)
                return out

            def weak(out: TensorHandle) -> TensorHandle:    # weak_ref_tensors(output)
                kept = rt.weak_ref(out, label=out.label)
                rt.release(out)
                return kept
            return Program(forward, lambda k: refreshed(rt, x, "x", k), [x], after_capture=weak)
        return {"bs1": program(1), "bs2": program(2)}
    return build


def capture_in_one_pool(session: Session) -> None:
    session.warm_up("bs1", calls=1)
    session.capture("bs1")
    session.warm_up("bs2", calls=1)
    session.capture("bs2", pool_of="bs1")


def replay_order(session: Session, order: str, copied_out: bool) -> None:
    """Replay both graphs, reading each output at once (``READ_AT_ONCE``) or after both
    replays (``READ_LATER``); ``copied_out`` (the fix) copies each output out right after its replay."""
    capture_in_one_pool(session)
    if order == READ_AT_ONCE:
        session.replay("bs1", copy_out=copied_out)
        session.replay("bs2", copy_out=copied_out)
        return
    first = session.replay("bs1", read=False, copy_out=copied_out)
    second = session.replay("bs2", read=False, copy_out=copied_out)
    first()
    second()


def lazy_cache(fixed: bool) -> Build:
    """A decoder whose cache is created on first use, ``torch.zeros`` included: the first
    use is inside the capture of the bs1 graph, so the zero fill is a node of that graph
    and reruns on every replay of it, over what the bs2 graph appended since.

    Fixed: the cache is created (and zeroed) before any capture.
    """
    def build(rt: Runtime) -> Mapping[str, Program]:
        model: dict[str, TensorHandle | None] = {"cache": rt.zeros((8, H), "cache") if fixed else None}

        def program(rows: int) -> Program:
            x = rt.empty((rows, H), f"x_bs{rows}")

            def forward() -> TensorHandle:
                cache = model["cache"]
                if cache is None:
                    cache = model["cache"] = rt.zeros((8, H), "cache")
                rt.launch("cache_append", reads=[cache, x], writes=[cache], label=f"append_bs{rows}")
                return rt.op("attend", x, cache, out_shape=(rows, H), label=f"attn_bs{rows}")
            return Program(forward, lambda k: refreshed(rt, x, "x", k), [x])
        return {"bs1": program(1), "bs2": program(2)}
    return build


def captured_first(session: Session, order: str, fixed: bool) -> None:
    """Capture bs1 first, with no eager call before it (the cache's first use is in the
    capture), then warm up and capture bs2, then replay in ``order``."""
    session.capture("bs1")
    session.warm_up("bs2", calls=1)
    session.capture("bs2")
    for name in order.split():
        session.replay(name)
