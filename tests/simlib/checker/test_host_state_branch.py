"""Rule 16, ``host_state_branch``: a host int or flag the captured code changed, which replays never change again.

The property test runs it against the simulator: a sliding-window cache that counts the tokens it has
seen (transformers 5's ``StaticSlidingWindowLayer.cumulative_length_int``) and rolls once the window is
full, with the count on the host or, like ``StaticLayer``'s, on the device. Whenever a replay computed
something other than eager, the checker warns ``host_state_branch``; the device counter never does."""

from __future__ import annotations

from checker_stories import Tracer, W, arg, numbers
from hypothesis import event, given, settings
from hypothesis import strategies as st

from simlib.checker import WARNING
from simlib.checker.verdict import verdict
from simlib.glossary import CORRECT, SILENT_WRONG
from simlib.programs.gallery.case import refreshed
from simlib.programs.harness import Program, run_program
from simlib.trace import Capture, HostState


def counted(t: Tracer, *, error: str | None = None) -> HostState:
    t.add(Capture(t._step(), 0.0, "begin", 0, "capture"))
    t.graph = 0
    t.launch("attend", arg(1, W), arg(2, W + 512, "w"))
    change = t.add(HostState(t._step(), 0.0, 0, "layers.3", "cumulative_length_int", "4", "5", "cache.py:88"))
    t.graph = None
    t.add(Capture(t._step(), 0.0, "end", 0, "capture", error=error))
    return change


def test_a_host_counter_the_capture_advanced_is_a_warning_at_the_captures_end():
    t = Tracer()
    change = counted(t)
    (f,) = t.check()
    assert (f.rule, f.code, f.severity, f.step) == (16, "host_state_branch", WARNING, change.step)
    assert f.label == "layers.3.cumulative_length_int" and "was 4 when graph 0's capture began and 5" in f.why
    assert "at cache.py:88" in f.why and "stays 5" in f.why and "device" in f.fix


def test_a_failed_capture_has_no_graph_and_so_no_host_state_finding():
    t = Tracer()
    counted(t, error="cudaErrorStreamCaptureUnsupported")
    assert numbers(t.check()) == [0]


def test_a_warning_alone_is_not_a_race_in_the_verdict():
    t = Tracer()
    counted(t)
    assert verdict(CORRECT, t.check()) == CORRECT and verdict(SILENT_WRONG, t.check()) == SILENT_WRONG


H = 8


def sliding_window(window: int, on_device: bool):
    """A cache of ``window`` rows: append while it fills, roll once full; the count of tokens seen on
    the host (an int the captured ``update`` advances) or on the device (a tensor a kernel advances)."""
    def build(rt):
        x, cache = rt.empty((1, H), "x"), rt.zeros((window, H), "cache")
        layer = rt.host_object("layer", cumulative_length=0)
        seen = rt.zeros((1,), "cumulative_length")

        def forward():
            if on_device:     # one kernel reads the count and picks the branch on the device
                rt.launch("update_by_count", reads=[cache, x, seen], writes=[cache], label="update")
                rt.launch("count", reads=[seen], writes=[seen])
            else:
                full = layer.cumulative_length >= window
                rt.launch("roll_append" if full else "append", reads=[cache, x], writes=[cache], label="update")
                layer.cumulative_length += 1
            return rt.op("attend", x, cache, out_shape=(1, H))
        return Program(forward, lambda k: refreshed(rt, x, "x", k), [x])
    return build


@settings(max_examples=30, deadline=None, derandomize=True)
@given(window=st.integers(1, 6), on_device=st.booleans(), warmups=st.integers(0, 2), replays=st.integers(1, 4))
def test_a_replay_wrong_because_of_host_state_is_always_warned_and_a_device_counter_never(window, on_device,
                                                                                         warmups, replays):
    result = run_program(sliding_window(window, on_device), warmups=warmups, replays=replays)
    codes = [f.code for f in result.findings()]
    wrong = any(not r.ok for r in result.replays)
    event(f"wrong={wrong}, on_device={on_device}")
    assert ("host_state_branch" in codes) == (not on_device)
    assert not wrong or "host_state_branch" in codes, [str(r) for r in result.replays]
