"""A ``TorchDispatchMode`` that pays for no more Python per op than it must.

Two costs every Python dispatch mode pays by default:

* torch keeps ``torch.compile`` out of a mode's ``__torch_dispatch__`` by wrapping
  it (``TorchDispatchMode.__init_subclass__``) in ``torch._dynamo.disable``: two
  Python frames that switch dynamo's frame evaluation off and back on around
  each op, and an ``import torch._dynamo`` (over a second) on the first op of a
  process. ``QuickDispatchMode`` marks the method's code object instead in
  dynamo's own table, "skip this frame and everything it calls", which dynamo
  reads in C before it would look at the frame: the same protection for no
  cost per op. Where this torch lacks that table, the wrapper stays.
* ``OpOverload.__call__`` is a Python frame that only forwards to the
  overload's ``_op``; ``op_caller`` hands back ``_op`` itself.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

try:   # torch's C frame-evaluation table (torch._dynamo.eval_frame.skip_code writes it too)
    from torch._C._dynamo.eval_frame import _FrameAction, _FrameExecStrategy, set_code_exec_strategy
except ImportError:  # pragma: no cover (a torch without it keeps its own wrapper)
    set_code_exec_strategy = None


class QuickDispatchMode(TorchDispatchMode):
    """Base of the project's dispatch modes: a subclass's ``__torch_dispatch__`` is
    skipped by dynamo, with everything it calls, without torch's per-op wrapper."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return set_code_exec_strategy is None   # torch's wrapper only where the table is missing

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        method = cls.__dict__.get("__torch_dispatch__")
        if set_code_exec_strategy is not None and method is not None:
            set_code_exec_strategy(method.__code__, _FrameExecStrategy(_FrameAction.SKIP, _FrameAction.SKIP))


def op_caller(func: Any) -> Callable[..., Any]:
    """What calling ``func`` from ``__torch_dispatch__`` comes down to: a plain
    ``OpOverload``'s ``_op``; any other callable (a TorchBind overload, whose own
    ``__call__`` does more) as it is."""
    return func._op if type(func) is torch._ops.OpOverload else func
