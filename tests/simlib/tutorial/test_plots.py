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

from simlib import Runtime, glossary  # noqa: E402
from simlib.engine import profiles  # noqa: E402
from simlib.engine.timing import Profile  # noqa: E402
from simlib.memory import short_ptr  # noqa: E402
from simlib.programs import latency, scenarios  # noqa: E402
from simlib.programs.spec import MATRIX, MoEConfig  # noqa: E402
from simlib.trace import Alloc, Arg, Capture, DeviceSpan, Free, Launch, Mutation, SkippedLaunch, Trace  # noqa: E402
from simlib.tutorial import plots  # noqa: E402

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


def sizes(fig, gid):
    return [z for a in fig.artists if a.get_gid() == gid for z in a.sizes_pt]


def fork_join(*, capture: bool, profile: Profile | None = None) -> Trace:
    """Notebooks 01 and 02's two-stream program: eager, or captured and replayed once."""
    rt = Runtime(profile)
    main, alt = rt.Stream("main"), rt.Stream("alt")

    def body():
        h = rt.op("norm", x, out_shape=(16, 512), role="norm")
        alt.wait_stream(main)
        with rt.stream(alt):
            shared = rt.op("shared", h, out_shape=(16, 512), role="shared", duration_us=20)
        routed = rt.op("routed", h, out_shape=(16, 512), role="routed", duration_us=30)
        main.wait_stream(alt)
        return rt.add(routed, shared)

    with rt.stream(main):
        x = rt.from_host((16, 512), "x", value="x1")
        if capture:
            with rt.graph(main, label="fork-join") as g:
                body()
            g.replay()
        else:
            body()
    return rt.trace


# ---------------------------------------------------------------- timeline
def test_timeline_has_a_host_lane_a_lane_per_stream_that_ran_eagerly_and_the_replays(routed):
    fig = plots.timeline(routed.trace)
    assert strings(fig, "lanes") == ["host", "main", "graph replays"]   # alt runs only in replays
    assert strings(fig, "replay-lanes") == ["main", "alt"]


def test_a_timeline_without_a_capture_has_no_replay_panel_and_says_what_ran():
    trace = fork_join(capture=False)
    fig = plots.timeline(trace)
    assert strings(fig, "lanes") == ["host", "main", "alt"]
    assert not has(fig, "replay-lanes") and not has(fig, "replay-notes")
    kernels = {r.id: r for r in trace.of(Launch)}
    span = {kernels[s.launch].kernel: s for s in trace.of(DeviceSpan)}
    overlap = span["shared"].end_us - span["routed"].start_us
    assert overlap > 0
    assert title(fig) == (
        f"No capture, eager only: the host issued 5 launches by "
        f"{max(r.t_us for r in kernels.values()):.1f} µs; the device ran them on main and alt "
        f"until {span['add'].end_us:.1f} µs; shared on alt and routed on main overlap for "
        f"{overlap:.1f} µs")
    assert "capture (nothing runs)" not in strings(fig, "legend")
    assert "host: launch skipped" not in strings(fig, "legend")


def test_the_legend_lists_only_what_the_timeline_draws(routed, shared):
    assert "host: launch skipped" in strings(plots.timeline(routed.trace), "legend")
    legend = strings(plots.timeline(shared.trace), "legend")
    assert "host: launch skipped" not in legend
    assert {"host: set_ (dispose)", "capture (nothing runs)", "cross-stream dependency"} <= set(legend)


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
    said = title(plots.timeline(shared.trace))
    assert "came after every launch that reads it, but it freed x's block" in said
    assert "unordered: a race the checker finds (rule 4, reuse_after_free)" in said


def test_replay_timelines_are_titled_by_how_their_replay_spends_its_time():
    pdl, alt = (plots.timeline(scenarios.run(latency.PLACEMENTS[i]).trace) for i in (0, 2))
    assert title(pdl) != title(alt)
    assert "its last, residual_add, starts 1.0 µs before combine ends (PDL)" in title(pdl)
    assert "its last, residual_add on main, waits for combine on alt (a cross-stream join)" in title(alt)
    assert title(pdl).startswith("Replay 0 runs 12 kernels on main and alt in ")


def test_a_takeaway_replaces_the_derived_title(routed):
    for draw in (plots.timeline, plots.pointer_table):
        assert title(draw(routed.trace, takeaway="What this shows")) == "What this shows"
    assert title(plots.captured_graph(routed, takeaway="Nodes")) == "Nodes"


@pytest.mark.parametrize("profile", [Profile(), profiles.H200], ids=lambda p: p.name)
def test_the_late_start_of_the_branch_captured_second_is_explained(profile):
    fig = plots.timeline(fork_join(capture=True, profile=profile))
    expected = (f"graph executor opens a second stream: ~{profile.graph_branch_launch_us:.0f} µs late start, "
                "counted from the replay's start")
    assert strings(fig, "late-start-notes") == [expected]
    assert title(fig).endswith(f"the branch captured second starts ~{profile.graph_branch_launch_us:.0f} µs late")
    # The bracket spans the ~8 µs it names: from the replay's start to the held-back kernel's start.
    spans = {s.launch: s for s in fork_join(capture=True, profile=profile).of(DeviceSpan)
             if s.phase == "replay"}
    t0 = min(s.start_us for s in spans.values())
    (a, _), (b, _) = artist(fig, "late-start").get_segments()[0]
    starts = sorted(s.start_us - t0 for s in spans.values())
    assert b == pytest.approx(profile.graph_branch_launch_us) and b in [pytest.approx(x) for x in starts]
    assert a == 0.0 == starts[0]


def test_no_late_start_is_drawn_when_the_executor_holds_nothing_back():
    quick = Profile().with_(graph_branch_launch_us=0.0)
    fig = plots.timeline(fork_join(capture=True, profile=quick))
    assert not has(fig, "late-start") and "late" not in title(fig)


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
    assert "the host skipped them, so the graph has no node for them and no replay ever runs them" in title(fig)


def test_shared_first_graph_freezes_live_pointers_and_marks_its_race(shared):
    fig = plots.captured_graph(shared)
    assert to_hex(plots.DANGER) not in node_edges(fig)
    assert strings(fig, "graph-bad-args") == []
    assert "the graph's pool hands to routed_out: unordered: a race" in title(fig)
    x = next(r for r in shared.trace.of(Alloc) if r.label == "x" and r.pool == "graph0")
    # x's block, read by norm/gate/permute/shared.gate_up, written again as routed_out
    reads = [s for s in strings(fig, "graph-text") if hex(x.ptr) in s]
    assert len(artist(fig, "graph-races").get_paths()) == len(reads) == 6
    legend = strings(fig, "legend")
    assert "address of a race the checker finds (rule 3 or 4: unordered)" in legend
    assert "frozen null / empty / freed pointer" not in legend


def test_the_graph_legend_lists_only_what_is_drawn(routed):
    legend = strings(plots.captured_graph(routed), "legend")
    assert "frozen null / empty / freed pointer" in legend
    assert "launch skipped at capture (not in the graph)" in legend
    assert not any("race" in entry for entry in legend)
    clean = strings(plots.captured_graph(fork_join(capture=True)), "legend")
    assert clean == ["stream order (next node on the same stream)",
                     "event edge (fork or join between streams)"]


def test_full_addresses_where_the_pool_hands_a_freed_block_out_again(shared):
    x = next(r for r in shared.trace.of(Alloc) if r.label == "x" and r.pool == "graph0")
    lines = [s.split() for s in strings(plots.captured_graph(shared), "graph-text")]
    assert ["w", "routed_out", hex(x.ptr)] in lines and ["r", "x", hex(x.ptr)] in lines
    short = [s.split() for s in strings(plots.captured_graph(shared, full_pointers=False), "graph-text")]
    assert ["r", "x", short_ptr(x.ptr)] in short
    assert any(hex(x.ptr) in c for c in strings(plots.pointer_table(shared.trace), "cells"))
    clean = strings(plots.captured_graph(fork_join(capture=True)), "graph-text")
    assert any("…" in s for s in clean)         # nothing freed and reused: short addresses


def test_box_and_table_text_is_at_least_nine_points(routed):
    graph, table = plots.captured_graph(routed), plots.pointer_table(routed.trace)
    for fig, gids in ((graph, ("graph-text", "graph-bad-args", "legend", "graph-streams")),
                      (table, ("cells", "lanes", "legend", "pointer-notes"))):
        for gid in gids:
            assert min(sizes(fig, gid)) >= 9, gid
    assert min(sizes(plots.timeline(routed.trace), "replay-notes")) >= 8


def test_graph_nodes_show_the_frozen_pointers(shared):
    fig = plots.captured_graph(shared)
    x = next(r for r in shared.trace.of(Alloc) if r.label == "x" and r.pool == "graph0")
    lines = [s.split() for s in strings(fig, "graph-text")]
    assert ["r", "x_rows", hex(x.ptr)] in lines
    assert strings(fig, "graph-streams") == ["stream main", "stream alt"]


def test_graph_edges_follow_the_dependencies(shared):
    fig = plots.captured_graph(shared)
    nodes = shared.graph.nodes
    assert len(artist(fig, "graph-edges").get_paths()) == sum(len(n.deps) for n in nodes)
    styles = artist(fig, "graph-edges").get_linestyles()
    assert sum(1 for offset, dashes in styles if dashes) == 2   # the fork and the join


def test_a_join_through_a_stream_that_captured_nothing_is_an_event_edge_and_says_so(routed):
    fig = plots.captured_graph(routed)
    styles = artist(fig, "graph-edges").get_linestyles()
    colours = hexes(artist(fig, "graph-edges").get_edgecolor())
    dashed = [i for i, (_, dashes) in enumerate(styles) if dashes]
    assert len(dashed) == 1 and colours[dashed[0]] == "#000000"   # norm -> residual_add, via alt
    assert strings(fig, "graph-edge-notes") == ["join via alt:\nnothing captured on alt"]
    assert all(c == to_hex(plots.GREY) for i, c in enumerate(colours) if i not in dashed)


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
    assert strings(fig, "graph-bad-args") == [f"r  tmp {short_ptr(ptr):<11} FREED"]
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
def test_side_by_side_badges_say_the_verdicts_in_the_glossarys_words(shared, routed):
    fig = plots.side_by_side(shared, routed)
    banner = strings(fig, "banner")
    assert banner[:2] == ["shared_first/static_buffer/always", glossary.badge("unordered")]
    assert "routed_first/static_buffer/always" in banner
    assert glossary.badge("silent_wrong") in banner
    assert "got:  x2 + routed(norm(x2)) + shared(norm(x1))" in banner
    assert "want: x2 + routed(norm(x2)) + shared(norm(x2))" in banner
    assert "checker: rule 4 (reuse_after_free) on 'x'" in banner
    assert " ".join(banner).count(f"unordered: {glossary.UNORDERED_MEANS}") == 1
    boxes = [a for a in fig.artists if a.get_gid() == "banner-box"]
    assert [to_hex(b.get_facecolor()[0]) for b in boxes] == [
        glossary.term("unordered").colour.lower(), glossary.term("silent_wrong").colour.lower()]
    assert title(fig) == ("Same program, same streams; only order (shared_first vs "
                          "routed_first) differs: unordered vs silently wrong")


def test_side_by_side_shows_errors_in_their_banners(shared):
    plain = scenarios.run(ROUTED_FIRST.with_(shared_mode="plain"))
    raw = scenarios.run(ROUTED_FIRST.with_(shared_mode="raw_kernel"))
    fig = plots.side_by_side(plain, raw)
    banner = strings(fig, "banner")
    assert glossary.badge("capture_error:shape_mismatch") in banner
    assert glossary.badge("illegal_address") in banner
    boxes = [a for a in fig.artists if a.get_gid() == "banner-box"]
    assert [to_hex(b.get_facecolor()[0]) for b in boxes] == [
        glossary.term("capture_error:x").colour.lower(), glossary.term("illegal_address").colour.lower()]


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
    assert {hex(x.ptr), "0x0 (empty)"} <= set(strings(fig, "cells"))
    assert strings(fig, "pointer-notes") == ["x.set_(empty)"]


def test_the_set_line_sits_where_the_x_bar_changes(routed):
    fig = plots.pointer_table(routed.trace)
    step = capture_dispose_step(routed)
    (line,) = artist(fig, "pointer-marks").get_segments()
    empty_bar = artist(fig, "row:x").get_paths()[1].vertices
    assert line[0][0] == line[1][0] == empty_bar[:, 0].min() == step - 0.5


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
    assert f"host step {step}: still to come →" in strings(at, "pointer-notes")


def test_a_table_up_to_a_step_keeps_its_width_and_names_what_is_still_to_come(routed):
    step = capture_dispose_step(routed)
    full, at = plots.pointer_table(routed.trace), plots.pointer_table(routed.trace, step=step)
    names = [c.removesuffix(" (skipped)") for c in strings(full, "columns")]
    assert [c.removesuffix(" (skipped)") for c in strings(at, "columns")] == names   # every column, named
    assert not any("(skipped)" in c for c in strings(at, "columns")[names.index("permute") + 1:])  # not judged yet
    (band,) = artist(at, "to-come").get_paths()
    assert band.vertices[:, 0].min() == step + 0.5
    assert not has(full, "to-come")


def test_an_empty_view_at_a_live_address_is_not_drawn_as_0x0(routed):
    fig = plots.pointer_table(routed.trace)
    null = hexes(artist(fig, "row:x").get_facecolor())[1]
    view = hexes(artist(fig, "row:shared_out_rows").get_facecolor())[0]
    assert null == to_hex(plots.DANGER) and view != null
    assert "0x7f0000000000 (empty)" in strings(fig, "cells")
    assert {"0x0 (null, empty)", "empty at a live address (0 elements)"} <= set(strings(fig, "legend"))


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
    code = ("import sys, simlib, simlib.programs.latency, simlib.tutorial.headline, simlib.programs.scenarios; "
            "sys.exit('matplotlib' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
