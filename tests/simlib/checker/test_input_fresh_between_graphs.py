"""Rule 18, ``input_fresh_between_graphs``: an op between graphs makes a graph's input anew, elsewhere, every step.

The property test runs it against the simulator: two pieces of a piecewise graph with an eager op
between them (vLLM #53915), whose result is a fresh tensor every step (the old one dropped before the
op runs, after it, or kept) or written into the tensor the second piece captured. Whenever a replay
computed something other than eager, the checker reports ``input_fresh_between_graphs``; when every
replay is right, it does not."""

from __future__ import annotations

from checker_stories import Tracer, W, arg
from hypothesis import event, given, settings
from hypothesis import strategies as st

from simlib.programs.gallery.case import refreshed
from simlib.programs.harness import Program, Session
from simlib.trace import Replay

H1, H2 = W + 4096, W + 8192          # where the op between the pieces writes: at capture, and later


def silu(t: Tracer, out: int, site: str = "model.py:20", nbytes: int = 64):
    return t.launch("silu_and_mul", arg(1, W), arg(3, out, "w", nbytes=nbytes, label="h"), site=site)


def piece(t: Tracer) -> None:
    t.capture(0, lambda: t.launch("down_proj", arg(3, H1, label="h"), arg(4, W + 512, "w")))


def test_an_op_writing_a_fresh_tensor_each_step_leaves_the_next_piece_on_the_captures():
    t = Tracer()
    silu(t, H1)
    piece(t)
    silu(t, H2)
    t.replay(0, 0)
    (f,) = t.check()
    assert f.code == "input_fresh_between_graphs" and f.label == "h" and f.pointers == (H1, H2)
    assert f.step == next(r.step for r in t.records if isinstance(r, Replay))
    assert "'silu_and_mul'" in f.why and "model.py:20" in f.why and "never sees it" in f.why
    assert "out=static_input" in f.fix


def test_an_op_writing_into_the_captured_tensor_is_fine():
    t = Tracer()
    silu(t, H1)
    piece(t)
    for k in range(2):
        silu(t, H1)
        t.replay(0, k)
    assert t.check() == []


def test_a_refresh_by_other_code_or_a_write_of_another_size_is_no_new_input():
    t = Tracer()
    silu(t, H1)
    piece(t)
    silu(t, H2)
    t.launch("copy_", arg(5, H2), arg(3, H1, "w", label="h"), site="runner.py:7")     # copied in: refreshed
    t.replay(0, 0)
    silu(t, H2, nbytes=32)
    t.replay(0, 1)
    assert t.check() == []


def test_without_a_replay_or_from_another_site_nothing_is_reported():
    t = Tracer()
    silu(t, H1)
    piece(t)
    silu(t, H2, site="model.py:40")
    t.replay(0, 0)
    silu(t, H2)
    assert t.check() == []


H = 8


def piecewise(drop: str):
    """Piece 1 (attention) and piece 2 (MLP down) as graphs; the op between them runs eagerly every step."""
    def build(rt):
        x = rt.empty((1, H), "x")
        static = rt.empty((1, 2 * H), "h")
        between = {"h": static, "attn": None}

        def attn_out(k, out):                     # piece 1's output, for the op between
            between["attn"] = out

        def feed(k):
            attn = between["attn"]
            if attn is None:
                return
            if drop == "into static":
                rt.launch("silu_and_mul", reads=[attn], writes=[static], label="h")
                return
            old = between["h"]
            if drop == "before" and old is not static:
                rt.release(old)
            between["h"] = rt.op("silu_and_mul", attn, out_shape=(1, 2 * H), label="h")
            if drop == "after" and old is not static:
                rt.release(old)

        return {"piece1": Program(lambda: rt.op("attention", x, out_shape=(1, H)),
                                  lambda k: refreshed(rt, x, "x", k), [x], after=attn_out),
                "piece2": Program(lambda: rt.op("down_proj", between["h"], out_shape=(1, H)), feed)}
    return build


@settings(max_examples=30, deadline=None, derandomize=True)
@given(drop=st.sampled_from(["into static", "before", "after", "never"]), steps=st.integers(1, 3))
def test_a_replay_reading_the_captures_input_is_always_reported(drop, steps):
    session = Session(piecewise(drop))
    for name in ("piece1", "piece2"):
        session.warm_up(name, calls=1)
    for name in ("piece1", "piece2"):
        session.capture(name)
    for _ in range(steps):
        session.replay("piece1")
        session.replay("piece2")
    result = session.result()
    fresh = "input_fresh_between_graphs" in [f.code for f in result.findings()]
    event(f"fresh={fresh}")
    assert fresh == any(not r.ok for r in result.replays), [str(r) for r in result.replays]
