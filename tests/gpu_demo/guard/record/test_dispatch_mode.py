"""``gpu_demo.guard.record.dispatch_mode``: dynamo stays out of the recorder's frames, without torch's per-op wrapper."""

from __future__ import annotations

import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from gpu_demo.guard.record.dispatch_mode import QuickDispatchMode, op_caller, set_code_exec_strategy  # noqa: E402


class Guarded(QuickDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        return _run(func, args, kwargs or {})


class Unguarded(TorchDispatchMode):
    """A mode that opts out of torch's wrapper and marks nothing: dynamo traces into it."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        return _run(func, args, kwargs or {})


def _run(func, args, kwargs):  # noqa: ANN001 (called from the mode: a frame of its own)
    return func(*args, **kwargs)


def _graphs_compiled_under(mode: TorchDispatchMode) -> int:
    """Graphs dynamo compiles while a function with a graph break runs under ``mode``."""
    import torch._dynamo

    torch._dynamo.reset()
    graphs = []

    def backend(gm, example_inputs):  # noqa: ANN001
        graphs.append(gm)
        return gm.forward

    def program(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        torch._dynamo.graph_break()
        return torch.sin(y) + 1

    x = torch.randn(4)
    with mode:
        out = torch.compile(program, backend=backend)(x)
    torch.testing.assert_close(out, torch.sin(x * 2) + 1)
    return len(graphs)


@pytest.mark.skipif(set_code_exec_strategy is None, reason="this torch has no frame-evaluation table")
def test_dynamo_compiles_nothing_inside_the_mode_or_what_it_calls():
    assert _graphs_compiled_under(Unguarded()) > 0   # the probe sees tracing where nothing stops it
    assert _graphs_compiled_under(Guarded()) == 0


@pytest.mark.skipif(set_code_exec_strategy is None, reason="this torch keeps its own wrapper")
def test_the_mode_runs_without_torchs_per_op_wrapper_and_without_importing_dynamo():
    assert Guarded.__dict__["__torch_dispatch__"].__code__.co_filename == __file__   # torch's wrapper lives in torch
    program = ("import sys, torch\n"
               "from gpu_demo.lab.measure.overhead import EmptyDispatchMode\n"
               "with EmptyDispatchMode() as mode:\n"
               "    torch.ones(3).add(1)\n"
               "print(mode.ops, 'torch._dynamo' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["2", "False"]


def test_op_caller_skips_only_the_forwarding_frame_of_a_plain_overload():
    add = torch.ops.aten.add.Tensor
    assert op_caller(add) is add._op
    assert op_caller(_run) is _run
    torch.testing.assert_close(op_caller(add)(torch.ones(2), torch.ones(2)), torch.full((2,), 2.0))
