"""The MoE recorded as a CPU dry run: what each issue order and fix freezes."""

from __future__ import annotations

import pytest
from small_moe import captured, reads_of_x, record

from simlib.trace import EventOp, HostSync, Mutation, Replay, Trace


def test_routed_first_records_the_dispose_then_shared_launches_reading_a_null_x():
    trace = record(order="routed_first")
    dispose = [m for m in trace.of(Mutation) if m.graph == 0]
    assert len(dispose) == 1
    m = dispose[0]
    assert (m.op, m.label, m.why) == ("set_", "x", "dispose_tensor")
    assert (m.old_numel, m.old_shape, m.new_ptr, m.new_numel, m.new_shape) == (4 * 32, (4, 32), 0, 0, (0,))
    shared = [launch for launch in captured(trace) if launch.role == "shared_expert"]
    assert shared and all(launch.stream == "alt" and launch.step > m.step for launch in shared)
    null_reads = reads_of_x(shared)
    assert null_reads and all(a.ptr == 0 and a.numel == 0 and a.tensor == m.tensor for a in null_reads)


def test_shared_first_reads_the_real_x_and_nothing_reads_x_after_the_dispose():
    trace = record(order="shared_first")
    (m,) = [m for m in trace.of(Mutation) if m.graph == 0]
    shared_reads = reads_of_x([launch for launch in captured(trace) if launch.role == "shared_expert"])
    assert shared_reads and all(a.ptr == m.old_ptr and a.numel == 4 * 32 for a in shared_reads)
    assert not reads_of_x([launch for launch in captured(trace) if launch.step > m.step])


@pytest.mark.parametrize("fix", [{"dispose": "skip_in_capture"}, {"dispose": "never"}, {"clone": True}])
def test_the_fixes_leave_no_captured_read_of_an_empty_tensor(fix):
    trace = record(order="routed_first", **fix)
    assert not [a for launch in captured(trace) for a in launch.args if a.reads and a.numel == 0]


def test_own_buffer_disposes_the_permuted_copy_after_its_last_use():
    trace = record(order="routed_first", dispose="own_buffer")
    (m,) = [m for m in trace.of(Mutation) if m.graph == 0]
    assert m.label == "permuted"
    assert not [a for launch in captured(trace) if launch.step > m.step for a in launch.args if a.tensor == m.tensor]


def test_fork_and_join_give_the_merge_a_happens_before_path_from_the_shared_branch():
    trace = record(order="routed_first", shared_mode="plain", dispose="never")
    events = [(e.op, e.stream) for e in trace.of(EventOp) if e.graph == 0]
    assert events == [("record", "main"), ("wait", "alt"), ("record", "alt"), ("wait", "main")]
    launches = captured(trace)
    last_shared = [launch.id for launch in launches if launch.stream == "alt"][-1]
    first_merge = next(launch for launch in launches if launch.role == "merge")
    assert last_shared in first_merge.deps
    first_shared = next(launch for launch in launches if launch.stream == "alt")
    last_norm = [launch.id for launch in launches if launch.role == "norm"][-1]
    assert first_shared.deps == (last_norm,)


@pytest.mark.parametrize("inputs, refreshed", [("fresh", True), ("same_as_eager", True), ("stale", False)])
def test_replays_are_preceded_by_a_write_of_the_captured_input_unless_stale(inputs, refreshed):
    trace = record(inputs=inputs)
    (begin,) = [r for r in trace.records if r.kind == "capture" and r.op == "begin"]
    replays = list(trace.of(Replay))
    assert [r.index for r in replays] == [0, 1, 2]
    for replay in replays:
        before = [r for r in trace.launches() if r.step < replay.step][-1]
        writes_input = any(a.writes and a.ptr in begin.inputs for a in before.args)
        assert writes_input is refreshed


def test_plain_routed_first_fails_the_dry_capture_with_a_shape_mismatch():
    trace = record(order="routed_first", shared_mode="plain")
    assert trace.meta["capture_error"] == "capture_error:shape_mismatch"
    end = [r for r in trace.records if r.kind == "capture" and r.op == "end"][0]
    assert "shapes cannot be multiplied" in end.error


@pytest.mark.parametrize("fault, kind, op", [("item", HostSync, "item"), ("device_sync", HostSync, "synchronize"),
                                             ("query_captured_event", EventOp, "query")])
def test_capture_faults_are_recorded_inside_the_capture(fault, kind, op):
    trace = record(order="shared_first", capture_fault=fault)
    begin, end = [r.step for r in trace.records if r.kind == "capture"]
    assert [r for r in trace.of(kind) if r.op == op and begin < r.step < end]


def test_a_recorded_trace_survives_json():
    trace = record()
    assert Trace.from_json(trace.to_json()).to_json() == trace.to_json()
