"""The eager program: the real module's op sequence at its recorded host costs."""

from __future__ import annotations

import json

import pytest

from gpu_demo.lab import results
from simlib.engine.timing import Profile
from simlib.programs.eager_program import RECORD_COMMAND, EagerOp, HostCosts, eager_forward_us, load, run_eager
from simlib.programs.spec import MoEConfig
from simlib.trace import DeviceSpan, Launch

PROFILE = Profile()   # launch latency 4 us, eager stream gap 1 us


def costs(kernel_us: float = 1.0, **changes) -> HostCosts:
    """A view after two module calls, then two elementwise ops of one kernel each."""
    fields = dict(
        dispatch_us={"view": 2.0, "elementwise": 5.0}, launch_us=6.0, python_per_op_us=3.0, module_call_us=10.0,
        ops=(EagerOp("aten::view", "view", "permute", 2, ()),
             EagerOp("aten::add", "elementwise", "merge", 0, (kernel_us,)),
             EagerOp("aten::add", "elementwise", "merge", 0, (kernel_us + 1,))),
        config=MoEConfig())
    return HostCosts(**{**fields, **changes})


def test_a_host_bound_forward_takes_the_host_time_plus_the_last_kernel():
    host = (3 + 2 * 10 + 2) + 2 * (3 + 5 + 6)     # Python, module calls, dispatch, launch calls
    assert eager_forward_us(costs(), PROFILE) == pytest.approx(host + PROFILE.launch_latency_us + 2.0)


def test_each_kind_costs_its_dispatch_time_once_per_op():
    base = eager_forward_us(costs(), PROFILE)
    slower = costs(dispatch_us={"view": 2.0, "elementwise": 5.5})
    assert eager_forward_us(slower, PROFILE) - base == pytest.approx(2 * 0.5)
    assert eager_forward_us(costs(module_call_us=11.0), PROFILE) - base == pytest.approx(2 * 1.0)


def test_a_device_bound_forward_takes_the_kernels_back_to_back():
    first_launch = (3 + 2 * 10 + 2) + (3 + 5 + 6)
    expected = first_launch + PROFILE.launch_latency_us + 100 + PROFILE.stream_gap_us + 101
    assert eager_forward_us(costs(kernel_us=100.0), PROFILE) == pytest.approx(expected)


def test_the_program_launches_each_recorded_kernel_on_one_stream():
    program = costs()
    rt, _ = run_eager(program, PROFILE)
    launches = list(rt.trace.of(Launch))
    assert len(launches) == program.launches == 2
    assert {(x.kernel, x.role, x.stream) for x in launches} == {("aten::add", "merge", "main")}
    spans = list(rt.trace.of(DeviceSpan))
    assert [s.end_us - s.start_us for s in spans] == [1.0, 2.0]


def as_dict(program: HostCosts) -> dict:
    return {
        "config": program.config.to_dict(), "launch_us": program.launch_us,
        "python": {"per_op_us": program.python_per_op_us, "per_module_call_us": program.module_call_us},
        "kinds": {k: {"dispatch_us": us} for k, us in program.dispatch_us.items()},
        "ops": [{"name": o.name, "kind": o.kind, "role": o.role, "module_calls": o.module_calls,
                 "kernel_us": list(o.kernel_us)} for o in program.ops],
    }


def test_the_recorded_layout_reads_back(tmp_path):
    path = tmp_path / "host-costs.json"
    path.write_text(json.dumps(as_dict(costs())))
    assert load(path) == costs(source=str(path))


def test_a_missing_or_incomplete_file_says_how_to_record_one(tmp_path):
    with pytest.raises(ValueError, match=RECORD_COMMAND):
        load(tmp_path / "none.json")
    data = as_dict(costs())
    del data["python"]
    with pytest.raises(ValueError, match=f"lack 'python'.*{RECORD_COMMAND}"):
        HostCosts.from_dict(data)


def test_bad_costs_are_refused_with_what_is_wrong():
    with pytest.raises(ValueError, match=r"launch_us=-1.0 must be >= 0"):
        costs(launch_us=-1.0)
    with pytest.raises(ValueError, match=r"kind\(s\) \['elementwise'\] have no dispatch cost"):
        costs(dispatch_us={"view": 2.0})


# -- the committed H200 host costs and the eager prediction made from them ---------------

RESULTS = results.RESULTS_DIR


def recorded(kind: str) -> dict:
    return json.loads((RESULTS / f"{kind}-h200.json").read_text())


def test_the_h200_host_costs_say_where_they_came_from():
    provenance = recorded("host-costs")["provenance"]
    assert "H200" in provenance["gpu"] and provenance["driver"] and provenance["torch"]
    assert provenance["command"] == "python -m gpu_demo bench --host-costs"


def test_the_recorded_forward_launches_the_kernels_a_graph_replay_runs():
    data = recorded("host-costs")
    program = load(RESULTS / "host-costs-h200.json")
    assert program.launches == data["launches_per_forward"] == recorded("calibration")["kernels_per_replay"]
    assert len(program.ops) == data["ops_per_forward"] == sum(k["ops"] for k in data["kinds"].values())
    assert sum(op.module_calls for op in program.ops) == data["module_calls_per_forward"]
    assert program.config == MoEConfig.from_dict(recorded("bench")["config"])


def eager_row(**paths):
    from gpu_demo.lab.measure import prediction

    return next(r for r in prediction.predictions(**paths) if r.variant == "eager")


def test_eager_time_is_predicted_within_15_percent_of_the_same_runs_measurement():
    from gpu_demo.lab.measure import prediction

    row = eager_row()
    assert row.within_target, prediction.format_table([row])
    assert row.measured_us == recorded("host-costs")["eager_latency"]["median_us"]
    bench = recorded("bench")["latency"]["eager"]["median_us"]
    assert f"measured {bench:.1f} µs" in row.note and "host-costs-h200.json" in row.note


def test_the_eager_prediction_is_made_from_the_committed_host_costs(tmp_path):
    data = recorded("host-costs")
    data["launch_us"] += 1.0
    slower = tmp_path / "host-costs.json"
    slower.write_text(json.dumps(data))
    extra = eager_row(host_costs=slower).predicted_us - eager_row().predicted_us
    assert extra == pytest.approx(data["launches_per_forward"] * 1.0, abs=0.02)


def test_the_table_states_the_graph_speedup_over_eager():
    from gpu_demo.lab.measure import prediction

    text = prediction.format_table(prediction.predictions())
    assert "faster than the same forward run eagerly" in text
