"""gpu_demo on a machine without a GPU: settings, the model, the dry-run recorder, the CLI.

Small sizes and float32 keep the whole file fast on two CPU cores.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from simlib.spec import MoEConfig  # noqa: E402
from simlib.trace import EventOp, HostSync, Launch, Mutation, Replay, Trace  # noqa: E402

from gpu_demo.cli import _config, build_parser, main  # noqa: E402
from gpu_demo.kernels import swiglu  # noqa: E402
from gpu_demo.moe import MoEStack, dispose_tensor  # noqa: E402
from gpu_demo.outcomes import classify_capture_failure, first_error, relative_error  # noqa: E402
from gpu_demo.recorder import record_moe  # noqa: E402
from gpu_demo.settings import RunSettings  # noqa: E402
from gpu_demo.streams import dry_capture  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without CUDA")
SMALL = MoEConfig(tokens=4, hidden=32, intermediate=48, experts=4, top_k=2)
CPU32 = RunSettings(device="cpu", dtype="float32")


def record(**changes) -> Trace:
    return record_moe(SMALL.with_(**changes), CPU32)


def captured(trace: Trace) -> list[Launch]:
    return trace.launches(graph=0)


def reads_of_x(launches: list[Launch]) -> list:
    return [a for launch in launches for a in launch.args if a.label == "x" and a.reads]


# -- settings and configuration ------------------------------------------------------

@pytest.mark.parametrize("field, value, names", [
    ("dtype", "int8", ["'int8'", "'bfloat16'", "'float16'", "'float32'"]),
    ("device", "tpu", ["'tpu'", "'auto'", "'cuda'", "'cpu'"]),
    ("seed", -1, ["seed", "-1"]),
])
def test_bad_settings_are_refused_with_the_valid_values(field, value, names):
    with pytest.raises(ValueError) as err:
        RunSettings(**{field: value})
    assert all(n in str(err.value) for n in names)


@no_cuda
def test_asking_for_cuda_without_cuda_is_refused():
    with pytest.raises(ValueError, match="no CUDA device"):
        RunSettings(device="cuda")


def test_cli_refuses_an_invalid_config_naming_the_field(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["record", "--dry-run", "--top-k", "9"])
    assert exit_.value.code == 2
    assert "top_k=9 is larger than experts=8" in capsys.readouterr().err


@no_cuda
@pytest.mark.parametrize("command", ["run", "bench", "decode", "record"])
def test_gpu_commands_without_cuda_print_one_line_and_exit_2(command, capsys):
    assert main([command]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "needs a CUDA GPU" in err


@no_cuda
def test_the_module_entry_point_exits_2_without_cuda():
    done = subprocess.run([sys.executable, "-m", "gpu_demo", "run", "--matrix"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip() == "gpu_demo run: needs a CUDA GPU and none is visible"


# -- the model ----------------------------------------------------------------------

def test_grouped_routed_experts_match_a_per_token_loop():
    model = MoEStack(SMALL.with_(shared_mode="plain", dispose="never"), CPU32)
    layer, residual = model.layers[0], torch.randn(4, 32)
    with torch.no_grad():
        out = model(residual)
        x = layer.norm(residual)
        weights, ids = layer.router(x)
        want = residual + swiglu(x, layer.shared.w_gate_up, layer.shared.w_down)
        for t in range(4):
            for j in range(2):
                e = ids[t, j]
                want[t] += weights[t, j] * swiglu(x[t], layer.routed.w_gate_up[e].T, layer.routed.w_down[e].T)
    assert relative_error(out, want) < 1e-5


def test_capacity_holds_when_every_token_picks_the_same_experts():
    model = MoEStack(SMALL.with_(shared_mode="plain"), CPU32)
    layer = model.layers[0]
    with torch.no_grad():
        layer.router.weight.zero_()
        layer.router.weight[:2] = 1.0  # experts 0 and 1 win for every token with positive features
        residual = torch.rand(4, 32) + 0.1
        out = model(residual)
        x = layer.norm(residual)
        both = sum(0.5 * swiglu(x, layer.routed.w_gate_up[e].T, layer.routed.w_down[e].T) for e in (0, 1))
        want = residual + both + swiglu(x, layer.shared.w_gate_up, layer.shared.w_down)
    assert relative_error(out, want) < 1e-5


def test_eager_output_is_the_same_for_every_shared_mode_order_and_dispose():
    residual = torch.randn(4, 32)
    outs = []
    with torch.no_grad():
        for mode, order, dispose in [("plain", "shared_first", "never"), ("static_buffer", "routed_first", "always"),
                                     ("raw_kernel", "routed_first", "always")]:
            outs.append(MoEStack(SMALL.with_(shared_mode=mode, order=order, dispose=dispose), CPU32)(residual))
    assert all(relative_error(o, outs[0]) < 1e-6 for o in outs[1:])


def test_the_options_that_act_only_under_capture_leave_eager_output_alone():
    residual = torch.randn(4, 32)
    with torch.no_grad():
        base = MoEStack(SMALL, CPU32)(residual)
        for changes in (dict(dispose_kind="set_scalar"), dict(dispose_kind="resize_storage"),
                        dict(alt_delay_us=50.0, record_stream=True), dict(capture_mode="relaxed")):
            assert relative_error(MoEStack(SMALL.with_(**changes), CPU32)(residual), base) < 1e-6


@pytest.mark.parametrize("kind, shape, numel, null", [
    ("set_empty", (0,), 0, True), ("set_scalar", (), 1, False), ("resize_storage", (4, 8), 32, True)])
def test_each_dispose_kind_leaves_what_the_simulator_models(kind, shape, numel, null):
    x = torch.randn(4, 8)
    dispose_tensor(x, kind)
    assert tuple(x.shape) == shape and x.numel() == numel and (x.data_ptr() == 0) is null


def test_the_cli_flags_build_the_new_options():
    args = build_parser().parse_args(["run", "--dispose-kind", "resize_storage", "--capture-mode", "relaxed",
                                      "--alt-delay-us", "20", "--record-stream", "--replays", "200"])
    assert _config(args) == MoEConfig(dispose_kind="resize_storage", capture_mode="relaxed", alt_delay_us=20.0,
                                      record_stream=True, replays=200)


def test_wrong_replays_count_errors_above_tolerance_nan_and_faults():
    from gpu_demo.harness import CaseResult, count_wrong

    assert count_wrong([0.0, 0.5, float("nan"), None], 1e-2) == 3
    assert count_wrong([], 1e-2) is None
    old = {"config": SMALL.to_dict(), "outcome": "correct", "errors": [0.0], "tolerance": 1e-2}
    assert CaseResult(**old).wrong_replays is None       # a case recorded before the field existed


def test_dry_capture_shows_the_stale_shared_buffer_on_the_cpu():
    residual = torch.randn(4, 32)
    errors = {}
    with torch.no_grad():
        for order in ("shared_first", "routed_first"):
            config = SMALL.with_(order=order)
            model, reference = MoEStack(config, CPU32), MoEStack(config, CPU32)
            model(torch.randn(4, 32))  # warm-up on another input fills the static buffer
            with dry_capture():
                errors[order] = relative_error(model(residual), reference(residual.clone()))
    assert errors["shared_first"] == 0.0
    assert errors["routed_first"] > 0.1


# -- the recorder (dry run) ---------------------------------------------------------

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


# -- outcome classification ------------------------------------------------------------

@pytest.mark.parametrize("message, outcome", [
    ("CUDA error: operation not permitted when stream is capturing", "capture_error:cudaErrorStreamCaptureUnsupported"),
    ("CUDA error: capture sequence contains a fork that was not joined to the primary stream",
     "capture_error:cudaErrorStreamCaptureUnjoined"),
    ("CUDA error: operation failed due to a previous error during capture\nSearch for "
     "`cudaErrorStreamCaptureInvalidated' in https://docs.nvidia.com", "capture_error:cudaErrorStreamCaptureInvalidated"),
    ("The size of tensor a (512) must match the size of tensor b (0) at non-singleton dimension 1",
     "capture_error:shape_mismatch"),
    ("CUDA error: an illegal memory access was encountered", "illegal_address"),
    ("something else entirely", "capture_error:RuntimeError"),
    ("The tensor has a non-zero number of elements, but its data is not allocated yet.\nIf you're using",
     "capture_error:storage_not_allocated"),
    ("both arguments to linear need to be at least 1D, but they are 0D and 2D", "capture_error:shape_mismatch"),
])
def test_torch_error_messages_map_to_the_outcome_vocabulary(message, outcome):
    assert classify_capture_failure(RuntimeError(message)) == outcome


def test_the_first_error_of_a_chain_is_reported():
    try:
        try:
            raise RuntimeError("The size of tensor a (16) must match the size of tensor b (0)")
        finally:
            raise RuntimeError("CUDA error: capture sequence contains a fork that was not joined")
    except RuntimeError as exc:
        assert classify_capture_failure(first_error(exc)) == "capture_error:shape_mismatch"


# -- reading profiler timelines (synthetic Chrome traces) ---------------------------------

def _kernel(name, stream, ts, dur, correlation):
    return {"cat": "kernel", "name": name, "ts": ts, "dur": dur,
            "args": {"stream": stream, "correlation": correlation, "grid": [2, 1, 1]}}


def test_a_chrome_trace_becomes_replays_with_roles_gaps_and_the_join():
    from gpu_demo.profiling import join_gap, read_chrome_trace, same_stream_gaps, sink_gap, stream_starts

    events = [
        {"cat": "user_annotation", "name": "gate", "ts": 0, "dur": 10},
        {"cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 5, "dur": 1, "args": {"correlation": 1}},
        _kernel("gemm", 7, 20, 4, 1),
        # one graph replay (correlation 2): two streams overlap, then main waits for alt
        _kernel("norm", 7, 100, 2, 2),
        _kernel("routed", 9, 103, 10, 2),
        _kernel("shared", 7, 104, 3, 2),
        _kernel("merge", 7, 115, 1, 2),
    ]
    timeline = read_chrome_trace({"traceEvents": events})
    eager, replay = timeline.per_launch()
    assert [k.name for k in replay] == ["norm", "routed", "shared", "merge"]
    assert timeline.role_of(eager[0]) == "gate" and timeline.role_of(replay[0]) == ""
    assert sorted(same_stream_gaps(replay)) == [2.0, 8.0]
    assert join_gap(replay) == (2.0, True)
    assert eager[0].blocks == 2
    assert sink_gap(replay) == 2.0 and stream_starts(replay) == {3: 0.0, 1: 3.0}


def test_a_pdl_kernel_that_starts_before_its_predecessor_ends_has_a_negative_sink_gap():
    from gpu_demo.profiling import read_chrome_trace, sink_gap

    events = [_kernel("combine", 7, 0, 5, 1), _kernel("residual_add_pdl", 8, 3, 4, 1)]
    (replay,) = read_chrome_trace({"traceEvents": events}).per_launch()
    assert sink_gap(replay) == -2.0


# -- the checker's verdicts on dry-run recordings -------------------------------------------

from simlib.checker import check  # noqa: E402

from gpu_demo import assert_capture_safe  # noqa: E402

SMALL_FLAGS = ["--tokens", "4", "--hidden", "64", "--intermediate", "128", "--dtype", "float32"]


def rules(trace: Trace) -> set[tuple[int, str]]:
    return {(f.rule, f.label) for f in check(trace)}


@pytest.mark.parametrize("mode", ["static_buffer", "raw_kernel"])
def test_the_checker_flags_the_incident_order(mode):
    assert rules(record(order="routed_first", shared_mode=mode)) == {(1, "x"), (2, "x")}


@pytest.mark.parametrize("changes", [
    {"order": "shared_first"},
    {"order": "routed_first", "dispose": "skip_in_capture"},
    {"order": "routed_first", "dispose": "own_buffer"},
    {"order": "routed_first", "dispose": "never"},
    {"order": "routed_first", "clone": True},
    {"order": "routed_first", "shared_mode": "raw_kernel", "clone": True},
])
def test_the_checker_passes_the_fixed_programs(changes):
    assert check(record(**changes)) == []


def test_the_checker_flags_a_forgotten_input_refresh_but_not_the_trap():
    assert rules(record(order="shared_first", inputs="stale")) == {(5, "residual")}
    # Replaying on the warm-up's input refreshes the buffer: no hazard in the
    # trace, only a test that proves nothing (see the GPU results).
    assert check(record(order="shared_first", inputs="same_as_eager")) == []


def test_record_dry_run_of_the_incident_prints_the_report_and_exits_1(capsys):
    assert main(["record", "--dry-run", "--order", "routed_first"]) == 1
    out = capsys.readouterr().out
    assert "rule 1 (host_mutation)" in out and "rule 2 (empty_argument)" in out and "'x'" in out


@pytest.mark.parametrize("flags", [
    ["--order", "shared_first"],
    ["--order", "routed_first", "--dispose", "skip_in_capture"],
    ["--order", "routed_first", "--dispose", "own_buffer"],
    ["--order", "routed_first", "--dispose", "never"],
    ["--order", "routed_first", "--clone"],
])
def test_record_dry_run_of_the_fixes_exits_0(flags, capsys):
    assert main(["record", "--dry-run", *flags, *SMALL_FLAGS]) == 0
    assert "No capture hazards found." in capsys.readouterr().out


def test_record_dry_run_reports_a_failed_capture(capsys, tmp_path):
    trace_file = tmp_path / "trace.json"
    code = main(["record", "--dry-run", "--order", "routed_first", "--shared-mode", "plain",
                 "--trace-out", str(trace_file), *SMALL_FLAGS])
    assert code == 1
    assert "capture failed: capture_error:shape_mismatch" in capsys.readouterr().out
    assert Trace.from_json(trace_file.read_text()).meta["capture_error"] == "capture_error:shape_mismatch"


def test_assert_capture_safe_raises_with_the_report_for_the_incident():
    model = MoEStack(SMALL.with_(order="routed_first"), CPU32)
    with pytest.raises(AssertionError) as err:
        assert_capture_safe(model, torch.randn(4, 32))
    assert "host_mutation" in str(err.value) and "dispose_tensor" in str(err.value)


def test_assert_capture_safe_accepts_the_fixed_program():
    assert_capture_safe(MoEStack(SMALL.with_(order="routed_first", dispose="skip_in_capture"), CPU32),
                        torch.randn(4, 32))


@no_cuda
def test_a_case_whose_process_dies_without_a_result_is_reported_not_raised():
    from gpu_demo.harness import HARNESS_ERROR, run_isolated

    result = run_isolated(SMALL, RunSettings(device="cpu"), timeout=120)
    assert result.outcome == HARNESS_ERROR
    assert "Traceback" in result.raw_error and result.message


# -- the recorder's cost per op, as a dry run (no timings asserted) ---------------------------------

@no_cuda
def test_the_dry_run_overhead_counts_ops_and_prices_them_against_an_empty_dispatch_mode(capsys, tmp_path):
    import json

    out, threads = tmp_path / "overhead.json", torch.get_num_threads()
    assert main(["recorder-overhead", "--dry-run", "--layers", "1", "--repeats", "1", "--out", str(out)]) == 0
    table = capsys.readouterr().out
    assert "floor us/op" in table and "moe_stack" in table and "plain_pytorch_stack" in table
    written = json.loads(out.read_text())
    assert written["provenance"]["command"].startswith("python -m gpu_demo recorder-overhead --dry-run")
    assert (written["mode"], written["intra_op_threads"], written["clock"]) == ("dry_run", 1, "process_time")
    for stack in ("moe_stack", "plain_pytorch_stack"):
        result = written[stack]
        assert result["ops"] > 0 and result["records"] >= result["ops"] // 2
        assert {"plain_s", "floor_s", "record_s", "check_s", "floor_us_per_op", "record_us_per_op"} <= set(result)
        assert len(result["floor_s"]["samples"]) == 1
    assert torch.get_num_threads() == threads
