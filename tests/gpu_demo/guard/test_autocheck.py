"""Checking captures as they happen: ``capture_checked`` and ``CAPTURE_ORDER_CHECK``, on a CPU
(and, with a GPU, in a real process)."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from gpu_fakes import ALT, FakeGraph, cuda_graph, fake_graph_methods, fork, join, streams  # noqa: E402

from gpu_demo import CaptureHazardWarning, capture_checked  # noqa: E402
from gpu_demo.guard.autocheck import main, mode_from  # noqa: E402
from gpu_demo.guard.record import patches  # noqa: E402
from simlib.glossary import NO_CAPTURE_SEEN  # noqa: E402

__all__ = ["fake_graph_methods", "streams"]  # fixtures, used by name

REPO = Path(__file__).resolve().parents[3]


def routed_first_raw_kernel(streams) -> None:
    """Plain code: the routed branch disposes ``x``, then a raw Triton kernel reads it."""
    x, out = torch.randn(4, 8) * 1, torch.zeros(32)
    with cuda_graph(FakeGraph(), streams):
        fork()
        with streams.on(ALT):
            x.mul(2)
            x.set_(torch.empty(0))
        patches.record_triton_launch("raw_load", [("src_ptr", x), ("dst_ptr", out)])
        join()


def unjoined_write(streams) -> None:
    """Alt writes a buffer main then reads, and main never waits for alt: a race."""
    buf = torch.zeros(16)
    with cuda_graph(FakeGraph(), streams):
        fork()
        with streams.on(ALT):
            buf.add_(1)
        buf.mul(2)


def test_a_hazard_raises_with_the_report_when_the_block_exits(streams, fake_graph_methods):
    after_capture = []
    with pytest.raises(AssertionError) as err:
        with capture_checked(device=streams.device()) as checked:
            routed_first_raw_kernel(streams)
            after_capture.append(True)
    assert after_capture == [True]
    assert "capture of graph 0" in str(err.value) and "host_mutation" in str(err.value)
    at_capture, at_exit = checked.reports
    assert {f.code for f in at_capture.findings} == {"host_mutation", "empty_argument"} and at_capture.fails(strict=False)
    # The block x lost to set_ during the capture is freed under the graph; no replay followed it, so the
    # end of the block reports it (every replay would use it).
    assert [f.code for f in at_exit.findings] == ["freed_under_graph"] and at_exit.graph == -1


def test_warn_mode_warns_at_the_capture_end_and_does_not_raise(streams, fake_graph_methods):
    with pytest.warns(CaptureHazardWarning) as warned:
        with capture_checked(on_hazard="warn", device=streams.device()) as checked:
            routed_first_raw_kernel(streams)
    assert [r.graph for r in checked.reports] == [0, -1]   # the capture's end, then the block's (rule 10)
    assert ["empty_argument" in str(w.message) for w in warned] == [True, False]


def test_strict_also_fails_on_a_race(streams, fake_graph_methods):
    with capture_checked(device=streams.device()) as checked:
        unjoined_write(streams)
    assert [f.code for f in checked.reports[0].findings] == ["cross_stream_race"]
    with pytest.raises(AssertionError, match="cross_stream_race"):
        with capture_checked(strict=True, device=streams.device()):
            unjoined_write(streams)


def test_each_capture_is_checked_on_its_own_records(streams, fake_graph_methods):
    with pytest.raises(AssertionError) as err:
        with capture_checked(device=streams.device()) as checked:
            routed_first_raw_kernel(streams)
            with cuda_graph(FakeGraph(), streams):
                torch.randn(4).add(1)
    assert [(r.graph, bool(r.findings)) for r in checked.reports] == [(0, True), (1, False), (-1, True)]
    assert "graph 1" not in str(err.value) and "No capture hazards found." in checked.reports[1].text
    assert [r.kind for r in checked.trace.records].count("capture") == 4   # kept: both captures


def test_an_error_of_the_block_itself_goes_on_with_the_report_as_a_note(streams, fake_graph_methods):
    with pytest.raises(KeyError) as err:
        with capture_checked(device=streams.device()):
            routed_first_raw_kernel(streams)
            raise KeyError("the program's own bug")
    assert any("host_mutation" in note for note in err.value.__notes__)


def test_an_unknown_reaction_is_refused_naming_the_choices():
    with pytest.raises(ValueError, match="'raise', 'warn'"):
        with capture_checked(on_hazard="log"):
            pass


# -- whole process: CAPTURE_ORDER_CHECK ---------------------------------------------------

def test_the_environment_variable_picks_the_mode():
    assert [mode_from({"CAPTURE_ORDER_CHECK": v}) for v in ("", "0", "1", "warn", "strict", " Strict ")] == [
        None, None, "warn", "warn", "raise", "raise"]
    assert mode_from({}) is None
    with pytest.raises(ValueError, match="'yes' is not one of 1, warn, strict"):
        mode_from({"CAPTURE_ORDER_CHECK": "yes"})


# The program a checked process runs: a CPU has no torch.cuda.graph, so it brackets its
# capture by hand on the process-wide recorder, then uses a tensor it disposed.
PROGRAM = """
import sys, torch
from gpu_demo.guard import autocheck
checker = autocheck.process_checker()
print("argv", sys.argv[1:], "checking", checker is not None)
if checker is not None:
    x = torch.randn(4, 8) * 1
    with checker.recorder.capturing():
        x.set_(torch.empty(0))
        x.sum()
print("done")
"""


def _run(args: list[str], mode: str | None, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "CAPTURE_ORDER_CHECK"}
    env["PYTHONPATH"] = str(REPO)
    if mode is not None:
        env["CAPTURE_ORDER_CHECK"] = mode
    return subprocess.run([sys.executable, *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.fixture
def site_dir(tmp_path) -> Path:
    """A directory holding the package's .pth, as site-packages does after ``pip install``."""
    site = tmp_path / "site-packages"
    site.mkdir()
    shutil.copy(REPO / "capture_order_check.pth", site)
    return site


@pytest.mark.parametrize("mode, exit_code, warned, raised", [
    (None, 0, False, False), ("0", 0, False, False), ("1", 0, True, False), ("strict", 1, False, True),
])
def test_the_pth_file_checks_an_unmodified_program_when_asked(mode, exit_code, warned, raised, site_dir, tmp_path):
    (tmp_path / "program.py").write_text(PROGRAM)
    # site.addsitedir runs the .pth lines exactly as Python's start-up does for site-packages.
    done = _run(["-c", f"import site; site.addsitedir({str(site_dir)!r}); exec(open('program.py').read())"],
                mode, tmp_path)
    assert done.returncode == exit_code, done.stderr
    assert ("checking True" in done.stdout) is (mode in ("1", "strict"))
    assert ("CaptureHazardWarning" in done.stderr and "host_mutation" in done.stderr) is warned
    assert ("AssertionError: capture of graph 0" in done.stderr) is raised


def test_a_bad_value_leaves_checking_off_and_says_why(site_dir, tmp_path):
    (tmp_path / "program.py").write_text(PROGRAM)
    done = _run(["-c", f"import site; site.addsitedir({str(site_dir)!r}); exec(open('program.py').read())"],
                "yes", tmp_path)
    assert done.returncode == 0 and "checking False" in done.stdout
    assert "capture-order check is off: CAPTURE_ORDER_CHECK='yes' is not one of" in done.stderr


@pytest.mark.parametrize("flags, exit_code", [
    (["program.py"], 0), (["--strict", "program.py"], 1), (["-m", "program"], 0),
])
def test_the_module_runs_a_script_with_its_arguments_under_the_check(flags, exit_code, tmp_path):
    (tmp_path / "program.py").write_text(PROGRAM)
    done = _run(["-m", "gpu_demo.autocheck", *flags, "--tokens", "4"], None, tmp_path)
    assert done.returncode == exit_code, done.stderr
    assert "argv ['--tokens', '4'] checking True" in done.stdout
    assert ("CaptureHazardWarning" in done.stderr) is (exit_code == 0)
    assert ("AssertionError" in done.stderr) is (exit_code == 1)


def test_the_module_without_a_program_prints_its_usage(capsys):
    assert main([]) == 2 and main(["-m"]) == 2
    assert "usage: python -m gpu_demo.autocheck" in capsys.readouterr().err


def test_a_built_wheel_puts_the_pth_at_the_top_of_site_packages(tmp_path):
    pytest.importorskip("setuptools")
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "capture_order_check.pth"):
        shutil.copy(REPO / name, source)
    for package in ("gpu_demo", "simlib"):
        shutil.copytree(REPO / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    build = "from setuptools import build_meta; print(build_meta.build_wheel(r'{}'))".format(tmp_path)
    done = subprocess.run([sys.executable, "-c", build], cwd=source, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    wheel = tmp_path / done.stdout.strip().splitlines()[-1]
    names = zipfile.ZipFile(wheel).namelist()
    assert "capture_order_check.pth" in names and "gpu_demo/autocheck/__main__.py" in names


# -- whole process, on a GPU ------------------------------------------------------------------

GPU_PROGRAM = """
import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode
from gpu_demo.guard import autocheck
from gpu_demo.lab.corpus import {program} as program

layer, inputs = program.make(torch.device("cuda"), torch.bfloat16)
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    for _ in range(2):
        layer(*[t.clone() for t in inputs])
torch.cuda.current_stream().wait_stream(side)
print("dispatch mode before the capture:", _get_current_dispatch_mode() is not None)
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    layer(*inputs)
print("dispatch mode after the capture:", _get_current_dispatch_mode() is not None)
print("rules:", sorted({{f.rule for r in autocheck.process_checker().reports for f in r.findings}}))
"""


@pytest.mark.gpu
@pytest.mark.parametrize("program, hazardous", [("routed_first_set_scalar_triton", True),
                                                ("safe_dual_stream", False)])
def test_a_checked_process_records_its_eager_calls_and_a_real_capture(program, hazardous, tmp_path):
    script = tmp_path / "serve.py"
    script.write_text(GPU_PROGRAM.format(program=program))
    done = _run(["-m", "gpu_demo.autocheck", str(script)], "1", tmp_path)
    assert done.returncode == 0, done.stderr
    assert "dispatch mode before the capture: True" in done.stdout   # the eager calls are recorded
    assert "dispatch mode after the capture: True" in done.stdout
    (rules,) = [ast.literal_eval(line.split(":", 1)[1]) for line in done.stdout.splitlines()
                if line.startswith("rules:")]
    assert (1 in rules) if hazardous else rules == [], done.stdout + done.stderr


# -- python -m gpu_demo.autocheck script.py behaves like python script.py -----------------------

NEIGHBOUR_SCRIPT = """
import pickle, sys
import neighbour
import __main__

class Point:
    pass

print("path0", sys.path[0])
print("main", __main__.__file__ == __file__, pickle.loads(pickle.dumps(Point())).__class__.__module__)
print("neighbour", neighbour.VALUE)
sys.exit(int(sys.argv[1]))
"""


@pytest.mark.parametrize("code", [0, 5])
def test_the_module_runs_a_script_exactly_as_python_does(code, tmp_path):
    folder = tmp_path / "app"
    folder.mkdir()
    (folder / "neighbour.py").write_text("VALUE = 42\n")
    (folder / "serve.py").write_text(NEIGHBOUR_SCRIPT)
    plain = _run([str(folder / "serve.py"), str(code)], None, tmp_path)
    checked = _run(["-m", "gpu_demo.autocheck", str(folder / "serve.py"), str(code)], "1", tmp_path)
    assert checked.returncode == plain.returncode == code, checked.stderr
    assert checked.stdout == plain.stdout and f"path0 {folder}" in checked.stdout
    assert "main True __main__" in checked.stdout and "neighbour 42" in checked.stdout
    assert "RuntimeWarning" not in checked.stderr and "runpy" not in checked.stderr


def test_an_uncaught_exception_exits_1_with_the_scripts_own_traceback(tmp_path):
    (tmp_path / "broken.py").write_text("def go():\n    raise KeyError('boom')\ngo()\n")
    done = _run(["-m", "gpu_demo.autocheck", "broken.py"], None, tmp_path)
    *traceback, said = done.stderr.strip().splitlines()   # then the check's own line: it saw no capture
    assert done.returncode == 1 and traceback[-1] == "KeyError: 'boom'"
    assert said.startswith(f"capture-order check: {NO_CAPTURE_SEEN} in this process: ")
    assert 'broken.py", line 3' in done.stderr and "autocheck" not in done.stderr


def test_a_missing_script_is_one_line_and_exit_2_and_help_is_real_help(tmp_path):
    missing = _run(["-m", "gpu_demo.autocheck", "nope.py"], None, tmp_path)
    assert missing.returncode == 2 and missing.stdout == ""
    (line,) = missing.stderr.strip().splitlines()
    assert line.startswith("python -m gpu_demo.autocheck: can't open file") and "nope.py" in line
    helped = _run(["-m", "gpu_demo.autocheck", "--help"], None, tmp_path)
    assert helped.returncode == 0 and helped.stdout.startswith("usage: python -m gpu_demo.autocheck")
    assert "--strict" in helped.stdout and "sys.path[0]" in helped.stdout
