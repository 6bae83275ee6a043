"""Safe: one input fanned out to three side streams and joined back before the sum.

Each of three branches runs on its own stream after ``stream.wait_stream(main)``;
the current stream waits for all three (``main.wait_stream(stream)``) before
it adds their results. Nothing is freed or emptied on the host, and each
stream writes only its own outputs.

Safe: replays match eager; the checker finds nothing.
"""

import torch
import torch.nn.functional as F

EXPECTED = "safe"
TOKENS, HIDDEN, BRANCHES = 16, 512, 3


class Layer(torch.nn.Module):
    def __init__(self, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__()
        self.register_buffer("w", torch.randn(BRANCHES, HIDDEN, HIDDEN, device=device, dtype=dtype) / HIDDEN**0.5)
        self.streams = [torch.cuda.Stream(device) for _ in range(BRANCHES)] if device.type == "cuda" else []

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        x = F.rms_norm(h, (HIDDEN,))
        if not self.streams:
            return h + sum(F.silu(x @ w) for w in self.w)
        main = torch.cuda.current_stream()
        outs = []
        for stream, w in zip(self.streams, self.w):
            stream.wait_stream(main)
            with torch.cuda.stream(stream):
                outs.append(F.silu(x @ w))
        for stream in self.streams:
            main.wait_stream(stream)
        return h + outs[0] + outs[1] + outs[2]


def make(device: torch.device, dtype: torch.dtype) -> tuple[Layer, tuple[torch.Tensor]]:
    return Layer(device, dtype), (torch.randn(TOKENS, HIDDEN, device=device, dtype=dtype),)
