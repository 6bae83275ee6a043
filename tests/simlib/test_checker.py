"""The capture-hazard checker: each rule on a small program, the MoE matrix, and soundness.

The soundness property runs random programs (two streams, fork/join, launches,
views, dispose at random points, one capture, replays with or without a
refreshed input) through the simulator and compares every replay with an
eager run of the same program on the input it was meant to get. The eager
run is the program's meaning: in host order on one stream, with
``dispose`` as a no-op (it is a memory optimisation and must not change what
is computed, which is why ``dispose=never`` is a fix). The checker may
over-report, but never stay silent about a replay that went wrong.
"""

from __future__ import annotations

import json
from dataclasses import FrozenInstanceError, dataclass

import pytest
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st

from simlib import IllegalAddress, Runtime, raw
from simlib.checker import ERROR, WARNING, Finding, check, format_report
from simlib.programs import scenarios
from simlib.programs.spec import MATRIX, MoEConfig
from simlib.trace import Arg, Capture, Launch, Mutation, Replay, Trace


def rules(findings: list[Finding]) -> list[tuple[int, str]]:
    return [(f.rule, f.severity) for f in findings]


def scenario_findings(config: MoEConfig) -> list[Finding]:
    return check(scenarios.run(config).trace)


def streams(rt: Runtime):
    return rt.Stream("main"), rt.Stream("alt")


# --------------------------------------------------------------------------- rule 1 and 2
def test_dispose_before_another_streams_launch_is_rules_1_and_2():
    rt = Runtime()
    main, alt = streams(rt)
    with rt.stream(main):
        h = rt.from_host((8,), "h", value="h")
        with rt.graph(main, inputs=[h]):
            x = rt.op("norm", h, out_shape=(8,), label="x")
            alt.wait_stream(main)
            rt.launch("permute", reads=[x], writes=[rt.empty((8,), "xp")])
            rt.set_(x, None, why="dispose_tensor")
            with rt.stream(alt):
                rt.launch("shared", reads=[raw(x, 8)], writes=[rt.empty((8,), "s")], label="shared")
            main.wait_stream(alt)
    findings = check(rt.trace)
    assert rules(findings) == [(1, ERROR), (2, ERROR)]
    mutation, empty = findings
    assert mutation.label == empty.label == "x"
    assert mutation.pointers[1] == 0 and mutation.pointers[0] != 0    # new (null) vs old pointer
    assert "dispose_tensor" in mutation.why and "'shared' on alt" in mutation.why
    assert empty.step > mutation.step                                 # at the launch that froze 0x0
    assert "cudaErrorIllegalAddress" in empty.why


def test_a_view_taken_after_the_dispose_carries_it_and_one_taken_before_does_not():
    rt = Runtime()
    main, _ = streams(rt)
    with rt.stream(main):
        with rt.graph(main):
            x = rt.op("norm", rt.empty((8,), "h"), out_shape=(8,), label="x")
            before = rt.view(x, (8,), label="x_before")
            rt.set_(x, None)
            rt.launch("safe", reads=[before], writes=[rt.empty((8,), "a")])
            assert check(rt.trace) == []                               # the view kept the storage
            after = rt.view(x, (x.numel,), label="x_rows")
            rt.op("skipped", after, out_shape=after.shape)
    findings = check(rt.trace)
    assert rules(findings) == [(1, ERROR), (2, ERROR)]
    assert "through the view 'x_rows'" in findings[1].why
    assert "launched nothing" in findings[1].why


def test_resize_to_zero_is_a_mutation_and_a_noop_resize_is_not():
    rt = Runtime()
    main, _ = streams(rt)
    with rt.stream(main):
        with rt.graph(main):
            t = rt.op("make", rt.empty((8,), "h"), out_shape=(8,), label="t")
            t.resize_(8)                                              # nothing changes
            rt.launch("use", reads=[t], writes=[rt.empty((8,), "a")])
            assert check(rt.trace) == []
            t.resize_(0)
            rt.launch("use_again", reads=[t], writes=[rt.empty((8,), "b")])
    findings = check(rt.trace)
    assert rules(findings) == [(1, ERROR), (2, ERROR)]
    assert findings[0].why.startswith("resize_ at step")


def test_a_repoint_before_capture_is_frozen_like_eager_and_not_reported():
    rt = Runtime()
    main, _ = streams(rt)
    with rt.stream(main):
        t = rt.from_host((8,), "t", value="t")
        t.set_(rt.from_host((8,), "other", value="o"))
        with rt.graph(main):
            rt.launch("use", reads=[t], writes=[rt.empty((8,), "a")])
    assert check(rt.trace) == []


def test_empty_arguments_are_reported_once_per_tensor_with_a_count():
    rt = Runtime()
    main, _ = streams(rt)
    with rt.stream(main):
        with rt.graph(main):
            x = rt.op("norm", rt.empty((8,), "h"), out_shape=(8,), label="x")
            rt.set_(x, None)
            for k in range(3):
                rt.launch(f"use{k}", reads=[raw(x, 8)], writes=[rt.empty((8,), f"o{k}")])
    empty = [f for f in check(rt.trace) if f.rule == 2]
    assert len(empty) == 1
    assert "3 captured ops" in empty[0].why and "'use0'" in empty[0].why


# --------------------------------------------------------------------------- rules 3 and 4
def test_unordered_cross_stream_write_and_read_is_rule_3():
    for joined in (False, True):
        rt = Runtime()
        main, alt = streams(rt)
        with rt.stream(main):
            buf = rt.zeros((8,), "buf")
            with rt.graph(main):
                alt.wait_stream(main)
                with rt.stream(alt):
                    writer = rt.launch("writer", writes=[buf])
                if joined:
                    main.wait_stream(alt)
                reader = rt.launch("reader", reads=[buf], writes=[rt.empty((8,), "out")])
                main.wait_stream(alt)
        findings = check(rt.trace)
        if joined:
            assert findings == []
        else:
            assert rules(findings) == [(3, WARNING)]
            assert findings[0].step == reader.step > writer.step
            assert findings[0].label == "buf" and findings[0].pointers == (buf.ptr,)


def test_a_block_reused_after_free_while_another_stream_reads_it_is_rule_4_not_3():
    for dispose_after_join in (False, True):
        rt = Runtime()
        main, alt = streams(rt)
        with rt.stream(main):
            with rt.graph(main):
                h = rt.empty((8,), "h")
                x = rt.op("norm", h, out_shape=(8,), label="x")
                alt.wait_stream(main)
                with rt.stream(alt):
                    rt.launch("shared", reads=[x], writes=[rt.empty((8,), "s")])
                if dispose_after_join:
                    main.wait_stream(alt)
                old = x.ptr
                rt.set_(x, None)
                y = rt.op("routed", h, out_shape=(8,), label="y")
                assert y.ptr == old                                 # the graph pool reused x's block
                main.wait_stream(alt)
        findings = check(rt.trace)
        if dispose_after_join:
            assert findings == []
        else:
            assert rules(findings) == [(4, WARNING)]
            assert findings[0].label == "x" and findings[0].pointers == (old,)
            assert "'shared' on stream alt" in findings[0].why and "'y'" in findings[0].why


def test_the_reuse_race_bites_when_the_reading_stream_runs_late():
    """Host order put 'shared' before the dispose; the device need not (why rule 4 warns)."""
    seen = {}
    for late in (False, True):
        rt = Runtime()
        main, alt = streams(rt)
        with rt.stream(main):
            inp = rt.from_host((8,), "inp", value="in1")
            with rt.graph(main, inputs=[inp]) as g:
                x = rt.op("norm", inp, out_shape=(8,), label="x")
                alt.wait_stream(main)
                with rt.stream(alt):
                    if late:
                        rt.launch("busy", writes=[rt.empty((8,), "b")], duration_us=20.0)
                    shared = rt.op("shared", x, out_shape=(8,), label="shared")
                rt.set_(x, None)
                routed = rt.op("routed", inp, out_shape=(8,), label="routed")
                main.wait_stream(alt)
                out = rt.add(routed, shared, label="out")
            inp.copy_(rt.from_host((8,), value="in2"))
            g.replay()
            seen[late] = str(rt.read(out)), rules(check(rt.trace))
    assert seen[False] == ("routed(in2) + shared(norm(in2))", [(4, WARNING)])
    assert seen[True] == ("routed(in2) + shared(routed(in2))", [(4, WARNING)])


def test_reachability_is_transitive_across_streams():
    rt = Runtime()
    main, alt = streams(rt)
    with rt.stream(main):
        buf = rt.zeros((8,), "buf")
        with rt.graph(main):
            rt.launch("first", writes=[buf])
            rt.launch("middle", writes=[rt.empty((8,), "m")])
            alt.wait_stream(main)
            with rt.stream(alt):
                rt.launch("step", writes=[rt.empty((8,), "s")])
                rt.launch("last", reads=[buf], writes=[rt.empty((8,), "o")])
            main.wait_stream(alt)
    assert check(rt.trace) == []


# --------------------------------------------------------------------------- rule 5
def test_replays_without_a_refresh_since_the_last_replay_are_stale():
    rt = Runtime()
    main, _ = streams(rt)
    with rt.stream(main):
        inp = rt.from_host((8,), "inp", value="x1")
        with rt.graph(main, inputs=[inp]) as g:
            rt.op("f", inp, out_shape=(8,))
        rt.view(inp, (4,), offset=4, label="inp.tail").copy_(rt.from_host((4,), value="t"))
        g.replay()                                   # a partial write still refreshes it
        g.replay()                                   # stale: nothing written since the last replay
        inp.copy_(rt.from_host((8,), value="x3"))
        g.replay()
    findings = check(rt.trace)
    assert rules(findings) == [(5, ERROR)]
    assert findings[0].label == "inp" and findings[0].pointers == (inp.ptr,)
    assert "1 of its 3 replays" in findings[0].why and "replay #1" in findings[0].why


# --------------------------------------------------------------------------- recorded traces
def test_plain_records_like_a_recorders_are_enough():
    """No engine objects, no Alloc/Free, a zero-element op recorded as a Launch, and deps
    that name no earlier node (a later one, an unknown one): they add no path, and no crash."""
    x_ptr, in_ptr = 0x7F3A_0000_0000, 0x7F3A_0001_0000

    def arg(tensor, label, ptr, numel, access):
        return Arg("in0" if access == "r" else "out0", tensor, label, ptr, numel, (numel,), 2 * numel, access)

    trace = Trace(records=[
        Capture(0, 0.0, "begin", 0, "main"),
        Launch(1, 1.0, 10, "rms_norm", "x", "norm", "main",
               (arg(1, "hidden", in_ptr, 8, "r"), arg(2, "x", x_ptr, 8, "w")), 0, deps=(11,)),
        Mutation(2, 2.0, "set_", 2, "x", x_ptr, 8, (8,), 0, 0, (0,), 0, "dispose_tensor"),
        Launch(3, 3.0, 11, "shared_expert_into", "shared", "shared", "alt",
               (arg(2, "x", 0, 0, "r"), arg(3, "out", x_ptr + 4096, 8, "w")), 0, deps=(10, 99)),
        Capture(4, 4.0, "end", 0, "main", inputs=(in_ptr,)),
        Replay(5, 5.0, 0, 0, "main"),
    ])
    assert [(f.rule, f.label) for f in check(trace)] == [(1, "x"), (2, "x"), (5, "hidden")]


# --------------------------------------------------------------------------- MoE matrix
def _name(config: MoEConfig) -> str:
    return config.name


FIXES = [c for c in MATRIX if c.dispose != "always" or c.clone]
assert len(FIXES) == 8


@pytest.mark.parametrize("config", FIXES, ids=_name)
def test_every_fix_is_clean(config):
    assert scenario_findings(config) == []


@pytest.mark.parametrize("mode", ["static_buffer", "raw_kernel"])
def test_routed_first_is_the_seed_bug(mode):
    findings = scenario_findings(MoEConfig(order="routed_first", shared_mode=mode))
    seed = [f for f in findings if f.rule in (1, 2)]
    assert rules(seed) == [(1, ERROR), (2, ERROR)]
    assert {f.label for f in seed} == {"x"}
    assert all(f.pointers[1] == 0 for f in seed)          # the shared expert got a null pointer
    # the static buffer keeps the warm-up's answer (rule 7); the raw kernel's node faults instead
    frozen = [f for f in findings if f.rule == 7]
    assert [f.label for f in frozen] == (["shared_out"] if mode == "static_buffer" else [])
    for f in frozen:                                      # with the dispose and the op it emptied
        assert "set_ of 'x'" in f.why and "'shared.down' on alt" in f.why and "launched nothing" in f.why


def test_routed_first_plain_fails_at_capture_with_nothing_frozen_wrong():
    result = scenarios.run(MoEConfig(order="routed_first", shared_mode="plain"))
    assert result.outcome == "capture_error:shape_mismatch"
    [failed] = check(result.trace)
    assert (failed.rule, failed.code, failed.severity) == (0, "capture_failed", ERROR)
    assert "There is no graph" in failed.why and "emptied 'x'" in failed.why


@pytest.mark.parametrize("mode", ["plain", "raw_kernel"])
def test_shared_first_is_correct_but_the_reused_block_is_a_race(mode):
    """PR #29463's reorder: right on every run here, fragile in principle (rule 4)."""
    findings = scenario_findings(MoEConfig(order="shared_first", shared_mode=mode))
    assert rules(findings) == [(4, WARNING)]
    assert findings[0].label == "x" and "stream alt" in findings[0].why


def test_shared_first_static_buffer_has_no_errors():
    assert [f for f in scenario_findings(MoEConfig(order="shared_first")) if f.severity == ERROR] == []


@pytest.mark.parametrize("order", ["shared_first", "routed_first"])
def test_stale_inputs_are_rule_5_and_refreshed_ones_are_not(order):
    stale = scenario_findings(MoEConfig(order=order, inputs="stale"))
    assert [f.label for f in stale if f.rule == 5] == ["hidden_in"]
    assert "3 of its 3 replays" in next(f.why for f in stale if f.rule == 5)
    trap = scenario_findings(MoEConfig(order=order, inputs="same_as_eager"))
    assert all(f.rule != 5 for f in trap)


def test_the_checker_sees_the_bug_that_replaying_the_eager_input_hides():
    config = MoEConfig(order="routed_first", inputs="same_as_eager")
    assert scenarios.run(config).outcome == "correct"
    assert rules(scenario_findings(config)) == [(1, ERROR), (2, ERROR), (7, ERROR)]


def test_an_unjoined_alt_stream_fails_the_capture_and_no_race_is_reported():
    findings = scenario_findings(MoEConfig(order="shared_first", capture_fault="unjoined"))
    assert rules(findings) == [(0, ERROR)]                # no rule 3/4 on a graph that never existed
    assert "cudaErrorStreamCaptureUnjoined" in findings[0].why
    assert "main.wait_stream(alt)" in findings[0].fix


def test_every_layer_is_checked():
    findings = scenario_findings(MoEConfig(layers=3))
    assert sorted(f.label for f in findings) == sorted(
        [f"L{i}.x" for i in range(3) for _ in (1, 2)] + [f"L{i}.shared_out" for i in range(3)])


@pytest.mark.parametrize("config", [MoEConfig(), MoEConfig(order="shared_first", shared_mode="plain",
                                                           inputs="stale")], ids=_name)
def test_a_trace_round_tripped_through_json_gives_identical_findings(config):
    trace = scenarios.run(config).trace
    findings = check(trace)
    assert findings and check(Trace.from_json(trace.to_json())) == findings


# --------------------------------------------------------------------------- report
def test_report_has_one_block_per_finding_with_hex_pointers():
    findings = scenario_findings(MoEConfig(order="routed_first", shared_mode="raw_kernel"))
    report = format_report(findings)
    blocks = report.split("\n\n")
    assert len(blocks) == len(findings) + 1 and blocks[-1] == "2 errors, 0 warnings."
    assert blocks[0].startswith("ERROR rule 1 (host_mutation) at step")
    assert "0x0" in blocks[0] and "why:" in blocks[0] and "fix:" in blocks[0]
    assert format_report([]) == "No capture hazards found."


def test_findings_are_frozen_plain_data():
    finding = scenario_findings(MoEConfig())[0]
    with pytest.raises(FrozenInstanceError):
        finding.rule = 3
    data = json.loads(json.dumps(finding.to_dict()))
    assert data["rule"] == 1 and data["code"] == "host_mutation" and data["severity"] == "error"
    assert data["pointers"] == [hex(p) for p in finding.pointers]


# --------------------------------------------------------------------------- soundness
N = 8                # elements of every tensor: equal sizes, so freed blocks get reused
KINDS = ("op",) * 4 + ("raw", "into", "view") + ("dispose",) * 3 + ("fork", "fork", "join")
DURATIONS = st.sampled_from([1.0, 3.0, 20.0])   # unequal kernels, so that races do bite


@dataclass(frozen=True)
class Program:
    """A captured body over ``env`` (0: the static input, 1: a static buffer, then new tensors).

    body       ("op", stream, srcs, us) | ("raw", stream, src, us) | ("into", stream, src, us) |
               ("view", src) | ("dispose", tensor) | ("fork",) | ("join",)
    outputs    tensors the final merge on main reads into the output buffer: all that were
               not disposed (so any corrupted value shows), plus a few picked at random
    refresh    per replay: copy a new input into the static input first?
    """

    body: tuple[tuple, ...]
    outputs: tuple[int, ...]
    refresh: tuple[bool, ...]

    @property
    def forked(self) -> bool:
        return ("fork",) in self.body


@st.composite
def programs(draw) -> Program:
    body: list[tuple] = []
    home = ["main", "main"]          # the stream each tensor was allocated on
    was_read: list[int] = []         # region tensors some launch read: what code disposes ...
    read_across: list[int] = []      # ... and those another stream read: the seed's pattern
    forked = False
    for _ in range(draw(st.integers(1, 14))):
        kind = draw(st.sampled_from(KINDS))
        stream = draw(st.sampled_from(("main", "alt"))) if forked else "main"
        pick = st.integers(0, len(home) - 1)
        srcs: tuple[int, ...] = ()
        if kind == "op":
            srcs = tuple(draw(st.lists(pick, min_size=1, max_size=2)))
            body.append(("op", stream, srcs, draw(DURATIONS)))
        elif kind in ("raw", "into"):
            srcs = (draw(pick),)
            body.append((kind, stream, srcs[0], draw(DURATIONS)))
        elif kind == "view":
            body.append(("view", draw(pick)))
            home.append(home[body[-1][1]])
        elif kind == "dispose" and len(home) > 2:
            choices = [st.integers(2, len(home) - 1)]
            choices += [st.sampled_from(ids) for ids in (was_read, read_across) if ids]
            body.append(("dispose", draw(st.one_of(choices))))
        elif kind == "fork" or (kind == "join" and forked):
            body.append((kind,))
            forked = True
        was_read += [j for j in srcs if j >= 2 and j not in was_read]
        read_across += [j for j in srcs if j >= 2 and home[j] != stream and j not in read_across]
        if kind in ("op", "raw"):
            home.append(stream)
    disposed = {stmt[1] for stmt in body if stmt[0] == "dispose"}
    kept = {j for j in range(2, len(home)) if j not in disposed}     # every result stays visible
    picked = draw(st.lists(st.integers(0, len(home) - 1), min_size=1, max_size=3))
    outputs = tuple(sorted(kept.union(picked)))
    refresh = tuple(draw(st.lists(st.integers(0, 7).map(bool), min_size=1, max_size=3)))
    return Program(tuple(body), outputs, refresh)


def run_body(rt: Runtime, program: Program, env: list, out, main, alt, *, captured: bool) -> None:
    """The program's body; eagerly (``captured=False``) it runs on main and never disposes."""
    for i, stmt in enumerate(program.body):
        kind = stmt[0]
        if kind in ("fork", "join"):
            if captured:
                (alt.wait_stream(main) if kind == "fork" else main.wait_stream(alt))
        elif kind == "dispose":
            if captured:
                rt.set_(env[stmt[1]], None, why="dispose")
        elif kind == "view":
            src = env[stmt[1]]
            env.append(rt.view(src, src.shape, label=f"v{i}"))
        else:
            us = stmt[3]
            with rt.stream(alt if captured and stmt[1] == "alt" else main):
                if kind == "op":
                    srcs = [env[j] for j in stmt[2]]
                    env.append(rt.op(f"k{i}", *srcs, out_shape=srcs[0].shape, label=f"t{i}",
                                     duration_us=us))
                elif kind == "raw":
                    env.append(rt.empty((N,), f"t{i}"))
                    rt.launch(f"raw{i}", reads=[raw(env[stmt[2]], N)], writes=[env[-1]],
                              duration_us=us)
                else:   # "into": the static buffer, sized like its input (skipped when empty)
                    src = env[stmt[2]]
                    rt.launch(f"into{i}", reads=[src], writes=[rt.view(env[1], src.shape)],
                              duration_us=us)
    if captured and program.forked:
        main.wait_stream(alt)
    rt.launch("merge", reads=[env[j] for j in program.outputs], writes=[out])


def setup(rt: Runtime):
    main, alt = streams(rt)
    rt.current_stream = main
    env = [rt.from_host((N,), "inp", value="in0"), rt.zeros((N,), "buf")]
    return main, alt, env, rt.empty((N,), "out")


def replayed(program: Program) -> tuple[list, Trace]:
    """Capture once, replay once per ``refresh`` entry; the outputs and the trace."""
    rt = Runtime()
    main, alt, env, out = setup(rt)
    with rt.graph(main, label="body", inputs=[env[0]]) as g:
        run_body(rt, program, list(env), out, main, alt, captured=True)
    outputs: list = []
    for k, refresh in enumerate(program.refresh, 1):
        if refresh:
            env[0].copy_(rt.from_host((N,), value=f"in{k}"))
        try:
            g.replay()
            outputs.append(rt.read(out))
        except IllegalAddress:
            outputs.append("cudaErrorIllegalAddress")
            break
    return outputs, rt.trace


def eager(program: Program) -> list:
    """What each replay should give: the body run eagerly on replay k's intended input."""
    rt = Runtime()
    main, alt, env, out = setup(rt)
    outputs = []
    for k in range(1, len(program.refresh) + 1):
        env[0].copy_(rt.from_host((N,), value=f"in{k}"))
        run_body(rt, program, list(env), out, main, alt, captured=False)
        outputs.append(rt.read(out))
    return outputs


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_a_silent_checker_means_replay_equals_eager(program):
    got, trace = replayed(program)
    findings = check(trace)
    if got != eager(program):
        assert findings, f"replay differs from eager, but the checker is silent: {program}"
    assert check(Trace.from_json(trace.to_json())) == findings


# What the generator can make is a property of the generator, so look for it deterministically
# (derandomize), and stop at the first example (shrinking would cost most of the time).
FIND = settings(max_examples=2000, deadline=None, database=None, derandomize=True,
                phases=[Phase.generate], suppress_health_check=[HealthCheck.too_slow])


def test_the_generator_makes_both_buggy_and_clean_programs_that_dispose():
    def disposes(p: Program) -> bool:
        return any(s[0] == "dispose" for s in p.body) and p.forked

    buggy = find(programs(), lambda p: disposes(p) and replayed(p)[0] != eager(p), settings=FIND)
    clean = find(programs(), lambda p: disposes(p) and not check(replayed(p)[1]), settings=FIND)
    assert replayed(buggy)[0] != eager(buggy)
    assert replayed(clean)[0] == eager(clean) and check(replayed(clean)[1]) == []


@pytest.mark.parametrize("rule", [1, 2, 3, 4, 5])
def test_the_generator_reaches_every_rule(rule):
    def fires(p: Program) -> bool:
        return any(f.rule == rule for f in check(replayed(p)[1]))

    assert fires(find(programs(), fires, settings=FIND))
