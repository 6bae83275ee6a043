"""The simulator against the real H200: outcomes agree, timing is calibrated and predicts."""

import json
from pathlib import Path

import pytest

from gpu_demo import conformance, prediction
from simlib.profiles import H200
from simlib.spec import MATRIX

RESULTS = Path(__file__).resolve().parents[1] / "gpu_demo" / "results"


@pytest.fixture(scope="module")
def rows():
    return conformance.rows()


def test_the_gpu_ran_every_matrix_scenario(rows):
    assert [r.name for r in rows] == [c.name for c in MATRIX]
    assert len(rows) >= 16


def test_every_simulator_prediction_agrees_with_the_h200(rows):
    disagreements = [r for r in rows if not r.agree]
    assert not disagreements, conformance.format_table(disagreements)


def test_the_measured_table_of_the_design_is_predicted_exactly(rows):
    by_name = {r.name: r for r in rows}
    assert by_name["routed_first/plain/always"].predicted == "capture_error:shape_mismatch"
    assert by_name["routed_first/static_buffer/always"].predicted == "silent_wrong"
    assert by_name["routed_first/raw_kernel/always"].predicted == "illegal_address"


def test_races_are_predicted_unordered_and_say_so(rows):
    racy = [r for r in rows if r.predicted == "unordered"]
    assert racy and all(any("rule 4" in x or "rule 3" in x for x in r.rules) for r in racy)
    assert all(r.gpu in ("correct", "silent_wrong") for r in racy)


@pytest.mark.parametrize("predicted, observed, agree", [
    ("correct", "correct", True), ("correct", "silent_wrong", False),
    ("unordered", "silent_wrong", True), ("unordered", "illegal_address", False),
])
def test_agreement_rule(predicted, observed, agree):
    assert conformance.agrees(predicted, observed) is agree


def test_a_missing_results_file_says_how_to_make_one(tmp_path):
    with pytest.raises(ValueError, match="gpu_demo run --matrix"):
        conformance.rows(tmp_path / "none.json")


def test_every_graph_configuration_is_predicted_within_15_percent():
    rows = prediction.predictions()
    graphs = [r for r in rows if r.variant != "eager"]
    assert len(graphs) >= 7
    misses = [r for r in graphs if not r.within_target]
    assert not misses, prediction.format_table(misses)


def test_each_miss_is_explained():
    rows = prediction.predictions()
    for r in rows:
        if not r.within_target:
            assert r.variant in prediction.MISSES
    assert "explained" not in prediction.format_table(rows)


def test_the_h200_profile_is_the_committed_calibration():
    cal = json.loads((RESULTS / "calibration-h200.json").read_text())
    bench = json.loads((RESULTS / "bench-h200.json").read_text())
    roles = {r: v["total_median_us"] for r, v in cal["kernel_roles"].items()}
    k = H200.kernel_us
    assert (k["norm"], k["gate"], k["topk"], k["permute"], k["combine"], k["merge"]) == (
        roles["norm"], roles["gate"], roles["topk"], roles["permute"], roles["combine"], roles["merge"])
    assert 3 * k["experts.gate_up"] == pytest.approx(roles["routed_experts"])
    assert 3 * k["shared"] == pytest.approx(roles["shared_expert"])
    assert H200.graph_node_gap_us == cal["same_stream_gap_us"]["median"]
    assert H200.graph_launch_us == cal["graph_launch_host_us"]
    assert H200.launch_host_us == cal["eager_op_launch_host_us"]
    assert cal["cross_stream_join_gap_us"]["median"] <= H200.graph_node_gap_us   # why the join costs 0 extra
    floor = bench["diagnostics"]["floor_one_kernel"]
    assert H200.launch_latency_us == pytest.approx(bench["latency"]["floor_one_kernel"]["median_us"]
                                                    - floor["kernel_time_us"])
    second = [max(d["first_kernel_start_by_stream_us"].values()) for name, d in
              bench["diagnostics"].items() if name.startswith("graph_dual")]
    assert H200.graph_branch_launch_us == pytest.approx(sum(second) / len(second), abs=0.01)
