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


VERIFY_LATER = "replay target, replay draft, then verify"
SPEC_STEPS = 2          # speculative steps the runner takes


def drafter(fixed: bool) -> Build:
    """A target model's decode graph and a draft model's graph captured into its pool (``pool=``), the
    target's logits kept as a weak reference; the draft reads the target's hidden state, copied into its
    static input, and the verification (rejection sampling) reads the target's logits after the draft ran.

    The fix is in the runner (``target_then_draft``): it copies the target's logits out right after its
    replay; the programs are the same.
    """
    def build(rt: Runtime) -> Mapping[str, Program]:
        tokens, draft_in = rt.empty((1, H), "tokens"), rt.empty((1, H), "draft_hidden")
        last = {"target": None}

        def model(name: str, x: TensorHandle) -> TensorHandle:
            h = rt.op(f"{name}_layers", x, out_shape=(1, 2 * H), label=f"{name}_hidden")
            logits = rt.op(f"{name}_head", h, out_shape=(1, H), label=f"{name}_logits")
            rt.release(h)
            return logits

        def weak(out: TensorHandle) -> TensorHandle:
            kept = rt.weak_ref(out, label=out.label)
            rt.release(out)
            return kept

        def hand_over(k: int, out: TensorHandle) -> None:
            last["target"] = out

        def draft_feed(k: int) -> None:
            if last["target"] is not None:
                draft_in.copy_(last["target"])           # the draft proposes from the target's state

        return {"target": Program(lambda: model("target", tokens), lambda k: refreshed(rt, tokens, "tok", k),
                                  [tokens], after_capture=weak, after=hand_over),
                "draft": Program(lambda: model("draft", draft_in), draft_feed, [draft_in])}
    return build


def target_then_draft(session: Session, order: str, fixed: bool) -> None:
    """Capture the target, then the draft into its pool; each step replays the target, then the draft,
    then verifies with the target's logits (``fixed``: copied out right after the target's replay)."""
    session.warm_up("target", calls=1)
    session.capture("target")
    session.warm_up("draft", calls=1)
    session.capture("draft", pool_of="target")
    for _ in range(SPEC_STEPS):
        verify = session.replay("target", read=False, copy_out=fixed)
        session.replay("draft")
        verify()


def op_between_pieces(fixed: bool) -> Build:
    """Piecewise graphs: attention and the MLP's down projection are captured pieces, and the op between
    them (``silu_and_mul``) runs eagerly every step, returning a fresh tensor that the next piece reads.

    Fixed: the op writes into the tensor the second piece was captured with (``out=``).
    """
    def build(rt: Runtime) -> Mapping[str, Program]:
        x, static = rt.empty((1, H), "x"), rt.empty((1, 2 * H), "gate_up")
        between: dict[str, TensorHandle | None] = {"attn": None, "act": None}

        def hand_over(k: int, out: TensorHandle) -> None:
            between["attn"] = out

        def activation(k: int) -> None:
            attn = between["attn"]
            if attn is None:
                return
            if fixed:
                rt.launch("silu_and_mul", reads=[attn], writes=[static], label="act")
                between["act"] = static
                return
            old = between["act"]
            between["act"] = rt.op("silu_and_mul", attn, out_shape=(1, 2 * H), label="act")
            if old is not None:
                rt.release(old)                          # the previous step's, dropped when the name is rebound

        def down() -> TensorHandle:
            act = between["act"]
            assert act is not None
            return rt.op("down_proj", act, out_shape=(1, H), label="mlp_out")
        return {"attention": Program(lambda: rt.op("attention", x, out_shape=(1, H), label="attn_out"),
                                     lambda k: refreshed(rt, x, "x", k), [x], after=hand_over),
                "mlp_down": Program(down, activation)}
    return build


def piece_by_piece(session: Session, order: str, fixed: bool) -> None:
    """Warm up and capture both pieces, then run ``order``'s steps: attention, the op between, the MLP."""
    for name in ("attention", "mlp_down"):
        session.warm_up(name, calls=1)
    for name in ("attention", "mlp_down"):
        session.capture(name)
    for _ in range(3):
        session.replay("attention")
        session.replay("mlp_down")
