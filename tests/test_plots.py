"""The pictures' content: lanes, bars, highlighted pointers, banners, table cells."""

from __future__ import annotations

import io
import subprocess
import sys
import warnings

import matplotlib
import pytest
from matplotlib.colors import to_hex

matplotlib.use("Agg")

from simlib import plots, scenarios  # noqa: E402
from simlib.spec import MATRIX, MoEConfig  # noqa: E402
from simlib.trace import (Alloc, Arg, Capture, DeviceSpan, Free, Launch, Mutation,  # noqa: E402
                          SkippedLaunch, Trace)

ROUTED_FIRST = MoEConfig(order="routed_first", shared_mode="static_buffer")
SHARED_FIRST = ROUTED_FIRST.with_(order="shared_first")


@pytest.fixture(scope="module")
def routed():
    return scenarios.run(ROUTED_FIRST)


@pytest.fixture(scope="module")
def shared():
    return scenarios.run(SHARED_FIRST)


def strings(fig, gid):
    return [s for a in fig.artists if a.get_gid() == gid for s in a.strings]


def artist(fig, gid):
    found = [a for a in fig.artists if a.get_gid() == gid]
    assert len(found) == 1, f"{len(found)} artists with gid {gid!r}"
    return found[0]


def has(fig, gid):
    return any(a.get_gid() == gid for a in fig.artists)


def title(fig):
    return " ".join(strings(fig, "title")[0].split())


def hexes(colours):
    return [to_hex(c) for c in colours]


def capture_dispose_step(result):
    return next(m.step for m in result.trace.of(Mutation) if m.graph is not None)


# ---------------------------------------------------------------- timeline
def test_timeline_has_a_host_lane_and_one_lane_per_stream(routed):
    fig = plots.timeline(routed.trace)
    assert strings(fig, "lanes") == ["host", "main", "alt", "graph replays"]
    assert strings(fig, "replay-lanes") == ["main", "alt"]


def test_timeline_draws_every_eager_kernel_and_every_replay(routed):
    fig = plots.timeline(routed.trace)
    eager = [s for s in routed.trace.of(DeviceSpan) if s.phase == "eager"]
    assert len(artist(fig, "lane:main").get_paths()) == len(eager)
    assert not has(fig, "lane:alt")                      # nothing runs eagerly on alt
    assert len(artist(fig, "lane:graph replays").get_paths()) == ROUTED_FIRST.replays


def test_routed_first_replay_runs_nothing_on_alt(routed):
    fig = plots.timeline(routed.trace)
    # norm, gate, topk, permute, four routed kernels, the residual add
    assert len(artist(fig, "replay:main").get_paths()) == 9
    assert not has(fig, "replay:alt")
    assert "nothing captured on alt: the host skipped 3 launch(es) at capture" in \
        strings(fig, "replay-notes")
    assert not has(fig, "cross-stream")


def test_shared_first_replay_runs_the_shared_expert_on_alt_with_fork_and_join(shared):
    fig = plots.timeline(shared.trace)
    assert len(artist(fig, "replay:alt").get_paths()) == 3
    assert len(artist(fig, "cross-stream").get_paths()) == 2
    assert {"shared.gate_up", "shared.act", "shared.down"} <= set(strings(fig, "replay-notes"))


def test_timeline_marks_the_host_side_events(routed, shared):
    fig = plots.timeline(routed.trace)
    mutations = list(routed.trace.of(Mutation))
    assert len(artist(fig, "host-mutations").get_offsets()) == len(mutations)
    assert strings(fig, "host-notes").count("x.set_(empty)") == len(mutations)
    assert len(artist(fig, "host-skipped").get_offsets()) == 3
    assert len(artist(fig, "host-launches").get_offsets()) == len(list(routed.trace.of(Launch)))
    assert not has(plots.timeline(shared.trace), "host-skipped")


def test_timeline_title_states_what_the_dispose_did(routed, shared):
    step = capture_dispose_step(routed)
    assert title(plots.timeline(routed.trace)).startswith(
        f"x.set_(empty) at host step {step} came before 3 launches (shared)")
    assert "came after every launch that reads it" in title(plots.timeline(shared.trace))


def test_timeline_up_to_a_host_step_shows_no_replay_yet(routed):
    fig = plots.timeline(routed.trace, step=capture_dispose_step(routed))
    assert strings(fig, "replay-notes") == ["no replay yet at this host step"]
    assert not has(fig, "lane:graph replays")
    assert len(artist(fig, "host-launches").get_offsets()) == sum(
        1 for r in routed.trace.of(Launch) if r.step <= capture_dispose_step(routed))


def test_timeline_shows_a_failed_capture_and_a_fault():
    failed = plots.timeline(scenarios.run(ROUTED_FIRST.with_(shared_mode="plain")).trace)
    assert strings(failed, "replay-notes") == ["no replay: the capture failed (aborted)"]
    assert title(failed).startswith("The capture failed (aborted) at host step")
    assert title(failed).endswith("there is no graph to replay")
    faulted = plots.timeline(scenarios.run(ROUTED_FIRST.with_(shared_mode="raw_kernel")).trace)
    assert "cudaErrorIllegalAddress" in strings(faulted, "host-notes")
    assert len(artist(faulted, "faults").get_offsets()) == 1


# ---------------------------------------------------------------- captured graph
def node_edges(fig):
    return hexes(artist(fig, "graph-nodes").get_edgecolor())


def test_routed_first_graph_highlights_the_empty_arguments(routed):
    fig = plots.captured_graph(routed)
    assert node_edges(fig).count(to_hex(plots.DANGER)) == 3
    bad = strings(fig, "graph-bad-args")
    assert any(s.split()[:3] == ["r", "x_rows", "0x0"] and s.endswith("EMPTY") for s in bad)
    assert sum("(skipped: not in the graph)" in s for s in strings(fig, "graph-text")) == 3
    assert "the host skipped them, so no replay ever runs them" in title(fig)


def test_shared_first_graph_has_nothing_highlighted(shared):
    fig = plots.captured_graph(shared)
    assert to_hex(plots.DANGER) not in node_edges(fig)
    assert strings(fig, "graph-bad-args") == []
    assert title(fig).endswith("the capture froze live pointers only")


def test_graph_nodes_show_the_frozen_pointers(shared):
    fig = plots.captured_graph(shared)
    x = next(r for r in shared.trace.of(Alloc) if r.label == "x" and r.pool == "graph0")
    lines = [s.split() for s in strings(fig, "graph-text")]
    assert ["r", "x_rows", plots.short_ptr(x.ptr)] in lines
    assert strings(fig, "graph-streams") == ["stream main", "stream alt"]


def test_graph_edges_follow_the_dependencies(shared):
    fig = plots.captured_graph(shared)
    nodes = shared.graph.nodes
    assert len(artist(fig, "graph-edges").get_paths()) == sum(len(n.deps) for n in nodes)
    styles = artist(fig, "graph-edges").get_linestyles()
    assert sum(1 for offset, dashes in styles if dashes) == 2   # the fork and the join


def test_a_raw_kernel_graph_marks_the_null_pointer():
    fig = plots.captured_graph(scenarios.run(ROUTED_FIRST.with_(shared_mode="raw_kernel")))
    assert any(s.endswith("NULL") and " x " in f" {s} " for s in strings(fig, "graph-bad-args"))
    assert node_edges(fig).count(to_hex(plots.DANGER)) == 1


def test_a_pointer_frozen_after_its_block_was_freed_is_marked():
    # A recorded trace can hold what the simulator's refcounts never allow.
    ptr = 0x7E0000000200
    stale = Arg("in0", 7, "tmp", ptr, 8, (8,), 16, "r")
    trace = Trace([Capture(0, 0.0, "begin", 0, "main"),
                   Alloc(1, 1.0, 7, "tmp", ptr, 512, "main", "graph0"),
                   Free(2, 2.0, "tmp", ptr, 512, "main", "graph0", 0),
                   Launch(3, 3.0, 0, "k", "k", "other", "main", (stale,), 0),
                   Capture(4, 4.0, "end", 0, "main")])
    fig = plots.captured_graph(trace)
    assert strings(fig, "graph-bad-args") == [f"r  tmp{' ' * 18}{plots.short_ptr(ptr):<11} FREED"]
    assert title(fig) == "1 captured launch(es) froze a null, empty or freed pointer"


def test_graph_up_to_a_step_shows_only_what_was_captured_by_then(routed):
    step = capture_dispose_step(routed)
    fig = plots.captured_graph(routed, step=step)
    captured = [r for r in routed.trace.records
                if isinstance(r, (Launch, SkippedLaunch)) and r.graph == 0 and r.step <= step]
    assert len(artist(fig, "graph-nodes").get_paths()) == len(captured)
    assert strings(fig, "graph-bad-args") == []
    assert strings(fig, "graph-streams") == ["stream main", "stream alt"]   # layout is stable


def test_graph_of_a_trace_equals_graph_of_its_result(routed):
    a, b = plots.captured_graph(routed), plots.captured_graph(routed.trace)
    for gid in ("graph-text", "graph-bad-args", "title"):
        assert strings(a, gid) == strings(b, gid)


# ---------------------------------------------------------------- side by side
def test_side_by_side_banners_say_the_outcomes(shared, routed):
    fig = plots.side_by_side(shared, routed)
    banner = strings(fig, "banner")
    assert banner[:2] == ["shared_first/static_buffer/always", "CORRECT"]
    assert "routed_first/static_buffer/always" in banner
    assert "SILENTLY WRONG: no error, wrong output" in banner
    assert "got:  x2 + routed(norm(x2)) + shared(norm(x1))" in banner
    assert "want: x2 + routed(norm(x2)) + shared(norm(x2))" in banner
    boxes = [a for a in fig.artists if a.get_gid() == "banner-box"]
    assert [to_hex(b.get_facecolor()[0]) for b in boxes] == [
        to_hex(plots.OKABE_ITO["green"]), to_hex(plots.DANGER)]
    assert title(fig) == ("Same program, same streams; only order (shared_first vs "
                          "routed_first) differs: correct vs silently wrong")


def test_side_by_side_shows_errors_in_their_banners(shared):
    plain = scenarios.run(ROUTED_FIRST.with_(shared_mode="plain"))
    raw = scenarios.run(ROUTED_FIRST.with_(shared_mode="raw_kernel"))
    banner = strings(plots.side_by_side(plain, raw), "banner")
    assert "CAPTURE ERROR: shape_mismatch" in banner
    assert "ILLEGAL ADDRESS: the replay faulted" in banner


# ---------------------------------------------------------------- pointer table
def test_pointer_table_rows_are_the_captured_arguments(routed):
    fig = plots.pointer_table(routed.trace)
    rows = strings(fig, "lanes")
    assert rows[:2] == ["hidden_in", "x"]
    assert {"x_rows", "shared_out", "routed_out", "residual_add"} <= set(rows)


def test_pointer_table_shows_x_going_to_0x0_at_the_dispose(routed, shared):
    fig = plots.pointer_table(routed.trace)
    x = next(r for r in routed.trace.of(Alloc) if r.label == "x" and r.pool == "graph0")
    assert len(artist(fig, "row:x").get_paths()) == 2          # live, then empty
    assert hexes(artist(fig, "row:x").get_facecolor())[1] == to_hex(plots.DANGER)
    assert {plots.short_ptr(x.ptr), "0x0 (empty)"} <= set(strings(fig, "cells"))
    assert strings(fig, "pointer-notes") == ["x.set_(empty)"]


def test_pointer_table_marks_who_froze_the_empty_pointer(routed, shared):
    def white_dots(result):
        faces = hexes(artist(plots.pointer_table(result.trace), "freezes").get_facecolor())
        return faces.count("#ffffff")

    # shared.gate_up, shared.act and shared.down each froze two empty arguments
    assert white_dots(routed) == 6
    assert white_dots(shared) == 0
    columns = strings(plots.pointer_table(routed.trace), "columns")
    assert columns.count("shared.gate_up (skipped)") == 1 and columns[0] == "norm"


def test_pointer_table_up_to_a_step(routed):
    step = capture_dispose_step(routed)
    before = plots.pointer_table(routed.trace, step=step - 1)
    at = plots.pointer_table(routed.trace, step=step)
    assert len(artist(before, "row:x").get_paths()) == 1
    assert len(artist(at, "row:x").get_paths()) == 2
    assert strings(before, "lanes") == strings(at, "lanes")    # rows do not jump
    assert f"host step {step}" in strings(at, "pointer-notes")


def test_pointer_table_can_pick_its_rows(routed):
    fig = plots.pointer_table(routed.trace, labels=["x", "shared_out"])
    assert strings(fig, "lanes") == ["x", "shared_out"]
    assert has(fig, "row:shared_out")


# ---------------------------------------------------------------- every configuration
@pytest.mark.parametrize("config", MATRIX, ids=lambda c: c.name)
def test_every_picture_draws_for_every_matrix_configuration(config):
    result = scenarios.run(config)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for fig in (plots.timeline(result.trace), plots.captured_graph(result),
                    plots.pointer_table(result.trace)):
            fig.savefig(io.BytesIO(), format="png", dpi=40)
            assert strings(fig, "title")[0]


def test_figures_redraw_into_a_given_figure(routed, shared):
    fig = plots.timeline(routed.trace)
    again = plots.timeline(shared.trace, fig=fig)
    assert again is fig
    assert has(fig, "replay:alt")                      # the old content is gone, the new drawn
    assert len([a for a in fig.artists if a.get_gid() == "title"]) == 1


def test_importing_simlib_does_not_import_matplotlib():
    code = ("import sys, simlib, simlib.latency, simlib.headline, simlib.scenarios; "
            "sys.exit('matplotlib' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
