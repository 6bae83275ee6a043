"""The timing trade-off of SGLang PR #29142, measured on simulated replays."""

from __future__ import annotations

import pytest
from deadline import within
from hypothesis import given, settings
from hypothesis import strategies as st

from simlib.engine.timing import Profile
from simlib.programs.latency import CROSS_STREAM, PDL, PLACEMENTS, compare, format_table, replay_latency, replay_timing
from simlib.programs.spec import MoEConfig
from simlib.trace import DeviceSpan, Launch, Trace

# Captures correctly in both issue orders, so only timing is compared.
SAFE = MoEConfig(dispose="skip_in_capture")
MAIN_PDL = SAFE.with_(routed_stream="main", pdl=True)
MAIN = SAFE.with_(routed_stream="main", pdl=False)
ALT = SAFE.with_(routed_stream="alt", pdl=False)


def test_pdl_shortens_the_step_when_the_routed_experts_run_last_on_main():
    p = Profile()
    for layers in (1, 3):
        with_pdl = replay_latency(MAIN_PDL.with_(layers=layers), p)
        without = replay_latency(MAIN.with_(layers=layers), p)
        # The add starts a prologue early instead of a node gap late, in every layer.
        saved = layers * (p.graph_node_gap_us + p.pdl_prologue_us)
        assert without.step_us - with_pdl.step_us == pytest.approx(saved)
        assert with_pdl.pdl_overlaps == layers and without.pdl_overlaps == 0


@pytest.mark.parametrize("profile", [Profile(), Profile(graph_node_gap_us=0.3, cross_stream_gap_us=0.3)])
def test_routed_on_main_with_pdl_beats_alt_by_the_joins_the_gap_and_the_prologue(profile):
    # On alt, the routed experts (the critical path) cross streams twice per layer (the
    # fork and the join), and the add waits a full node gap; on main with PDL the add
    # starts a prologue early instead.
    p = profile
    for layers in (1, 4):
        main = replay_latency(MAIN_PDL.with_(layers=layers), p)
        alt = replay_latency(ALT.with_(layers=layers), p)
        per_layer = (alt.step_us - main.step_us) / layers
        assert per_layer == pytest.approx(
            2 * p.cross_stream_gap_us + p.graph_node_gap_us + p.pdl_prologue_us)


def test_pdl_cannot_help_when_the_add_waits_on_a_cross_stream_join():
    p = Profile()
    alt_pdl = replay_latency(ALT.with_(pdl=True, layers=2), p)
    assert alt_pdl.step_us == pytest.approx(replay_latency(ALT.with_(layers=2), p).step_us)
    assert alt_pdl.pdl_overlaps == 0
    assert alt_pdl.critical_path[-1].via == CROSS_STREAM


def test_only_the_alt_placement_has_joins_on_its_critical_path():
    main = replay_latency(MAIN_PDL.with_(layers=2))
    alt = replay_latency(ALT.with_(layers=2))
    assert main.cross_stream_joins == 0
    assert alt.cross_stream_joins == 2 * 2          # the fork to alt and the join back, per layer
    assert [s.via for s in main.critical_path].count(PDL) == 2
    assert main.critical_path[-1].label.endswith("residual_add")


def test_the_cross_stream_gap_costs_alt_and_leaves_main_alone():
    base, slow = Profile(), Profile().with_(cross_stream_gap_us=5.3)
    extra = slow.cross_stream_gap_us - base.cross_stream_gap_us
    assert replay_latency(MAIN_PDL, slow).step_us == pytest.approx(
        replay_latency(MAIN_PDL, base).step_us)
    assert replay_latency(ALT, slow).step_us - replay_latency(ALT, base).step_us == \
        pytest.approx(2 * extra)


def _replay_spans(config: MoEConfig, profile: Profile) -> list[tuple[str, str, float, float]]:
    from simlib.programs.scenarios import run

    result = run(config, profile)
    labels = {n.id: n.label for n in result.graph.nodes}
    spans = [s for s in result.trace.of(DeviceSpan) if s.phase == "replay" and s.replay == 0]
    t0 = min(s.start_us for s in spans)
    return sorted((labels[s.launch], s.stream, round(s.start_us - t0, 9), round(s.end_us - t0, 9))
                  for s in spans)


@settings(max_examples=20, deadline=None)
@given(routed_stream=st.sampled_from(("main", "alt")), pdl=st.booleans(),
       layers=st.integers(1, 3),
       node_gap=st.floats(0, 3), cross_gap=st.floats(0, 3), prologue=st.floats(0, 3),
       routed_us=st.floats(0.5, 20), shared_us=st.floats(0.5, 20))
def test_without_a_branch_launch_delay_issue_order_never_changes_device_timing(
        routed_stream, pdl, layers, node_gap, cross_gap, prologue, routed_us, shared_us):
    profile = Profile().with_(graph_branch_launch_us=0.0,
                              graph_node_gap_us=node_gap, cross_stream_gap_us=cross_gap,
                              pdl_prologue_us=prologue,
                              kernel_us={"routed": routed_us, "shared": shared_us})
    config = SAFE.with_(routed_stream=routed_stream, pdl=pdl, layers=layers)
    shared_first = _replay_spans(config.with_(order="shared_first"), profile)
    routed_first = _replay_spans(config.with_(order="routed_first"), profile)
    assert shared_first == routed_first
    a = replay_latency(config.with_(order="shared_first"), profile)
    b = replay_latency(config.with_(order="routed_first"), profile)
    assert a.step_us == b.step_us and a.layer_us == b.layer_us


def test_the_branch_captured_second_starts_late_so_issue_order_shows_in_replay_time():
    # Measured on an H200: the second branch's first kernel starts ~8 us into the replay,
    # so capturing the long routed branch second (shared_first) costs time.
    p = Profile()
    starts = {label: start for label, _, start, _ in _replay_spans(SAFE.with_(order="shared_first"), p)}
    assert starts["router_logits"] == pytest.approx(p.graph_branch_launch_us)
    assert starts["shared.gate_up"] < p.graph_branch_launch_us
    shared_first = replay_latency(SAFE.with_(order="shared_first"), p)
    routed_first = replay_latency(SAFE.with_(order="routed_first"), p)
    assert shared_first.step_us > routed_first.step_us


@pytest.mark.parametrize("config", [MAIN_PDL, ALT, SAFE.with_(routed_stream="alt", pdl=True)])
@pytest.mark.parametrize("layers", [1, 2, 5])
def test_step_time_is_the_sum_of_the_layer_times(config, layers):
    report = replay_latency(config.with_(layers=layers))
    assert len(report.layer_us) == layers
    assert sum(report.layer_us) == pytest.approx(report.step_us)
    assert all(t > 0 for t in report.layer_us)


def test_step_time_is_first_replay_start_to_last_end():
    from simlib.programs.scenarios import run

    result = run(MAIN_PDL)
    spans = [s for s in result.trace.of(DeviceSpan) if s.phase == "replay" and s.replay == 0]
    expected = max(s.end_us for s in spans) - min(s.start_us for s in spans)
    assert replay_latency(MAIN_PDL).step_us == pytest.approx(expected)


def test_the_critical_path_ends_when_a_loaded_traces_deps_form_a_cycle():
    """Two nodes that each name the other as dep (no replay makes that, a hand-edited or
    corrupt trace can): the walk back visits each once."""
    def node(lid: int, dep: int, start: float, end: float) -> tuple[Launch, DeviceSpan]:
        return (Launch(lid, 0.0, lid, "k", f"k{lid}", "other", "main", (), 0, deps=(dep,)),
                DeviceSpan(9, 0.0, lid, "main", start, end, "replay", 0))
    records = [r for pair in (node(0, 1, 0.0, 1.0), node(1, 0, 1.0, 3.0)) for r in pair]
    with within(10):
        step_us, _, path = replay_timing(Trace(records=records))
    assert step_us == 3.0
    assert [s.label for s in path] == ["k0", "k1"]


def test_a_failed_capture_has_no_latency_and_says_why():
    with pytest.raises(ValueError, match="capture failed.*capture_error:shape_mismatch"):
        replay_latency(MoEConfig(order="routed_first", shared_mode="plain"))


def test_compare_rows_are_relative_to_the_first_and_the_table_shows_them():
    rows = compare(PLACEMENTS)
    assert [r["configuration"] for r in rows] == [
        "routed on main + PDL (shared_first)", "routed on main (shared_first)",
        "routed on alt (shared_first)", "routed on alt + PDL (shared_first)"]
    assert rows[0]["delta_us"] == 0
    assert all(r["delta_us"] > 0 for r in rows[1:])   # main + PDL is the fastest placement
    assert all(r["outcome"] == "correct" for r in rows)
    text = format_table(rows)
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["configuration", "step", "µs"]
    assert len(lines) == 2 + len(rows)
    assert f"{rows[2]['step_us']:.2f}" in lines[4] and f"+{rows[2]['delta_us']:.2f}" in lines[4]


@pytest.mark.parametrize("routed_stream", ["main", "alt"])
def test_pdl_changes_timing_only_never_what_the_replay_computes(routed_stream):
    from simlib.programs.scenarios import run

    result = run(SAFE.with_(routed_stream=routed_stream, pdl=True, layers=2))
    assert result.outcome == "correct"
    assert all(r.ok for r in result.replays)
