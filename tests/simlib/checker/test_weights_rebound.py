"""Rule 14, ``weights_rebound``: a tensor a graph uses was rebound on its owner after the capture.

The property test runs it against the simulator: a weight sync every few steps, either rebinding the
module's weight to a new tensor (``module.weight = nn.Parameter(new)``) or copying into it in place,
the old tensor kept alive or not. Whenever a replay computed something other than eager, the checker
reports ``weights_rebound`` (and rule 10 does not report the old tensor's free again); a sync in
place is never reported."""

from __future__ import annotations

from checker_stories import Tracer, W, arg, numbers
from hypothesis import event, given, settings
from hypothesis import strategies as st

from simlib.programs.gallery.case import refreshed
from simlib.programs.harness import Program, run_program

WEIGHT, NEW = (5, W + 4096), (6, W + 8192)


def linear_graph(t: Tracer) -> None:
    t.alloc(WEIGHT[0], WEIGHT[1], label="weight")
    t.capture(0, lambda: t.launch("linear", arg(1, W), arg(*WEIGHT, label="weight"), arg(2, W + 512, "w")))


def test_a_weight_rebound_after_the_capture_is_reported_at_the_rebind_when_the_graph_replays():
    t = Tracer()
    linear_graph(t)
    t.replay(0, 0)
    rebind = t.rebind("model.layers.0.mlp", "weight", WEIGHT, NEW)
    assert t.check() == []                               # no replay since: nothing read the old one
    t.replay(0, 1)
    (f,) = t.check()
    assert f.code == "weights_rebound" and f.step == rebind.step and f.label == "model.layers.0.mlp.weight"
    assert f.pointers == (WEIGHT[1], NEW[1]) and "'linear'" in f.why and "replay #1" in f.why
    assert "copy_(new)" in f.fix and "capture the graph again" in f.fix


def test_a_rebind_before_the_capture_or_onto_the_same_memory_changes_nothing_a_graph_sees():
    t = Tracer()
    t.rebind("mlp", "weight", (4, W + 4096), WEIGHT)      # before: the capture reads the new one
    linear_graph(t)
    t.rebind("mlp", "weight", WEIGHT, (7, WEIGHT[1]))    # nn.Parameter(weight.data): a new object, same memory
    t.replay(0, 0)
    assert t.check() == []


def test_a_rebind_finds_every_graph_captured_before_it_and_none_captured_after():
    # The checker indexes captures by address only when the first rebind comes (most programs make
    # none): the graphs captured before each rebind are the ones it can reach, whenever they were indexed.
    t = Tracer()
    linear_graph(t)                                                  # graph 0 reads WEIGHT
    t.capture(1, lambda: t.launch("proj", arg(3, W + 1024), arg(*WEIGHT, label="weight"), arg(4, W + 1536, "w")))
    first = t.rebind("mlp", "weight", WEIGHT, NEW)
    t.capture(2, lambda: t.launch("proj", arg(3, W + 1024), arg(*NEW, label="weight"), arg(4, W + 2048, "w")))
    second = t.rebind("mlp", "weight", NEW, (7, W + 12288))
    for gid in (0, 1, 2):
        t.replay(gid, 0)
    found = t.check()
    assert numbers(found) == [14, 14, 14]
    by_graph = {f.why.split("Graph ", 1)[1].split(" ", 1)[0]: f for f in found}
    assert {g: f.step for g, f in by_graph.items()} == {"0": first.step, "1": first.step, "2": second.step}
    assert by_graph["2"].pointers == (NEW[1], W + 12288)


def test_the_old_tensors_free_is_rule_14s_and_not_reported_again_by_rule_10():
    t = Tracer()
    linear_graph(t)
    t.rebind("mlp", "weight", WEIGHT, NEW)
    t.free(WEIGHT[1], label="weight")
    t.alloc(9, WEIGHT[1], label="someone_else")
    t.replay(0, 0)
    assert numbers(t.check()) == [14]


def test_a_tensor_rebound_inside_the_capture_and_freed_is_rule_10s():
    # vLLM #11596's buffer re-bound in forward: the capture itself read the old tensor, then let it go.
    t = Tracer()
    t.alloc(WEIGHT[0], WEIGHT[1], label="buf")
    def body() -> None:
        t.launch("clone", arg(*WEIGHT, label="buf"), arg(*NEW, "w", label="buf"))
        t.rebind("mlp", "buf", WEIGHT, NEW)
        t.free(WEIGHT[1], label="buf")
    t.capture(0, body)
    t.replay(0, 0)
    assert numbers(t.check()) == [10]


H = 8


def weight_sync(every: int, in_place: bool, keep_old: bool):
    """A policy whose weights the trainer syncs before every ``every``-th call."""
    def build(rt):
        x = rt.empty((H,), "x")
        mlp = rt.host_object("policy.mlp", weight=rt.from_host((H,), "weight", value="w0"))
        kept = []

        def feed(k):
            refreshed(rt, x, "x", k)
            if k % every:
                return
            new = rt.from_host((H,), "weight", value=f"w{k}")
            if in_place:
                mlp.weight.copy_(new)                 # load_weights into the captured parameter
                rt.release(new)
                return
            if keep_old:
                kept.append(rt.view(mlp.weight, (H,), label="old_weight"))
            rt.rebind(mlp, "weight", new)               # module.weight = nn.Parameter(new)
        return Program(lambda: rt.op("linear", x, mlp.weight, out_shape=(H,)), feed, [x])
    return build


@settings(max_examples=40, deadline=None, derandomize=True)
@given(every=st.integers(1, 5), in_place=st.booleans(), keep_old=st.booleans(), replays=st.integers(1, 4))
def test_a_replay_wrong_after_a_weight_sync_is_always_reported(every, in_place, keep_old, replays):
    result = run_program(weight_sync(every, in_place, keep_old), replays=replays)
    codes = [f.code for f in result.findings()]
    wrong = any(not r.ok for r in result.replays)
    event(f"wrong={wrong}")
    assert ("weights_rebound" in codes) == wrong, ([str(r) for r in result.replays], codes)
    assert "freed_under_graph" not in codes
