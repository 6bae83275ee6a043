"""The guard: how a target reaches the child, the replay protocol, the verdict, the CLI.

The replay protocol is tested on the CPU with fake graphs (a graph that reruns
the function, one that does nothing, one that faults); the real captures run
in the GPU tests at the end (skipped without CUDA).
"""

from __future__ import annotations

import json
import math
import os
import sys

import pytest
import torch

from gpu_demo.guard.check import CaptureNotChecked, CaptureNotSafe, GuardReport, assert_capture_safe, check_capture, judge
from gpu_demo.guard.differential import Subject
from gpu_demo.guard.protocol import capture_replay
from gpu_demo.guard.protocol.capture_replay import ReplayEvidence, fresh_like, replay_and_compare
from gpu_demo.guard.protocol.child import run_in_child
from gpu_demo.guard.protocol.metric import output_error
from gpu_demo.guard.protocol.tolerance import tolerance_for
from gpu_demo.guard.target import TargetError, build, factory_call, load, portable
from gpu_demo.lab.cli.main import main
from gpu_demo.lab.moe.model import MoEStack
from gpu_demo.lab.moe.settings import RunSettings
from simlib.checker import ERROR, WARNING, Finding, check
from simlib.programs.spec import MoEConfig
from simlib.trace import Trace

SMALL = MoEConfig(tokens=4, hidden=32, intermediate=64, experts=4)
CPU32 = RunSettings(device="cpu", dtype="float32")
# The small MoE targets below are built on the CPU: on a GPU machine the guard moves the inputs to
# the GPU, so the tests that use them describe the machine without CUDA.
no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="tests the machine without CUDA")


# -- targets used below (module level: a child can import them) -------------------------------

def incident_moe() -> MoEStack:
    """A zero-argument factory: the MoE layer in the incident's order."""
    return MoEStack(SMALL.with_(order="routed_first"), CPU32)


def fixed_moe() -> MoEStack:
    return MoEStack(SMALL.with_(order="routed_first", dispose="skip_in_capture"), CPU32)


def plain_moe() -> MoEStack:
    """Routed first with a plain-torch shared expert: the capture itself fails on a shape check."""
    return MoEStack(SMALL.with_(order="routed_first", shared_mode="plain"), CPU32)


def double(x: torch.Tensor) -> torch.Tensor:
    return 2 * x


def make_pair(device: torch.device, dtype: torch.dtype):
    return torch.nn.Linear(8, 8, device=device, dtype=dtype), (torch.randn(2, 8, device=device, dtype=dtype),)


class Scale(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.weight


def child_checkpoints_then_dies(payload, checkpoint):
    checkpoint({"stage": "recorded"})
    os._exit(3)


def child_raises(payload, checkpoint):
    checkpoint({"stage": "started"})
    raise ValueError(f"bad payload {payload['n']}")


# -- gpu_demo.guard.target ------------------------------------------------------------------------

@pytest.mark.parametrize("spec, message", [
    ("no_colon", "is not 'module:callable'"),
    ("gpu_demo.no_such_module:make", "cannot import module"),
    ("gpu_demo.lab.corpus:no_such_name", "has no 'no_such_name'"),
    ("gpu_demo.lab.corpus:PROGRAMS", "not a callable"),
])
def test_a_bad_target_string_says_what_is_wrong(spec, message):
    with pytest.raises(TargetError, match=message):
        load(spec)


@pytest.mark.parametrize("source, message", [
    ("def make(:\n    pass\n", r"SyntaxError: invalid syntax \(at .*bad\.py:1\)"),
    ("import torch\nraise RuntimeError('boom at import')\n", r"RuntimeError: boom at import \(at .*bad\.py:2\)"),
    ("import no_such_package_of_ours\n", r"No module named 'no_such_package_of_ours' \(at .*bad\.py:1\)"),
])
def test_a_target_whose_own_code_fails_says_what_failed_and_where(tmp_path, monkeypatch, source, message):
    (tmp_path / "bad.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    for spec in ("bad:make", f"{tmp_path / 'bad.py'}:make"):   # imported by name, or run from its file
        with pytest.raises(TargetError, match=message):
            load(spec)
        monkeypatch.delitem(sys.modules, "bad", raising=False)


def test_a_target_file_runs_once_beside_its_neighbours_and_travels_by_its_whole_path(tmp_path, monkeypatch):
    (tmp_path / "sizes.py").write_text("WIDTH = 4\n")
    (tmp_path / "layers.py").write_text("import torch\nfrom sizes import WIDTH\n\n"
                                        "def make():\n    return torch.nn.Linear(WIDTH, WIDTH)\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))   # the file's folder goes first, as for ``python layers.py``
    make = load("layers.py:make")
    assert make().in_features == 4
    assert load(f"{tmp_path / 'layers.py'}:make") is make   # one module per file, however it is named
    assert portable("layers.py:make") == f"{tmp_path / 'layers.py'}:make"
    assert portable("gpu_demo.lab.corpus.safe_dual_stream:make") == "gpu_demo.lab.corpus.safe_dual_stream:make"
    with pytest.raises(TargetError, match="no file 'missing.py'"):
        load("missing.py:make")
    with pytest.raises(TargetError, match="module 'layers.py' has no 'nothing'"):
        load("layers.py:nothing")


def test_which_callables_are_factories():
    def local_tensor_fn(x):
        return x
    assert factory_call(Scale) == "no_args"
    assert factory_call(incident_moe) == "no_args"
    assert factory_call(make_pair) == "device_dtype"
    assert factory_call(double) is None
    assert factory_call(local_tensor_fn) is None
    assert factory_call(Scale()) is None  # an instance is the function under test


def test_a_lambda_a_closure_and_a_script_function_travel_by_value():
    def closure(x):
        return x * scale
    scale = 3.0
    script_fn = type(double)(double.__code__, {"__name__": "__main__"}, "script_fn")
    script_fn.__module__ = "__main__"
    x = torch.ones(2)
    for fn, want in ((lambda x: x + 1, 2.0), (closure, 3.0), (script_fn, 2.0)):
        sent = portable(fn)
        assert isinstance(sent, bytes)
        assert build(sent, torch.device("cpu"), torch.float32, 0).fn(x).tolist() == [want, want]


def test_module_level_targets_travel_by_reference_and_strings_as_they_are():
    assert build(portable(double), torch.device("cpu"), torch.float32, 0).fn is double
    assert portable("gpu_demo.lab.corpus.safe_dual_stream:make") == "gpu_demo.lab.corpus.safe_dual_stream:make"


def test_a_factory_builds_a_new_instance_each_time_under_one_seed():
    first = build(portable(Scale), torch.device("cpu"), torch.float64, seed=5)
    second = build(portable(Scale), torch.device("cpu"), torch.float64, seed=5)
    assert first.fn is not second.fn and first.fresh
    assert first.fn.weight.dtype == torch.float64
    assert torch.equal(first.fn.weight, second.fn.weight)


def test_a_device_dtype_factory_supplies_the_example_inputs():
    built = build(portable(make_pair), torch.device("cpu"), torch.float32, 0)
    (example,) = built.example_inputs
    assert example.shape == (2, 8) and isinstance(built.fn, torch.nn.Linear)


# -- the replay protocol, with fake graphs on the CPU ----------------------------------------

class FakeGraph:
    """Stands in for a CUDA graph: ``replay`` does what the case asks."""

    def __init__(self, replay):
        self.replay = replay


@pytest.fixture
def fake_capture(monkeypatch):
    """``capture_replay.capture`` returns a fake graph; ``how`` picks what its replay does."""
    monkeypatch.setattr(capture_replay, "warm_up", lambda fn: fn())
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)

    def use(how):
        def capture(fn, mode="global"):
            out = fn()
            if how == "shape_error":
                raise RuntimeError("mat1 and mat2 shapes cannot be multiplied (1x0 and 8x8)")
            replays = {
                "rerun": lambda: out.copy_(fn()),   # a correct graph recomputes from the static input
                "nothing": lambda: None,            # no node: the output keeps what it held
                "fault": lambda: (_ for _ in ()).throw(RuntimeError("CUDA error: an illegal memory access was encountered")),
            }
            return FakeGraph(replays[how]), out
        monkeypatch.setattr(capture_replay, "capture", capture)
    return use


def _protocol(fn=double, replays=3):
    generator = torch.Generator().manual_seed(0)
    static = [torch.randn(4, 8)]
    fresh = [[fresh_like(static[0], generator, torch.device("cpu"))] for _ in range(replays)]
    return replay_and_compare(fn, static, fresh, want=lambda i: fn(fresh[i][0].clone()), reference="eager")


def test_a_graph_that_recomputes_is_correct(fake_capture):
    fake_capture("rerun")
    evidence = _protocol()
    assert evidence.outcome == "correct" and evidence.errors == [0.0, 0.0, 0.0]
    assert evidence.tolerance == tolerance_for(torch.float32)


def test_a_graph_without_the_node_is_silently_wrong(fake_capture):
    fake_capture("nothing")
    evidence = _protocol()
    assert evidence.outcome == "silent_wrong" and min(evidence.errors) > 0.5


def test_a_faulting_replay_is_an_illegal_address_and_stops(fake_capture):
    fake_capture("fault")
    evidence = _protocol()
    assert evidence.outcome == "illegal_address" and evidence.errors == [None]
    assert "illegal memory access" in evidence.message


def test_a_capture_that_fails_on_a_shape_check_is_a_capture_error(fake_capture):
    fake_capture("shape_error")
    evidence = _protocol()
    assert evidence.outcome == "capture_error:shape_mismatch" and evidence.errors == []


def test_a_function_that_returns_no_tensor_is_refused(fake_capture):
    fake_capture("rerun")
    with pytest.raises(ValueError, match="returned no tensor"):
        _protocol(fn=lambda x: None)


def test_output_error_compares_every_output_and_shapes():
    a = torch.ones(4)
    assert output_error((a, a), (a, a)) == 0.0
    assert output_error((a, 2 * a), (a, a)) == pytest.approx(1.0)
    assert output_error(torch.zeros(0), a) == math.inf
    assert output_error([a], [a, a]) == math.inf
    assert output_error(a, torch.zeros(4)) == pytest.approx(2.0)  # absolute when the reference is zero
    assert math.isnan(output_error(torch.full((4,), float("nan")), a))


def test_fresh_inputs_keep_shape_dtype_and_the_range_of_integer_examples():
    generator = torch.Generator().manual_seed(0)
    ids = torch.tensor([3, 7, 5])
    fresh_ids = fresh_like(ids, generator, torch.device("cpu"))
    assert fresh_ids.dtype == torch.int64 and fresh_ids.min() >= 3 and fresh_ids.max() <= 7
    fresh = fresh_like(torch.zeros(2, 3, dtype=torch.bfloat16), generator, torch.device("cpu"))
    assert fresh.dtype == torch.bfloat16 and fresh.shape == (2, 3) and fresh.abs().sum() > 0


def test_tolerances_follow_the_dtype():
    assert tolerance_for(torch.bfloat16) > tolerance_for(torch.float16) > tolerance_for(torch.float32)
    assert tolerance_for(torch.int64) == 0.0


# -- the verdict -------------------------------------------------------------------------

def _finding(rule: int, code: str, severity: str) -> Finding:
    return Finding(rule, code, severity, 1, "x", (), "why", "fix")


RACE = _finding(4, "reuse_after_free", WARNING)
MUTATION = _finding(1, "host_mutation", ERROR)


def _report(verdict, findings=(), strict=False, problem=None) -> GuardReport:
    return GuardReport("t", "cuda", verdict, ReplayEvidence(True, verdict), list(findings), strict=strict,
                       problem=problem)


def test_correct_replays_with_a_race_are_unordered_and_pass_unless_strict():
    assert judge(ReplayEvidence(True, "correct"), None, [RACE]) == ("unordered", None)
    assert _report("unordered", [RACE]).passed
    assert not _report("unordered", [RACE], strict=True).passed


def test_the_replay_decides_the_verdict_and_a_checker_error_fails_even_correct_replays():
    assert judge(ReplayEvidence(True, "silent_wrong", [0.9], 1e-5), None, [MUTATION]) == ("silent_wrong", None)
    assert not _report("correct", [MUTATION]).passed
    assert not _report("illegal_address").passed
    assert not _report("correct", problem="the child died").passed
    assert _report("correct").passed


def test_without_replays_only_a_dry_run_capture_error_is_a_verdict():
    assert judge(ReplayEvidence(False, reason="no CUDA"), "capture_error:shape_mismatch", []) == \
        ("capture_error:shape_mismatch", None)
    assert judge(ReplayEvidence(False, reason="no CUDA"), None, [MUTATION]) == (None, None)


# -- check_capture and assert_capture_safe on the CPU ------------------------------------------

@no_cuda
def test_the_dry_run_flags_the_incident_and_says_the_replay_did_not_run():
    report = check_capture(incident_moe, torch.randn(4, 32), dtype=torch.float32)
    assert report.mode == "dry_run" and report.verdict is None and not report.passed
    assert report.rules == ["rule 1 (host_mutation)", "rule 2 (empty_argument)"]
    assert not report.replay.ran and "no CUDA device" in report.replay.reason
    text = report.format()
    assert "NOT capture-safe" in text and "replay not run" in text and "dry run" in text


@no_cuda
def test_the_dry_run_never_passes_the_fix_but_reports_a_failed_capture():
    clean = check_capture(fixed_moe, torch.randn(4, 32))
    assert not clean.passed and clean.answer == "NOT CHECKED ON A GPU" and not clean.findings
    report = check_capture(plain_moe, torch.randn(4, 32))
    assert report.verdict == "capture_error:shape_mismatch" and not report.passed


@no_cuda
def test_assert_capture_safe_on_a_cpu_raises_not_checked_unless_a_dry_run_is_accepted():
    with pytest.raises(CaptureNotSafe) as failed:
        assert_capture_safe(incident_moe, torch.randn(4, 32))
    assert "host_mutation" in str(failed.value) and failed.value.report.findings
    assert isinstance(failed.value, AssertionError) and not isinstance(failed.value, CaptureNotChecked)
    with pytest.raises(CaptureNotChecked) as unchecked:
        assert_capture_safe(fixed_moe, torch.randn(4, 32))
    first = str(unchecked.value).splitlines()[0]
    assert first.startswith("test_guard:fixed_moe: NOT CHECKED ON A GPU (a CPU dry run only")
    report = assert_capture_safe(fixed_moe, torch.randn(4, 32), dry_run_ok=True)
    assert report.answer == "NOT CHECKED ON A GPU" and not report.passed


@no_cuda
def test_a_module_instance_travels_by_value():
    model = MoEStack(SMALL.with_(order="routed_first"), CPU32)
    assert "host_mutation" in check_capture(model, torch.randn(4, 32)).codes


@no_cuda
def test_a_lambda_is_checked_isolated_or_not():
    for isolate in (True, False):
        report = check_capture(lambda x: x * 2, torch.randn(3), isolate=isolate)
        assert report.answer == "NOT CHECKED ON A GPU" and not report.findings and not report.problem


@pytest.mark.parametrize("call, error", [
    (lambda: check_capture(double), "no example inputs"),
    (lambda: check_capture(double, [1, 2]), "must be tensors"),
    (lambda: check_capture(double, torch.ones(2), replays=0), "positive integer"),
    (lambda: check_capture(double, torch.ones(2), timeout=0), "timeout must be a positive number of seconds"),
    (lambda: check_capture(double, torch.ones(2), timeout="60"), "timeout must be a positive number of seconds"),
])
def test_bad_arguments_get_clear_errors(call, error):
    with pytest.raises((TargetError, TypeError, ValueError), match=error):
        call()


def test_a_function_that_fails_eagerly_is_reported_not_raised():
    report = check_capture("gpu_demo.lab.corpus.safe_single_stream:make", torch.randn(3, 7))  # wrong width
    assert "fails when run eagerly" in report.problem and not report.passed
    assert "could not check" in report.format()


# -- the child process -----------------------------------------------------------------------

@no_cuda
def test_the_child_runs_the_dry_run_and_hands_back_the_trace():
    subject = Subject(target="tests.gpu_demo.guard.test_guard:incident_moe", name="incident", inputs=(torch.randn(4, 32),),
                      dtype=torch.float32, replays=2)
    result = run_in_child("gpu_demo.guard.differential:check_in_child", {"subject": subject}, timeout=120)
    assert "child_error" not in result, result
    assert result["mode"] == "dry_run" and result["replay"]["ran"] is False
    assert {f.code for f in check(Trace.from_json(result["trace"]))} == {"host_mutation", "empty_argument"}


def test_a_child_that_dies_hands_back_its_last_checkpoint_and_why():
    result = run_in_child("tests.gpu_demo.guard.test_guard:child_checkpoints_then_dies", {}, timeout=120)
    assert result["stage"] == "recorded" and "child_error" in result


def test_an_exception_in_the_child_comes_back_with_its_traceback():
    result = run_in_child("tests.gpu_demo.guard.test_guard:child_raises", {"n": 7}, timeout=120)
    assert result["stage"] == "started"
    assert result["child_error"]["message"] == "ValueError: bad payload 7"
    assert "Traceback" in result["child_error"]["detail"]


# -- the CLI ---------------------------------------------------------------------------------

@no_cuda
def test_check_exits_1_on_a_hazard_and_writes_json_with_provenance(tmp_path, capsys):
    out = tmp_path / "report.json"
    code = main(["check", "tests.gpu_demo.guard.test_guard:incident_moe", "--input-shape", "4,32", "--dtype", "float32",
                 "--json", str(out)])
    assert code == 1
    assert "rule 1 (host_mutation)" in capsys.readouterr().out
    written = json.loads(out.read_text())
    assert written["provenance"]["command"].startswith("python -m gpu_demo check")
    assert written["codes"] == ["empty_argument", "host_mutation"] and written["passed"] is False


def test_check_of_a_safe_factory_exits_0_on_a_gpu_and_4_on_a_cpu_saying_so_first(capsys):
    code = main(["check", "gpu_demo.lab.corpus.safe_dual_stream:make"])
    first = capsys.readouterr().out.splitlines()[0]
    if torch.cuda.is_available():
        assert code == 0 and first.startswith("gpu_demo.lab.corpus.safe_dual_stream:make: passed")
    else:
        assert code == 4 and first.startswith("gpu_demo.lab.corpus.safe_dual_stream:make: NOT CHECKED ON A GPU")


@no_cuda
def test_check_of_a_triton_program_on_a_cpu_could_not_check_and_exits_3(capsys):
    code = main(["check", "gpu_demo.lab.corpus.routed_first_set_empty_triton:make"])
    out = capsys.readouterr().out
    assert code == 3 and out.startswith("gpu_demo.lab.corpus.routed_first_set_empty_triton:make: could not check")
    assert "it needs CUDA: check it on a GPU" in out and "NOT capture-safe" not in out


@no_cuda
def test_record_dry_run_says_first_what_a_dry_run_cannot_see(capsys):
    code = main(["record", "--dry-run", "--order", "shared_first"])
    lines = capsys.readouterr().out.splitlines()
    assert code == 0 and lines[0] == ("shared_first/static_buffer/always: a CPU dry run only: nothing was captured "
                                      "or replayed, so no replay, no graph-pool reuse and no cross-stream race "
                                      "was checked; record on a GPU (without --dry-run) for those.")
    assert lines[-1] == "No capture hazards found."


@pytest.mark.parametrize("argv, message", [
    (["check", "tests.gpu_demo.guard.test_guard:double"], "no example inputs"),
    (["check", "tests.gpu_demo.guard.test_guard:nothing_here", "--input-shape", "2"], "has no 'nothing_here'"),
])
def test_check_exits_2_on_bad_usage_with_a_message_and_no_traceback(argv, message, capsys):
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert message in captured.err + captured.out and "Traceback" not in captured.err


def test_check_rejects_a_malformed_shape(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["check", "tests.gpu_demo.guard.test_guard:double", "--input-shape", "16,x"])
    assert exited.value.code == 2 and "is not a shape" in capsys.readouterr().err


# -- on a GPU ----------------------------------------------------------------------------------

_layer: dict[str, torch.nn.Module] = {}


def one_layer(h: torch.Tensor) -> torch.Tensor:
    """A plain function over one module-level layer instance: reference and capture share its
    static output buffer."""
    if "layer" not in _layer:
        from gpu_demo.lab.corpus import routed_first_set_empty_shape_guard as program

        _layer["layer"], _ = program.make(h.device, h.dtype)
    return _layer["layer"](h)


@pytest.mark.gpu
@pytest.mark.parametrize("program, verdict", [
    ("routed_first_set_empty_shape_guard", "silent_wrong"),
    ("routed_first_set_empty_triton", "illegal_address"),
    ("routed_first_set_empty_torch_ops", "capture_error:shape_mismatch"),
    ("safe_dual_stream", "correct"),
    ("fix_skip_dispose_in_capture", "correct"),
])
def test_the_guard_on_a_gpu_proves_what_the_device_does(program, verdict):
    report = check_capture(f"gpu_demo.lab.corpus.{program}:make")
    assert report.mode == "cuda" and report.replay.ran
    assert report.verdict == verdict, report.format()
    assert report.passed == (verdict == "correct")
    assert torch.ones(1, device="cuda").sum().item() == 1.0  # a fault in the child left this process alone


@pytest.mark.gpu
def test_an_eager_reference_sharing_the_static_buffer_cannot_repair_the_replay():
    report = check_capture(one_layer, torch.randn(16, 512, dtype=torch.bfloat16))
    assert "itself, run eagerly before" in report.replay.reference
    assert report.verdict == "silent_wrong", report.format()


# -- the GPU lab ------------------------------------------------------------------------------

def test_the_lab_layer_builds_and_runs_eagerly_and_its_todo_says_what_to_do():
    from gpu_demo.lab.exercise import my_layer

    layer, (h,) = my_layer.make(torch.device("cpu"), torch.float32)
    assert layer(h.clone()).shape == h.shape
    with pytest.raises(NotImplementedError, match="python -m gpu_demo check gpu_demo.lab.exercise.my_layer:make"):
        layer.forward_dual_stream(h)


def test_the_lab_solution_passes_strictly_and_the_student_file_is_reported_honestly():
    solution = check_capture("gpu_demo.lab.exercise.my_layer_solution:make", strict=True)
    assert solution.answer == ("passed" if torch.cuda.is_available() else "NOT CHECKED ON A GPU"), solution.format()
    if torch.cuda.is_available():
        assert solution.verdict == "correct"
        assert check_capture("gpu_demo.lab.exercise.my_layer:make").verdict == "capture_error:NotImplementedError"
    else:
        assert "dry run" in check_capture("gpu_demo.lab.exercise.my_layer:make").format()


@pytest.mark.parametrize("where", ["under_a_file", "/proc/nope/report.json"])
def test_check_that_cannot_write_its_json_says_so_and_exits_2(where, tmp_path, capsys):
    if where == "under_a_file":
        (tmp_path / "file.txt").write_text("")
        where = str(tmp_path / "file.txt" / "report.json")
    code = main(["check", "tests.gpu_demo.guard.test_guard:double", "--input-shape", "4,8", "--json", where])
    err = capsys.readouterr().err
    assert code == 2 and err.splitlines()[0].startswith(f"gpu_demo check: cannot write --json {where}")
    assert "Traceback" not in err


def test_a_report_prints_as_the_report_a_person_reads():
    report = check_capture(double, torch.randn(4, 8), isolate=False)
    answer = "passed" if torch.cuda.is_available() else "NOT CHECKED ON A GPU"
    assert str(report) == report.format() and str(report).startswith(f"test_guard:double: {answer}")
