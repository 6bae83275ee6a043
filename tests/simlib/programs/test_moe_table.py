"""End to end: the simulator reproduces the table measured on an H200 (docs/results.md, "The incident's matrix")."""

import pytest

from simlib.programs import scenarios
from simlib.programs.spec import MATRIX, MoEConfig

MEASURED = {  # (order, shared_mode) -> outcome class seen on the H200
    ("shared_first", "plain"): "correct",
    ("shared_first", "static_buffer"): "correct",
    ("shared_first", "raw_kernel"): "correct",
    ("routed_first", "plain"): "capture_error:shape_mismatch",
    ("routed_first", "static_buffer"): "silent_wrong",
    ("routed_first", "raw_kernel"): "illegal_address",
}


@pytest.mark.parametrize("order, mode", sorted(MEASURED))
def test_measured_table(order, mode):
    result = scenarios.run(MoEConfig(order=order, shared_mode=mode))
    assert result.outcome == MEASURED[order, mode]


def test_silent_row_reads_as_the_stale_shared_expert():
    result = scenarios.run(MoEConfig(order="routed_first", shared_mode="static_buffer"))
    first = result.replays[0]
    assert str(first.want) == "x2 + routed(norm(x2)) + shared(norm(x2))"
    assert str(first.got) == "x2 + routed(norm(x2)) + shared(norm(x1))"   # from the warm-up


def test_shape_error_names_the_emptied_tensor():
    result = scenarios.run(MoEConfig(order="routed_first", shared_mode="plain"))
    assert "'x' has shape [0]" in str(result.error) and "512" in str(result.error)


def test_replaying_the_eager_input_masks_the_silent_bug():
    trap = scenarios.run(MoEConfig(order="routed_first", inputs="same_as_eager"))
    assert trap.outcome == "correct"
    assert all(r.input == "x1" for r in trap.replays)
    assert scenarios.run(MoEConfig(order="routed_first", inputs="fresh")).outcome == "silent_wrong"


def test_forgetting_to_refresh_the_input_is_silently_wrong_even_in_the_safe_order():
    result = scenarios.run(MoEConfig(order="shared_first", inputs="stale"))
    assert result.outcome == "silent_wrong"
    assert str(result.replays[0].got).startswith("x1 + ")


@pytest.mark.parametrize("fix", [dict(dispose="skip_in_capture"), dict(dispose="own_buffer"),
                                 dict(dispose="never"), dict(clone=True)])
@pytest.mark.parametrize("mode", ["plain", "static_buffer", "raw_kernel"])
def test_every_fix_is_correct_in_the_unsafe_order(fix, mode):
    assert scenarios.run(MoEConfig(order="routed_first", shared_mode=mode, **fix)).outcome == "correct"


def test_many_layers_still_reproduce_the_bug():
    assert scenarios.run(MoEConfig(layers=4)).outcome == "silent_wrong"
    assert scenarios.run(MoEConfig(layers=4, order="shared_first")).outcome == "correct"


def test_the_alternate_layout_puts_the_routed_experts_on_alt():
    result = scenarios.run(MoEConfig(order="shared_first", routed_stream="alt"))
    assert result.outcome == "correct"
    assert result.graph.node("combine").stream == "alt"
    assert result.graph.node("shared.down").stream == "main"


def test_every_matrix_scenario_runs_to_a_known_outcome():
    outcomes = {scenarios.run(c).outcome for c in MATRIX}
    assert outcomes <= {"correct", "silent_wrong", "illegal_address"} | {
        o for o in outcomes if o.startswith("capture_error:")}
    assert {"correct", "silent_wrong", "illegal_address"} <= outcomes
