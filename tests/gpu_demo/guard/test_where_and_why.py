"""Every answer says what, where and why: dtypes as the user wrote them, the error text of a
failed capture, and each finding at the user's file and line, under the user's tensor names."""

from __future__ import annotations

import pytest
import torch

from gpu_demo.guard.check import check_capture
from gpu_demo.guard.protocol.tolerance import dtype_named
from gpu_demo.guard.target import build, portable

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
