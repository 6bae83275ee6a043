"""The checker reads plain records: a recorder's trace is enough, and a trace round-trips through JSON."""

from __future__ import annotations

import pytest
from checker_stories import plain_arg, reorder_fix, warm_up_and_capture

from simlib.checker import check
from simlib.trace import Capture, Launch, Mutation, Replay, Trace


def test_plain_records_like_a_recorders_are_enough():
    """No engine objects, no Alloc/Free, a zero-element op recorded as a Launch, and deps
    that name no earlier node (a later one, an unknown one): they add no path, and no crash."""
    x_ptr, in_ptr = 0x7F3A_0000_0000, 0x7F3A_0001_0000

    trace = Trace(records=[
        Capture(0, 0.0, "begin", 0, "main"),
        Launch(1, 1.0, 10, "rms_norm", "x", "norm", "main",
               (plain_arg(1, "hidden", in_ptr, 8, "r"), plain_arg(2, "x", x_ptr, 8, "w")), 0, deps=(11,)),
        Mutation(2, 2.0, "set_", 2, "x", x_ptr, 8, (8,), 0, 0, (0,), 0, "dispose_tensor"),
        Launch(3, 3.0, 11, "shared_expert_into", "shared", "shared", "alt",
               (plain_arg(2, "x", 0, 0, "r"), plain_arg(3, "out", x_ptr + 4096, 8, "w")), 0, deps=(10, 99)),
        Capture(4, 4.0, "end", 0, "main", inputs=(in_ptr,)),
        Replay(5, 5.0, 0, 0, "main"),
    ])
    assert [(f.rule, f.label) for f in check(trace)] == [(1, "x"), (2, "x"), (5, "hidden")]


@pytest.mark.parametrize("story", [
    lambda: warm_up_and_capture(dispose=True, guard=True),
    lambda: reorder_fix(dispose_after_join=False)[0],
])
def test_story_traces_round_trip_through_json_with_identical_findings(story):
    trace = Trace(records=story().records)
    findings = check(trace)
    assert findings and check(Trace.from_json(trace.to_json())) == findings
