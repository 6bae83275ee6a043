"""The same Hugging Face decode loop with a full-attention model: its cache counts on the device
(transformers 5's ``StaticLayer``; the twin of ``hf_sliding_window_decode``).

A whole script: the unpinned decode loop of ``hf_sliding_window_decode``
(prefill, two eager tokens, a captured step replayed per token against an
eager twin), with the Mistral's sliding window off. Every layer is then a
``StaticLayer``, which keeps its length in a device tensor that its captured
update advances, and whose branch and mask sizes do not depend on a host
count: every replay writes and attends where eager does.

Safe: every replay matches the eager twin, and no host value changes during
the capture.
"""

import torch

EXPECTED = "safe"
SLIDING_WINDOW: int | None = None
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
