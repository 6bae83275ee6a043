"""A factory's function run the way a server starts up and serves, for the checks that watch a whole process.

The whole-process check (``CAPTURE_ORDER_CHECK=1``) and the anchors see a
program only through what it does; a factory (``make(device, dtype)``: a
corpus program's, a zoo entry's) does nothing by itself. ``serve`` gives its
function a server's start-up: eager calls, one capture, replays with fresh inputs.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from gpu_demo.guard.protocol import capture_replay
from gpu_demo.guard.protocol.capture_replay import fresh_like


def serve(make: Callable[[torch.device, torch.dtype], tuple[Callable[..., Any], list[torch.Tensor]]],
          dtype: torch.dtype, replays: int, seed: int, calls: int = 3) -> None:
    """``make``'s function run the way a server starts up and serves: ``calls`` eager calls
    (a side stream, as ``torch.cuda.graph``'s docs ask), one capture, ``replays`` replays
    with fresh inputs copied into the captured ones. A replay that faults ends it."""
    device = torch.device("cuda")
    torch.manual_seed(seed)
    fn, examples = make(device, dtype)
    inputs = [t.clone() for t in examples]
    generator = torch.Generator().manual_seed(seed + 2)
    with torch.no_grad():
        capture_replay.warm_up(lambda: fn(*inputs), iterations=calls)
        graph, _ = capture_replay.capture(lambda: fn(*inputs))
        for _ in range(replays):
            for static, example in zip(inputs, examples):
                static.copy_(fresh_like(example, generator, device))
            graph.replay()
            torch.cuda.synchronize()
