"""Rule 15, ``view_frozen``: a captured launch was handed a view whose offset or size a host int sets per call.

The property test runs it against the simulator: a cache read at a row, or over a prefix, that a
host position sets, ``pos = (a * k + b) % M`` in call ``k`` (constant when ``a`` is 0). Whenever a
replay computed something other than eager, the checker reports ``view_frozen``; when every replay
is right, it does not."""

from __future__ import annotations

from checker_stories import Tracer, W, arg, numbers
from hypothesis import event, given, settings
from hypothesis import strategies as st

from simlib.checker import ERROR
from simlib.programs.gallery.case import refreshed
from simlib.programs.harness import Program, run_program
from simlib.trace import Arg, Launch

CACHE, END = W + 4096, W + 4096 + 1024        # a cache of 1 KiB: its views end where it ends


def view(ptr: int, rows: int = 1, label: str = "cache") -> Arg:
    nbytes = 64 * rows
    return Arg("in1", 9, label, ptr, nbytes // 2, (rows, 32), nbytes, "r", END - ptr)


def attend(t: Tracer, cache: Arg, q_shape: tuple[int, ...] = (1, 32)) -> None:
    t.launch("attend", arg(1, W, shape=q_shape), cache, arg(2, W + 512, "w", shape=q_shape))


def calls(t: Tracer, views: list[Arg], capture: Arg, q_shapes=None) -> None:
    q_shapes = q_shapes or [(1, 32)] * (len(views) + 1)
    for v, q in zip(views, q_shapes):
        t.call("warmup", lambda v=v, q=q: attend(t, v, q))
    t.call("capture", lambda: t.capture(0, lambda: attend(t, capture, q_shapes[-1])))


def test_a_cache_row_that_moves_every_call_is_frozen_by_the_graph():
    t = Tracer()
    calls(t, [view(CACHE), view(CACHE + 64)], view(CACHE + 128))
    (f,) = t.check()
    assert (f.rule, f.code, f.severity) == (15, "view_frozen", ERROR) and f.label == "attend: cache"
    assert f.step == next(r.step for r in t.records if isinstance(r, Launch) and r.graph == 0)
    assert "another offset" in f.why and "2 earlier calls" in f.why and "model.py:10" in f.why
    assert "(1, 32) at " + hex(CACHE + 128) in f.why and "device tensor" in f.fix


def test_a_prefix_that_grows_every_call_is_frozen_too():
    t = Tracer()
    calls(t, [view(CACHE, rows=1)], view(CACHE, rows=3))
    (f,) = t.check()
    assert "another size" in f.why and "(3, 32)" in f.why


def test_a_view_constant_across_calls_is_fine():
    t = Tracer()
    calls(t, [view(CACHE + 64), view(CACHE + 64)], view(CACHE + 64))
    assert t.check() == []


def test_calls_of_another_batch_size_change_other_arguments_and_are_not_compared():
    t = Tracer()
    calls(t, [view(CACHE, rows=2)], view(CACHE, rows=1), q_shapes=[(2, 32), (1, 32)])   # a graph per batch size
    assert t.check() == []


def test_a_fresh_tensor_every_call_is_not_a_moving_view():
    t = Tracer()
    fresh = [Arg("in1", 9, "k", W + 8192 * i, 32, (1, 32), 64, "r", 64) for i in range(1, 4)]
    calls(t, fresh[:2], fresh[2])
    assert t.check() == []


def test_without_call_records_nothing_is_compared():
    t = Tracer()
    attend(t, view(CACHE))
    t.capture(0, lambda: attend(t, view(CACHE + 64)))
    assert numbers(t.check()) == []


M, H = 7, 8


def cache_reader(a: int, b: int, kind: str):
    """Each call reads the cache at host position ``pos = (a * k + b) % M``: one row, or the prefix up to it."""
    def build(rt):
        x, cache = rt.empty((1, H), "x"), rt.from_host((M, H), "cache", value="kv")
        host = {"pos": 0}

        def feed(k):
            refreshed(rt, x, "x", k)
            host["pos"] = (a * k + b) % M

        def forward():
            pos = host["pos"]
            seen = rt.view(cache, (1, H), offset=pos * H) if kind == "row" else rt.view(cache, (pos + 1, H))
            out = rt.op("attend", x, seen, out_shape=(1, H))
            rt.release(seen)
            return out
        return Program(forward, feed, [x])
    return build


@settings(max_examples=60, deadline=None, derandomize=True)
@given(a=st.integers(0, M - 1), b=st.integers(0, M - 1), kind=st.sampled_from(["row", "prefix"]),
       warmups=st.integers(1, 2), replays=st.integers(1, 3))
def test_a_replay_wrong_because_of_a_frozen_view_is_always_reported(a, b, kind, warmups, replays):
    result = run_program(cache_reader(a, b, kind), warmups=warmups, replays=replays)
    frozen = "view_frozen" in [f.code for f in result.findings()]
    event(f"frozen={frozen}")
    assert frozen == any(not r.ok for r in result.replays), [str(r) for r in result.replays]
