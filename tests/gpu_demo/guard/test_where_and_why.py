"""Every answer says what, where and why: dtypes as the user wrote them, the error text of a
failed capture, and each finding at the user's file and line, under the user's tensor names."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from gpu_demo.guard.check import check_capture
from gpu_demo.guard.job.ranks import merged_check
from gpu_demo.guard.no_capture import NoCaptureWarning
from gpu_demo.guard.process import capture_checked
from gpu_demo.guard.protocol.tolerance import dtype_named
from gpu_demo.guard.record.dry_run import is_capturing
from gpu_demo.guard.target import build, portable
from gpu_demo.lab.cli.main import build_parser
from gpu_demo.lab.cli.main import main as cli_main
from simlib.checker import ERROR, Finding
from simlib.checker.rules import EMPTY_ARGUMENT, FROZEN_HOST_VALUE, HOST_MUTATION
from simlib.checker.sites import located
from simlib.glossary import COULD_NOT_CHECK, NO_CAPTURE_SEEN
from simlib.trace import Free, Launch, Trace

ANSWER = "passed" if torch.cuda.is_available() else "NOT CHECKED ON A GPU"


def float32_layer():
    """A factory without parameters, as a notebook cell writes one: float32 weights and inputs."""
    return torch.nn.Linear(64, 64), (torch.randn(8, 64),)


def test_a_factory_without_parameters_keeps_the_dtype_of_its_own_inputs():
    report = check_capture(float32_layer, isolate=False)
    assert (report.answer, report.problem) == (ANSWER, None), report.format()
    built = build(portable(float32_layer), torch.device("cpu"), None, 0)
    assert built.fn.weight.dtype == built.example_inputs[0].dtype == torch.float32


def test_an_asked_for_dtype_casts_the_factorys_module_and_its_floating_inputs():
    built = build(portable(float32_layer), torch.device("cpu"), dtype_named("bf16"), 0)
    assert built.fn.weight.dtype == built.example_inputs[0].dtype == torch.bfloat16


@pytest.mark.parametrize("name, dtype", [("bfloat16", torch.bfloat16), ("bf16", torch.bfloat16),
                                         ("float16", torch.float16), ("fp16", torch.float16),
                                         ("torch.float32", torch.float32), (torch.float64, torch.float64)])
def test_dtypes_are_taken_as_the_cli_spells_them(name, dtype):
    assert dtype_named(name) is dtype


def test_an_unknown_dtype_is_one_line_naming_the_known_ones():
    with pytest.raises(ValueError) as raised:
        check_capture(float32_layer, isolate=False, dtype="int3")
    message = str(raised.value)
    assert "\n" not in message and "'int3'" in message and "'bf16'" in message


# -- each finding at the user's file and line, under the user's names --------------------------

HERE = Path(__file__).resolve().relative_to(Path.cwd()) if Path.cwd() in Path(__file__).resolve().parents else None


def line_of(marker: str) -> str:
    """``file:line`` of the line of this file marked ``# MARK: <marker>``, as the recorder shows it."""
    lines = Path(__file__).read_text().splitlines()
    (number,) = [i for i, text in enumerate(lines, 1) if text.split("# MARK: ")[-1].startswith(marker) and "# MARK: " in text]
    return f"{HERE}:{number}"


class DisposesInCapture(torch.nn.Module):
    """The incident in little: the input is emptied, under capture only, before a later op reads it."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(16, 16)

    def forward(self, hidden_states):
        routed = self.proj(hidden_states.clone())
        if is_capturing():
            hidden_states.set_(hidden_states.new_empty((0,)))   # MARK: set_
        return routed + hidden_states.sum()   # MARK: reads the emptied input


class HostScale(torch.nn.Module):
    """A host float that changes every call, baked into the captured kernel."""

    def __init__(self):
        super().__init__()
        self.scale = 1.0

    def forward(self, x):
        self.scale += 1.0
        return x * self.scale   # MARK: frozen scalar


class EmptiesItsInput(torch.nn.Module):
    """Right once, then its next call on the same buffer fails (the issue's ``make_bad``)."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(16, 16)

    def forward(self, x):
        out = self.proj(x)   # MARK: fails on the emptied buffer
        x.set_(x.new_empty((0,)))
        return out


def failing(x):
    return x @ x.new_ones(3, 3)   # MARK: fails eagerly


@pytest.mark.skipif(HERE is None, reason="the tests run from the project root")
def test_rules_1_and_2_name_the_users_line_and_variable():
    report = check_capture(lambda: (DisposesInCapture(), (torch.randn(4, 16),)), isolate=False, dtype="float32")
    sites = {f.code: (f.site, f.label) for f in report.findings}
    assert sites[HOST_MUTATION.code] == (line_of("set_"), "hidden_states"), report.format()
    assert sites[EMPTY_ARGUMENT.code] == (line_of("reads the emptied"), "hidden_states"), report.format()
    (mutation,) = [f for f in report.findings if f.code == HOST_MUTATION.code]
    assert f"at step {mutation.step} ({line_of('set_')}): hidden_states" in report.format()


@pytest.mark.skipif(HERE is None, reason="the tests run from the project root")
def test_rule_8_names_the_users_line():
    report = check_capture(lambda: (HostScale(), (torch.randn(4, 16),)), isolate=False, dtype="float32")
    (finding,) = report.findings
    assert (finding.code, finding.site) == (FROZEN_HOST_VALUE.code, line_of("frozen scalar"))
    assert report.to_dict()["findings"][0]["site"] == finding.site


@pytest.mark.skipif(HERE is None, reason="the tests run from the project root")
def test_a_failed_recording_says_pytorchs_words_the_call_and_the_line():
    report = check_capture(lambda: (EmptiesItsInput(), (torch.randn(4, 16),)), isolate=False, dtype="float32")
    said = report.to_dict()["recording_message"]
    # On a GPU the first warm-up call is not recorded (it initialises cuBLAS lazily): the second
    # call on the emptied buffer is the first recorded one; the dry run records both.
    failed = "warm-up call 1 of 2, on the same input buffers" if torch.cuda.is_available() else "warm-up call 2 of 2"
    assert said.startswith(failed) and line_of("fails on the emptied") in said
    assert "RuntimeError: mat1 and mat2 shapes cannot be multiplied" in said
    assert said in " ".join(report.format().split())


@pytest.mark.gpu
def test_on_a_gpu_a_failed_recording_keeps_pytorchs_words_in_the_report_and_its_dict():
    report = check_capture(lambda: (EmptiesItsInput(), (torch.randn(4, 16),)), dtype="float32")
    said = report.to_dict()["recording_message"]
    assert report.recording_error and "RuntimeError: mat1 and mat2 shapes cannot be multiplied" in said, report.format()
    assert said in " ".join(report.format().split()) and not report.passed


@pytest.mark.skipif(HERE is None, reason="the tests run from the project root")
def test_a_function_that_fails_eagerly_is_could_not_check_with_its_line_and_error():
    report = check_capture(failing, torch.randn(2, 4), isolate=False)
    assert report.answer == COULD_NOT_CHECK
    assert f"at {line_of('fails eagerly')}: RuntimeError: mat1 and mat2 shapes" in report.problem


def test_a_finding_without_a_line_of_its_own_is_placed_near_the_last_line_before_it():
    launch = Launch(1, 0.0, 1, "aten.mul", "mul", "", "main", (), None, site="app.py:7")
    free = Free(2, 0.0, "x", 0x1000, 512, "main", "default", None)
    found = [Finding(10, "freed_under_graph", ERROR, 2, "x", (), "why", "fix"),
             Finding(8, "frozen_host_value", ERROR, 1, "mul", (), "why", "fix"),
             Finding(5, "stale_input", ERROR, 9, "y", (), "why", "fix")]
    assert [f.site for f in located(found, [launch, free])] == ["near app.py:7", "app.py:7", ""]


# -- zero captures are an answer ------------------------------------------------------------------

def test_a_capture_checked_block_without_a_capture_says_so_and_strict_fails():
    with pytest.warns(NoCaptureWarning, match=f"^capture-order check: {NO_CAPTURE_SEEN} in the capture_checked"):
        with capture_checked():
            torch.ones(3) * 2
    with pytest.raises(AssertionError, match=f"{NO_CAPTURE_SEEN} .*strict=True asks for one"):
        with capture_checked(strict=True):
            torch.ones(3) * 2


def test_ranks_that_captured_nothing_are_not_an_all_clear():
    traces = [Trace([], {"rank": rank}) for rank in (0, 1)]
    found, report = merged_check(traces)
    assert found == [] and report.splitlines()[1].startswith(f"capture-order check: {NO_CAPTURE_SEEN} on any rank")
    assert "No capture hazards found" not in report


# -- output paths are checked before the check runs ----------------------------------------------

@pytest.mark.parametrize("where, why", [("missing", "its folder {parent} does not exist (create it first)"),
                                        ("proc", "")])
def test_an_output_path_that_cannot_be_written_is_one_line_and_exit_2_before_the_check(tmp_path, capsys, where, why):
    target = tmp_path / "missing" / "report.json" if where == "missing" else Path("/proc/report.json")
    if where == "proc" and not Path("/proc").is_dir():
        pytest.skip("no /proc here")
    assert cli_main(["check", "gpu_demo.lab.corpus.safe_single_stream:make", "--json", str(target)]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert captured.out == "" and line.startswith(f"gpu_demo check: cannot write --json {target}: ")
    assert line.endswith(why.format(parent=target.parent)) and not (tmp_path / "missing").exists()


def test_the_cli_takes_the_short_dtype_names():
    args = build_parser().parse_args(["check", "m:f", "--dtype", "bf16"])
    assert args.dtype == "bfloat16"


class DisposesItsBuffer(torch.nn.Module):
    """A registered buffer emptied under capture: the report calls it ``self.workspace``."""

    def __init__(self):
        super().__init__()
        self.register_buffer("workspace", torch.zeros(4, 16))

    def forward(self, x):
        self.workspace.copy_(x)
        if is_capturing():
            self.workspace.set_(x.new_empty((0,)))
        return x + self.workspace.sum()


def test_a_mutated_buffer_is_named_by_its_attribute():
    report = check_capture(lambda: (DisposesItsBuffer(), (torch.randn(4, 16),)), isolate=False, dtype="float32")
    assert {f.label for f in report.findings if f.code == HOST_MUTATION.code} == {"self.workspace"}, report.format()
