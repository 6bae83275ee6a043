"""A Hugging Face Mistral decode loop with a sliding-window ``StaticCache``, captured before the window fills
(transformers 5's ``StaticSlidingWindowLayer``; vLLM #52492).

A whole script, run as one (``CAPTURE_ORDER_CHECK=1``): a real, unpinned
transformers decode loop, as a user writes it from the docs. A small Mistral
(random weights, sliding window ``WINDOW``) prefills a prompt into a
``StaticCache``, decodes two tokens eagerly, then captures its decode step
and replays it per token, against a twin model that decodes every token
eagerly. ``StaticSlidingWindowLayer`` counts the tokens it has seen in a
Python int, ``cumulative_length_int``, and picks its update's branch by it
(append while the window fills, roll once it is full); the mask's sizes come
from it too. The capture froze the branch and sizes of its step, and no
replay advances the count: once the window is full, the replays append past
it. The loop stops at the first step that is wrong (or faults: the next
replay indexes past the window, a device-side assert).

Hazardous: the replays go wrong once the window fills (``silent_wrong``, or a
fault); checker rule 16 (``host_state_branch``) warns when the capture ends,
before any replay, that ``cumulative_length_int`` changed during it.
"""

import torch

EXPECTED = "hazardous"
SLIDING_WINDOW: int | None = 12
PROMPT, EAGER_STEPS, STEPS, MAX_CACHE = 4, 2, 12, 32
WRONG = 0.05   # a step's logits this far from eager are wrong: the loop stops there


def build(device: torch.device, dtype: torch.dtype, seed: int):  # noqa: ANN201 (a model and its cache)
    """A two-layer Mistral with random weights (the same for the same seed) and its static cache."""
    from transformers import MistralConfig, MistralForCausalLM, StaticCache

    config = MistralConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                           sliding_window=SLIDING_WINDOW)
    torch.manual_seed(seed)
    model = MistralForCausalLM(config).to(device=device, dtype=dtype).eval()
    return model, StaticCache(config=config, max_cache_len=MAX_CACHE)


def decode(model, cache, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:  # noqa: ANN001
    """The last token's logits of one forward step against the cache."""
    return model(input_ids=ids, past_key_values=cache, cache_position=positions, use_cache=True).logits[:, -1]


def error(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.float() - want.float()).norm() / want.float().norm().clamp_min(1e-30)).item()


@torch.no_grad()
def run(device: torch.device, dtype: torch.dtype) -> list[float]:
    """Prefill, decode ``EAGER_STEPS`` tokens eagerly, capture the next step and replay it per token for
    ``STEPS`` tokens; each replay's error against the twin, until one is wrong."""
    model, cache = build(device, dtype, 0)
    twin, twin_cache = build(device, dtype, 0)
    generator = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, 256, (1, PROMPT + EAGER_STEPS + STEPS), generator=generator).to(device)
    prompt = torch.arange(PROMPT, device=device)
    decode(model, cache, tokens[:, :PROMPT], prompt)
    decode(twin, twin_cache, tokens[:, :PROMPT], prompt)
    ids, positions = tokens[:, PROMPT:PROMPT + 1].clone(), prompt[-1:].clone()

    def at(i: int) -> None:    # the static inputs for token ``i`` after the prompt
        ids.copy_(tokens[:, PROMPT + i:PROMPT + i + 1])
        positions.fill_(PROMPT + i)

    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for i in range(EAGER_STEPS):
            at(i)
            decode(model, cache, ids, positions)
            decode(twin, twin_cache, ids, positions)
    torch.cuda.current_stream().wait_stream(side)
    at(EAGER_STEPS)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        logits = decode(model, cache, ids, positions)
    errors = []
    for i in range(EAGER_STEPS, EAGER_STEPS + STEPS):
        at(i)
        graph.replay()
        errors.append(error(logits, decode(twin, twin_cache, ids, positions)))
        if errors[-1] > WRONG:
            break
    torch.cuda.synchronize()
    return errors
