"""Stories about races as schedules: what a graph's replays can do, with witnesses."""

import pytest

from simlib import Runtime
from simlib.engine.profiles import H200
from simlib.engine.schedules import Schedule, explore, races
from simlib.glossary import CORRECT, SILENT_WRONG
from simlib.programs import scenarios
from simlib.programs.spec import MoEConfig
from simlib.trace import DeviceSpan


def reuse_race(rt: Runtime, extra: bool = False) -> str:
    """alt reads x; main frees x and writes a new tensor into its block; nothing orders them."""
    main, alt = rt.Stream("main"), rt.Stream("alt")
    with rt.stream(main):
        h = rt.from_host((4, 8), "h", value="h1")
        with rt.graph(main) as g:
            if extra:
                rt.op("extra", h, out_shape=(2,))
            x = rt.op("norm", h, out_shape=(4, 8), label="x")
            alt.wait_stream(main)
            with rt.stream(alt):
                y = rt.op("reader", x, out_shape=(4, 8), label="y", duration_us=2.0)
            rt.release(x)
            z = rt.op("writer", h, out_shape=(4, 8), label="z", duration_us=30.0)
            main.wait_stream(alt)
            rt.release(z)
        g.replay()
        return CORRECT if str(rt.read(y)) == "reader(norm(h1))" else SILENT_WRONG


def test_one_run_shows_one_order_and_the_explorer_finds_both():
    assert reuse_race(Runtime()) == CORRECT                  # as timed, the reader wins
    found = explore(reuse_race)
    assert [(r.first.label, r.second.label) for r in found.races] == [("y", "z")]
    assert found.outcomes == {CORRECT, SILENT_WRONG}
    assert found.witness(CORRECT) is found.default
    wrong = found.witness(SILENT_WRONG)
    earlier, later = wrong.order
    assert (earlier.label, later.label) == ("z", "y")
    assert "'y' (alt) starts after 'z' (main) ends" in found.describe()


def test_the_witness_spans_realise_the_order_they_claim():
    wrong = explore(reuse_race).witness(SILENT_WRONG)
    earlier, later = wrong.order
    spans = {s.launch: s for s in wrong.spans}
    assert spans[later.id].start_us >= spans[earlier.id].end_us
    assert all(isinstance(s, DeviceSpan) and s.phase == "replay" for s in wrong.spans)


def test_an_order_the_default_run_already_shows_is_not_run_again():
    found = explore(reuse_race)
    assert len(found.witnesses) == 2          # the default, plus the one order it did not show


def test_a_schedule_delays_a_node_until_its_partner_is_done():
    rt = Runtime()
    reuse_race(rt)
    y, z = (rt.graphs[0].node(k) for k in ("y", "z"))
    ordered = Runtime(schedule=Schedule(((z.id, y.id),)))
    assert reuse_race(ordered) == SILENT_WRONG


def test_a_schedule_against_the_graph_is_refused():
    rt = Runtime()
    reuse_race(rt)
    x, y = (rt.graphs[0].node(k) for k in ("x", "y"))
    with pytest.raises(ValueError, match="cycle"):
        reuse_race(Runtime(schedule=Schedule(((y.id, x.id),))))


def test_ordered_work_has_no_race():
    def ordered(rt: Runtime) -> str:
        main = rt.Stream("main")
        with rt.stream(main):
            h = rt.from_host((4,), "h", value="h1")
            with rt.graph(main) as g:
                x = rt.op("a", h, out_shape=(4,))
                rt.op("b", x, out_shape=(4,))
            g.replay()
        return CORRECT
    found = explore(ordered)
    assert found.races == () and found.outcomes == {CORRECT}


def test_a_program_that_captures_differently_each_run_is_refused():
    runs = []

    def flaky(rt: Runtime) -> str:
        runs.append(rt)
        return reuse_race(rt, extra=len(runs) > 1)
    with pytest.raises(ValueError, match="deterministic"):
        explore(flaky)


# ---------------------------------------------------------------- the reorder fix's race, made to bite
def moe(**changes) -> MoEConfig:
    return MoEConfig(order="shared_first", **changes)


def test_without_a_delay_shared_first_replays_right_but_can_be_wrong():
    found = explore(lambda rt: scenarios.play(rt, moe()).outcome, H200)
    assert found.default.outcome == CORRECT
    assert found.outcomes == {CORRECT, SILENT_WRONG}
    (race,) = found.races
    assert {race.first.label, race.second.label} == {"shared.gate_up", "routed_out"}
    assert found.witness(SILENT_WRONG).order[1].label == "shared.gate_up"   # the shared expert late


def test_a_slower_alt_branch_makes_the_default_replay_wrong_the_same_way():
    slow = scenarios.run(moe(alt_delay_us=100.0), H200)
    assert slow.outcome == SILENT_WRONG
    assert str(slow.replays[0].got) == "x2 + routed(norm(x2)) + shared(routed(norm(x2)))"
    delayed = [s for s in slow.trace.of(DeviceSpan) if s.phase == "replay"]
    by_label = {n.id: n.label for n in slow.graph.nodes}
    span = {by_label[s.launch]: s for s in delayed if s.replay == 0}
    assert span["alt_delay"].end_us - span["alt_delay"].start_us == pytest.approx(100.0)
    assert span["shared.gate_up"].start_us >= span["routed_out"].end_us
    assert scenarios.run(moe(alt_delay_us=20.0), H200).outcome == CORRECT   # not slow enough


def test_record_stream_removes_the_race_even_with_the_delay():
    found = explore(lambda rt: scenarios.play(rt, moe(alt_delay_us=100.0, record_stream=True)).outcome,
                    H200)
    assert found.races == () and found.outcomes == {CORRECT}


def test_races_are_read_from_plain_trace_records():
    rt = Runtime()
    reuse_race(rt)
    assert [(r.first.label, r.second.label) for r in races(rt.trace)] == [("y", "z")]


def test_a_witness_draws_on_the_timeline():
    pytest.importorskip("matplotlib")
    from simlib.tutorial import plots

    wrong = explore(reuse_race).witness(SILENT_WRONG)
    fig = plots.timeline(wrong.trace)
    assert {a.get_gid() for a in fig.artists} >= {"replay:main", "replay:alt"}
