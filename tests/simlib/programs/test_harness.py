"""The harness for hand-written programs: docs/simulator.md's example in under 20 lines, every outcome word,
and several graphs in one session."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from simlib import Runtime
from simlib.engine.schedules import Schedule
from simlib.engine.tensor import raw
from simlib.glossary import CORRECT, ILLEGAL_ADDRESS, SILENT_WRONG, term
from simlib.programs.harness import Program, Session, explore_program, run_program

SIMULATOR_PAGE = (Path(__file__).resolve().parents[3] / "docs" / "simulator.md").read_text()


def page_example() -> str:
    block = SIMULATOR_PAGE.split("<!-- own-program:start", 1)[1].split("<!-- own-program:end -->", 1)[0]
    return re.search(r"```python\n(.*?)```", block, re.DOTALL).group(1)


def test_the_simulator_page_example_runs_in_under_20_lines_and_prints_what_it_says():
    code = page_example()
    lines = [line for line in code.splitlines() if line.strip()]
    assert len(lines) < 20, f"docs/simulator.md's example has {len(lines)} lines; the promise is under 20"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "docs/simulator.md example", "exec"), {})
    promised = [line.split("#", 1)[1].strip() for line in lines if line.startswith("print(")]
    assert out.getvalue().splitlines() == promised


def scaled(scale_in_tensor: bool):
    def build(rt):
        x, scale = rt.empty((8,), "x"), rt.empty((1,), "scale")
        state = {}
        def feed(k):
            x.copy_(rt.from_host((8,), f"x{k}", value=f"x{k}"))
            state["scale"] = f"scale@{k}"
            if scale_in_tensor:
                scale.copy_(rt.from_host((1,), "scale_host", value=state["scale"]))
        def forward():
            if scale_in_tensor:
                return rt.op("mul", x, scale, out_shape=(8,))
            return rt.op("mul", x, out_shape=(8,), scalars={"scale": state["scale"]})
        return Program(forward, feed, [x, scale] if scale_in_tensor else [x])
    return build


def test_the_fix_keeps_the_scale_in_a_tensor_fed_every_call():
    bad, good = run_program(scaled(False)), run_program(scaled(True))
    assert bad.outcome == SILENT_WRONG and [f.rule for f in bad.findings()] == [8]
    assert good.outcome == CORRECT and good.findings() == [] and len(good.replays) == 3
    assert str(good.replays[-1].got) == "mul(x6, scale@6)"


def test_a_raw_kernel_reading_a_disposed_input_faults_on_replay():
    def build(rt):
        x = rt.empty((8,), "x")
        def forward():
            h = rt.op("norm", x, out_shape=(8,))
            y = rt.empty((8,), "y")
            if rt.is_current_stream_capturing():
                rt.set_(h, None, why="dispose")
            rt.launch("triton", reads=[raw(h, 8)], writes=[y])
            return y
        return Program(forward, lambda k: x.copy_(rt.from_host((8,), f"x{k}", value=f"x{k}")), [x])
    result = run_program(build)
    assert result.outcome == ILLEGAL_ADDRESS and result.replays == []


@pytest.mark.parametrize("where, outcome", [("warmup", "warmup_error:shape_mismatch"),
                                            ("feed", "host_error:ZeroDivisionError"),
                                            ("capture", "capture_error:cudaErrorStreamCaptureUnsupported")])
def test_errors_have_outcome_words(where, outcome):
    def build(rt):
        x, y = rt.empty((8,), "x"), rt.empty((4,), "y")
        calls = []
        def feed(k):
            calls.append(k)
            if where == "feed" and k == 4:
                1 / 0
        def forward():
            if where == "warmup":
                rt.add(x, y)
            if where == "capture" and rt.is_current_stream_capturing():
                rt.synchronize()
            return rt.op("f", x, out_shape=(8,))
        return Program(forward, feed, [x])
    result = run_program(build)
    assert result.outcome == outcome and result.error is not None
    assert term(outcome).meaning
    if where == "capture":        # what the user sees, with the first error as its cause
        assert result.error.code == "cudaErrorStreamCaptureInvalidated"


def test_a_build_must_return_programs():
    with pytest.raises(TypeError, match="must return a Program"):
        Session(lambda rt: None)
    with pytest.raises(ValueError, match="several graphs"):
        Session(lambda rt: {"a": Program(lambda: rt.empty((1,))), "b": Program(lambda: rt.empty((1,)))}).capture()


def test_a_deferred_read_reads_the_output_when_asked():
    def build(rt):
        x = rt.empty((8,), "x")
        return Program(lambda: rt.op("f", x, out_shape=(8,)),
                       lambda k: x.copy_(rt.from_host((8,), f"x{k}", value=f"x{k}")), [x])
    session = Session(build)
    session.warm_up(calls=1)
    session.capture()
    later = session.replay(read=False)
    session.replay()
    seen = later()
    assert (seen.call, str(seen.got), str(seen.want)) == (3, "f(x4)", "f(x3)")   # the static output moved on


def decode_steps(keep):
    """A decode loop: each step's output kept as ``keep(rt, out)`` says, every step kept so far compared."""
    def build(rt):
        x = rt.empty((8,), "x")
        kept = []
        def after(k, out):
            kept.append(keep(rt, out))
            return rt.stack(kept, label=f"kept{k}")
        return Program(lambda: rt.op("logits", x, out_shape=(8,)),
                       lambda k: x.copy_(rt.from_host((8,), f"x{k}", value=f"x{k}")), [x], after=after)
    return build


def test_after_runs_in_both_runtimes_after_warm_ups_and_replays_and_its_return_is_compared():
    cloned = run_program(decode_steps(lambda rt, out: rt.clone(out)), warmups=1, replays=2)
    assert cloned.outcome == CORRECT
    assert [str(r.got) for r in cloned.replays] == ["stack(logits(x1), logits(x3))",
                                                   "stack(logits(x1), logits(x3), logits(x4))"]
    held = run_program(decode_steps(lambda rt, out: out), warmups=1, replays=2)       # no clone
    assert held.outcome == SILENT_WRONG
    assert str(held.replays[-1].got) == "stack(logits(x1), logits(x4), logits(x4))"
    assert str(held.replays[-1].want) == "stack(logits(x1), logits(x3), logits(x4))"


def test_after_failing_is_a_host_error():
    def build(rt):
        x = rt.empty((8,), "x")
        return Program(lambda: rt.op("f", x, out_shape=(8,)), after=lambda k, out: 1 / 0)
    assert run_program(build).outcome == "host_error:ZeroDivisionError"


def racy(rt):
    """The shared branch reads ``x`` on alt while main frees it and writes a new tensor over its block."""
    main, alt, h = rt.Stream("main"), rt.Stream("alt"), rt.empty((4, 8), "h")
    def forward():
        x = rt.op("norm", h, out_shape=(4, 8), label="x")
        alt.wait_stream(main)
        with rt.stream(alt):
            y = rt.op("reader", x, out_shape=(4, 8), label="y", duration_us=2.0)
        rt.release(x)
        rt.release(rt.op("writer", h, out_shape=(4, 8), label="z", duration_us=30.0))
        main.wait_stream(alt)
        return y
    return Program(forward, lambda k: h.copy_(rt.from_host((4, 8), f"h{k}", value=f"h{k}")), [h], stream=main)


def test_a_harness_programs_races_have_an_outcome_set_with_a_schedule_for_each():
    found = explore_program(racy, warmups=1, replays=1)
    assert found.outcomes == {CORRECT, SILENT_WRONG}
    wrong = found.witness(SILENT_WRONG)
    again = Session(racy, schedule=Schedule(((wrong.order[0].id, wrong.order[1].id),)))
    again.warm_up(calls=1)
    again.capture()
    again.replay()
    assert again.result().outcome == SILENT_WRONG
    with pytest.raises(ValueError, match="not both"):
        Session(racy, runtime=Runtime(), schedule=Schedule())


def freed_scale(rt):
    """A scale re-bound every call (``self.buf = self.buf.to(copy=True)``): the capture's copy reads a freed block."""
    x, module = rt.empty((4, 8), "x"), {"buf": rt.from_host((4, 8), "scale", value="scale")}

    def forward():
        old, module["buf"] = module["buf"], rt.clone(module["buf"], label="buf")
        rt.release(old)
        return rt.op("scale_by", x, module["buf"], out_shape=(4, 8))
    return Program(forward, lambda k: x.copy_(rt.from_host((4, 8), f"x{k}", value=f"x{k}")), [x])


def test_a_freed_block_the_allocator_may_leave_alone_gives_an_outcome_set_with_its_witness():
    # Which block a request gets is the allocator's choice: handed out again, the freed scale's block
    # holds the next upload and the replay scales by it; left alone, the replay reads the old scale.
    found = explore_program(freed_scale, warmups=1, replays=2)
    assert found.races == () and found.outcomes == {CORRECT, SILENT_WRONG}
    assert found.default.outcome == SILENT_WRONG
    assert found.witness(CORRECT).describe() == "if the allocator hands no freed block out again"
    lucky = Session(freed_scale, runtime=Runtime(reuse_default=False))
    lucky.warm_up(calls=1)
    lucky.capture()
    lucky.replay()
    assert lucky.result().outcome == CORRECT and lucky.result().findings()   # the rule fires either way
    assert explore_program(racy, warmups=1, replays=1).witnesses[-1].reuse_default   # no freed block decides there


def test_a_program_registers_its_generators_with_its_graph():
    def sampling(registered):
        def build(rt):
            x, gen = rt.empty((8,), "x"), rt.Generator("sampler")
            return Program(lambda: rt.random("sample", x, out_shape=(8,), generator=gen),
                           lambda k: x.copy_(rt.from_host((8,), f"x{k}", value=f"x{k}")), [x],
                           generators=[gen] if registered else [])
        return build
    assert run_program(sampling(True)).outcome == CORRECT
    frozen = run_program(sampling(False))
    assert frozen.outcome == SILENT_WRONG and {str(r.got).split(", ")[1] for r in frozen.replays} == {"sampler@2)"}
