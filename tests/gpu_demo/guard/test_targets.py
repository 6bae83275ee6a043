"""What can be checked: factories with options, structured fresh inputs, and functions and
closures defined in ``__main__`` (a notebook cell, a script), isolated and not."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from gpu_demo import warm_checks
from gpu_demo.guard.check import check_capture
from gpu_demo.guard.differential import Subject
from gpu_demo.guard.target import TargetError, build, factory_call, portable

REPO = Path(__file__).resolve().parents[3]
EXPECTED = "passed" if torch.cuda.is_available() else "NOT CHECKED ON A GPU"


def make_sized(device: torch.device, dtype: torch.dtype, width: int = 4):
    return torch.nn.Linear(width, width, device=device, dtype=dtype), (torch.randn(2, width, device=device, dtype=dtype),)


def make_hidden(hidden: int):
    return torch.nn.Linear(hidden, hidden), (torch.randn(3, hidden),)


def embed_factory(device: torch.device, dtype: torch.dtype):
    table = torch.nn.Embedding(100, 8, device=device, dtype=dtype)
    return table, (torch.tensor([0, 99, 5, 7], device=device),)


def every_id(examples, generator):
    """Fresh ids that reach both ends of the table, which min..max of the example would miss."""
    (ids,) = examples
    return (torch.randint(0, 100, ids.shape, generator=generator),)


def test_kwargs_and_partials_bind_a_factorys_options():
    assert factory_call(make_hidden) is None and factory_call(make_hidden, {"hidden": 8}) == "no_args"
    assert factory_call(functools.partial(make_sized, width=8)) == "device_dtype"
    assert factory_call(functools.partial(make_hidden, 8)) == "no_args"
    built = build(portable(functools.partial(make_sized, width=8)), torch.device("cpu"), torch.float32, 0)
    assert built.example_inputs[0].shape == (2, 8)
    built = build(portable(make_hidden), torch.device("cpu"), torch.float32, 0, {"hidden": 6})
    assert built.example_inputs[0].shape == (3, 6)


def test_check_capture_takes_a_factorys_kwargs_and_refuses_them_for_a_plain_function():
    report = check_capture("tests.gpu_demo.guard.test_targets:make_hidden", kwargs={"hidden": 16}, dtype=torch.float32)
    assert report.answer == EXPECTED and not report.problem, report.format()
    assert check_capture(functools.partial(make_sized, width=16)).answer == EXPECTED
    with pytest.raises(TargetError, match="kwargs were given but .* is not a factory"):
        check_capture(torch.neg, torch.ones(2), kwargs={"hidden": 16})


def test_fresh_inputs_give_structured_ids_and_must_match_the_examples():
    subject = Subject(target=embed_factory, name="embed", inputs=None, dtype=torch.float32, replays=4,
                      fresh_inputs=portable(every_id))
    examples = [torch.tensor([0, 99, 5, 7])]
    drawn = subject.draw_inputs(examples, torch.device("cpu"))
    assert len(drawn) == 4 and all(inputs[0].shape == (4,) and inputs[0].dtype == torch.int64 for inputs in drawn)
    bad = Subject(target=embed_factory, name="embed", inputs=None, dtype=torch.float32, replays=1,
                  fresh_inputs=portable(lambda examples, generator: (torch.zeros(5, dtype=torch.int64),)))
    with pytest.raises(TargetError, match=r"fresh_inputs returned \[\(\(5,\), torch.int64\)\] but the example"):
        bad.draw_inputs(examples, torch.device("cpu"))
    report = check_capture(embed_factory, fresh_inputs=every_id)
    assert report.answer == EXPECTED and not report.problem, report.format()


# A script run as `python script.py`: its function and closure live in __main__, as a notebook cell's do.
SCRIPT = textwrap.dedent("""
    import torch
    from gpu_demo import check_capture
    from gpu_demo.guard.differential import Subject
    from gpu_demo.guard.target import portable
    from gpu_demo.guard.protocol.child import run_in_child

    def f(x):
        return torch.relu(x) * 2

    def scaled(scale):
        def closure(x):
            return x * scale
        return closure

    for name, fn in (("function", f), ("closure", scaled(3.0))):
        for isolate in (True, False):
            report = check_capture(fn, torch.randn(16, 512), isolate=isolate)
            print(name, isolate, report.answer, report.problem)
    # A child process rebuilds the __main__ closure from its bytes (what the GPU path relies on).
    subject = Subject(target=portable(scaled(3.0)), name="closure", inputs=(torch.ones(2, 4),),
                      dtype=torch.float32, replays=1)
    done = run_in_child("gpu_demo.guard.differential:check_in_child", {"subject": subject}, 120)
    print("child", done.get("mode"), done.get("child_error"))
""")


def run_cell_script(tmp_path: Path) -> None:
    pytest.importorskip("cloudpickle")
    script = tmp_path / "cell.py"
    script.write_text(SCRIPT)
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    for name in ("function", "closure"):
        for isolate in ("True", "False"):
            assert f"{name} {isolate} {EXPECTED} None" in lines, done.stdout
    assert f"child {'cuda' if torch.cuda.is_available() else 'dry_run'} None" in lines, done.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="the GPU twin below runs it there")
def test_a_function_and_a_closure_defined_in_main_are_checked_isolated_and_not(tmp_path):
    run_cell_script(tmp_path)


@pytest.mark.gpu
def test_on_a_gpu_a_function_and_a_closure_defined_in_main_pass_isolated_and_not(tmp_path):
    run_cell_script(tmp_path)


@pytest.mark.gpu
def test_on_a_gpu_factory_options_and_structured_inputs_pass_in_one_warm_worker():
    with warm_checks() as worker:
        reports = [check_capture("tests.gpu_demo.guard.test_targets:make_hidden", kwargs={"hidden": 16},
                                 dtype=torch.float32),
                   check_capture(functools.partial(make_sized, width=16), dtype=torch.float32),
                   check_capture(embed_factory, fresh_inputs=every_id, dtype=torch.float32)]
    assert all(r.passed for r in reports), [r.format() for r in reports]
    assert worker.started == 1
