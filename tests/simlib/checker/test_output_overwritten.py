"""Rule 13, ``output_overwritten``: a graph's result held from one replay, read after a later replay of
the same graph rewrote it.

The property test runs it against the simulator: a decode loop that keeps each step's logits (a
clone, the static output itself, a view per step, one view taken once) and compares what it kept
(every step stacked, or the newest). Whenever a replay computed something other than eager, the
checker reports ``output_overwritten``; when every replay is right, it does not."""

from __future__ import annotations

from dataclasses import replace

from checker_stories import P, Tracer, W, arg
from hypothesis import event, given, settings
from hypothesis import strategies as st

from simlib.memory import graph_pool
from simlib.programs.gallery.case import refreshed
from simlib.programs.harness import Program, run_program
from simlib.trace import Replay

OUT = 1          # the graph's static output, at P


def decode_graph(t: Tracer) -> None:
    t.capture(0, lambda: (t.alloc(OUT, P, pool=graph_pool(0), label="logits"),
                          t.launch("lm_head", arg(0, W), arg(OUT, P, "w", label="logits"))))


def listed(*tensors: int) -> list:
    return [replace(arg(t, P, label="logits"), name=f"tensors[{i}]", element_of="tensors")
            for i, t in enumerate(tensors)]


def test_a_view_kept_from_one_replay_and_read_after_the_next_is_reported_at_the_read():
    t = Tracer()
    decode_graph(t)
    t.replay(0, 0)
    t.view(10, OUT, P, "step0")                   # logits[-1] kept, no clone
    t.replay(0, 1)
    t.view(11, OUT, P, "step1")
    read = t.launch("argmax", arg(10, P, label="step0"), arg(20, W + 4096, "w"))
    (f,) = t.check()
    assert f.code == "output_overwritten" and f.step == read.step and f.label == "step0"
    assert "after replay #0" in f.why and "'step1'" in f.why and "after replay #1" in f.why
    assert "1 more time since" in f.why and "one reference per step" in f.why and "clone()" in f.fix


def test_reading_right_after_each_replay_or_through_one_view_taken_once_is_clean():
    t = Tracer()
    decode_graph(t)
    t.view(10, OUT, P, "logits_view", shape=(4, 8))   # the whole output, taken once before the loop
    for k in range(3):
        t.replay(0, k)
        t.launch("argmax", arg(OUT, P, label="logits"), arg(20, W + 4096, "w"))
        t.launch("argmax", arg(10, P, label="logits_view"), arg(21, W + 8192, "w"))
        t.view(11 + k, OUT, P, f"step{k}")            # its last row, taken every step and read at once
        t.launch("argmax", arg(11 + k, P, label=f"step{k}"), arg(22, W + 12288, "w"))
    assert t.check() == []


def test_a_list_repeating_the_static_output_after_two_replays_is_reported():
    t = Tracer()
    decode_graph(t)
    t.replay(0, 0)
    t.launch("stack", *listed(OUT), arg(30, W + 4096, "w"))        # one replay: one entry, right
    t.replay(0, 1)
    t.launch("mul", arg(OUT, P, label="logits"), arg(OUT, P, label="logits"), arg(31, W + 8192, "w"))   # x * x
    assert t.check() == []
    stack = t.launch("stack", *listed(OUT, OUT), arg(32, W + 12288, "w"))
    (f,) = t.check()
    assert f.code == "output_overwritten" and f.step == stack.step and f.label == "stack: tensors"
    assert "2 of which lie on the same bytes" in f.why and "replayed 2 times" in f.why


def test_views_sampled_at_once_every_step_and_stacked_at_the_end_are_reported_at_the_stack():
    t = Tracer()
    decode_graph(t)
    for k in range(3):
        t.replay(0, k)
        t.view(10 + k, OUT, P, f"step{k}")
        t.launch("sample", arg(10 + k, P, label=f"step{k}"), arg(20, W + 4096, "w"))
    views = [replace(arg(10 + k, P, label=f"step{k}"), name=f"tensors[{k}]", element_of="tensors") for k in range(3)]
    stack = t.launch("stack", *views, arg(30, W + 8192, "w"))
    (f,) = t.check()
    assert f.step == stack.step and f.label == "step0" and "one reference per step" in f.why


def test_rows_of_one_output_stacked_are_not_one_entry_twice():
    t = Tracer()
    decode_graph(t)
    for k in range(2):
        t.replay(0, k)
    rows = [replace(arg(OUT, P + 32 * i, nbytes=32, label="logits"), name=f"tensors[{i}]", element_of="tensors")
            for i in range(2)]
    t.launch("stack", *rows, arg(30, W + 4096, "w"))
    assert t.check() == []


def test_another_graphs_replay_is_not_this_rules_business():
    t = Tracer()
    decode_graph(t)
    t.capture(1, lambda: t.launch("other", arg(0, W), arg(5, W + 8192, "w")))
    t.replay(0, 0)
    t.view(10, OUT, P, "step0")
    t.replay(1, 0)
    t.view(11, OUT, P, "again")
    t.launch("argmax", arg(10, P, label="step0"))
    assert t.check() == []
    assert [r.graph for r in t.records if isinstance(r, Replay)] == [0, 1]


H = 8
KEEP = {"clone": lambda rt, out: rt.clone(out, label="kept"),
        "output": lambda rt, out: out,
        "view per step": lambda rt, out: rt.view(out, out.shape, label="kept")}


def decode_loop(keep: str, compare: str):
    """Each step's logits kept as ``keep`` says; every step kept so far stacked, or only the newest, compared."""
    def build(rt):
        x = rt.empty((H,), "x")
        kept = []

        def after(k, out):
            if keep == "one view" and kept:
                pass                                          # the view taken at the first step stays
            else:
                kept.append(KEEP.get(keep, KEEP["view per step"])(rt, out))
            return rt.stack(kept, label=f"kept{k}") if compare == "every step" else kept[-1]
        return Program(lambda: rt.op("lm_head", x, out_shape=(H,), label="logits"),
                       lambda k: refreshed(rt, x, "x", k), [x], after=after)
    return build


@settings(max_examples=60, deadline=None, derandomize=True)
@given(keep=st.sampled_from(["clone", "output", "view per step", "one view"]),
       compare=st.sampled_from(["every step", "newest"]), warmups=st.integers(1, 2), replays=st.integers(1, 4))
def test_a_result_read_after_its_graph_replayed_again_is_always_reported(keep, compare, warmups, replays):
    result = run_program(decode_loop(keep, compare), warmups=warmups, replays=replays)
    overwritten = "output_overwritten" in [f.code for f in result.findings()]
    event(f"overwritten={overwritten}")
    assert overwritten == any(not r.ok for r in result.replays), [str(r) for r in result.replays]
