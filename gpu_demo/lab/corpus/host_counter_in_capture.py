"""A sliding-window cache counts its tokens in a host int that picks the update's branch (transformers 5's
``StaticSlidingWindowLayer``; vLLM #52492).

A whole script, run as one (``CAPTURE_ORDER_CHECK=1``). The cache layer of a
sliding-window model keeps the number of tokens it has seen in a Python int
that its update advances (``cumulative_length_int += 1``): while the window
fills it appends at the device position, once it is full it rolls the window
and writes the last row. The decode step is captured before the window is
full: the graph holds the append, and the count, which no replay advances,
never reaches the window. Once a real step would roll, every replay appends
at the capture's branch instead. (transformers indexes past the window there
and the next replay hits a device-side assert; this layer clamps the index,
so the replays are wrong rather than fatal.) vLLM #52492 is the same shape:
a host shortcut taken at capture from dummy metadata.

Hazardous: replays past the window attend over the wrong rows
(``silent_wrong``); checker rule 16 (``host_state_branch``) warns, when the
capture ends, that ``cumulative_length_int`` changed during it.
"""

import torch

EXPECTED = "hazardous"
TOKENS, HIDDEN, WINDOW, STEPS = 1, 256, 4, 8


class SlidingWindowLayer:
    """A cache layer: ``WINDOW`` rows of keys, the count of tokens seen, and the device write position."""

    def __init__(self, device: torch.device, dtype: torch.dtype) -> None:
        self.keys = torch.zeros(WINDOW, HIDDEN, device=device, dtype=dtype)
        self.cache_position = torch.zeros(1, dtype=torch.long, device=device)
        self.cumulative_length_int = 0

    def update(self, key: torch.Tensor) -> torch.Tensor:
        if self.cumulative_length_int >= WINDOW:   # full: roll the window, write the last row
            self.keys.copy_(torch.cat((self.keys[1:], key)))
        else:                                      # filling: write at the position
            self.keys.index_copy_(0, self.cache_position.clamp(max=WINDOW - 1), key)
        self.cumulative_length_int += TOKENS
        self.cache_position += TOKENS
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
