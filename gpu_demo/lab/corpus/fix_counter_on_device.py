"""Fix: the sliding-window cache counts on the device and picks its branch there (transformers 5's
``StaticLayer``; vLLM #52492).

The twin of ``host_counter_in_capture``: the count of tokens seen is a device
tensor the captured update advances in place, as the full-attention layer's
``cumulative_length`` is, and the branch is taken on the device: the update
computes the rolled and the appended window and keeps the one the count
picks (``torch.where``). Every replay advances the count and reads it.

Safe: replays past the window roll it as eager does, and no host value
changes during the capture.
"""

import torch

EXPECTED = "safe"
TOKENS, HIDDEN, WINDOW, STEPS = 1, 256, 4, 8


class SlidingWindowLayer:
    """A cache layer: ``WINDOW`` rows of keys and, on the device, the count of tokens seen."""

    def __init__(self, device: torch.device, dtype: torch.dtype) -> None:
        self.keys = torch.zeros(WINDOW, HIDDEN, device=device, dtype=dtype)
        self.cumulative_length = torch.zeros(1, dtype=torch.long, device=device)

    def update(self, key: torch.Tensor) -> torch.Tensor:
        rolled = torch.cat((self.keys[1:], key))
        appended = self.keys.index_copy(0, self.cumulative_length.clamp(max=WINDOW - 1), key)
        self.keys.copy_(torch.where(self.cumulative_length >= WINDOW, rolled, appended))   # the branch, on the device
        self.cumulative_length += TOKENS
        return self.keys


class DecodeStep(torch.nn.Module):
    def __init__(self, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__()
        self.wk = torch.nn.Linear(HIDDEN, HIDDEN, bias=False, device=device, dtype=dtype)
        self.cache = SlidingWindowLayer(device, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        keys = self.cache.update(self.wk(x))
        return torch.softmax(x @ keys.T / HIDDEN**0.5, dim=-1) @ keys


def error(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.float() - want.float()).norm() / want.float().norm().clamp_min(1e-30)).item()


@torch.no_grad()
def run(device: torch.device, dtype: torch.dtype) -> list[float]:
    """Two eager steps, a capture, then ``STEPS`` replays from the captured step's token on (a capture
    runs nothing: its token is the first replay's); each replay's error against a twin layer that ran
    every token eagerly, once."""
    torch.manual_seed(0)
    step = DecodeStep(device, dtype)
    torch.manual_seed(0)
    twin = DecodeStep(device, dtype)
    generator = torch.Generator().manual_seed(1)
    tokens = [torch.randn(TOKENS, HIDDEN, generator=generator).to(device, dtype) for _ in range(2 + STEPS)]
    static = tokens[0].clone()
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for x in tokens[:2]:
            static.copy_(x)
            step(static)
    torch.cuda.current_stream().wait_stream(side)
    static.copy_(tokens[2])
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step(static)
    wants = [twin(x) for x in tokens]
    errors = []
    for x, want in zip(tokens[2:], wants[2:]):
        static.copy_(x)
        graph.replay()
        errors.append(error(out, want))
    torch.cuda.synchronize()
    return errors
