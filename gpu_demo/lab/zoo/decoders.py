"""Hugging Face decoders, two layers, tiny configurations, random weights.

``<model>_forward(device, dtype)``: the logits of a prompt, no cache.
``<model>_decode(device, dtype)``: one token per sequence against a ``StaticCache`` that a
prompt filled when the factory built it (a cache allocated lazily inside the capture
would be a hazard of its own, transformers #48199).

transformers 5's ``StaticCache`` writes where its own device counter
(``cumulative_length``) points and advances it on every call, whatever
``cache_position`` says; the attention mask follows ``cache_position``. The step
pins the counter to ``cache_position`` first (a device copy, so the graph does it
too), which makes every call the same decode step: the graph's replays and a
separate eager build agree however many calls each has had.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn
from transformers import (
    DeepseekV3Config,
    DeepseekV3ForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    MixtralConfig,
    MixtralForCausalLM,
    PreTrainedConfig,
    PreTrainedModel,
    Qwen2Config,
    Qwen2ForCausalLM,
    StaticCache,
)

from gpu_demo.lab.zoo.build import seeded, token_ids

VOCAB, BATCH, PROMPT = 256, 2, 8
MAX_CACHE = 16
_DENSE = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)   # GQA: 2 heads per kv head

ARCHITECTURES: dict[str, tuple[Callable[[], PreTrainedConfig], type[PreTrainedModel]]] = {
    "llama": (lambda: LlamaConfig(**_DENSE), LlamaForCausalLM),
    "qwen2": (lambda: Qwen2Config(**_DENSE), Qwen2ForCausalLM),
    "mixtral": (lambda: MixtralConfig(**_DENSE, num_local_experts=4, num_experts_per_tok=2), MixtralForCausalLM),
    # multi-head latent attention, a shared expert, grouped top-k routing; layer 0 dense, layer 1 MoE
    "deepseek_v3": (lambda: DeepseekV3Config(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, n_shared_experts=1, n_routed_experts=8, kv_lora_rank=16,
        q_lora_rank=32, qk_rope_head_dim=8, v_head_dim=16, qk_nope_head_dim=16, n_group=2, topk_group=1,
        num_experts_per_tok=2, first_k_dense_replace=1, max_position_embeddings=64), DeepseekV3ForCausalLM),
}


class PromptForward(nn.Module):
    """A prompt's logits, without a cache."""

    def __init__(self, model: PreTrainedModel) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids, use_cache=False).logits


class DecodeStep(nn.Module):
    """One token per sequence at ``cache_position``, against the prefilled ``cache`` (module docstring)."""

    def __init__(self, model: PreTrainedModel, cache: StaticCache) -> None:
        super().__init__()
        self.model, self.cache = model, cache

    def forward(self, input_ids: torch.Tensor, cache_position: torch.Tensor) -> torch.Tensor:
        for layer in self.cache.layers:
            counter = getattr(layer, "cumulative_length", None)
            if isinstance(counter, torch.Tensor):
                counter.copy_(cache_position[0])
        return self.model(input_ids, past_key_values=self.cache, use_cache=True, cache_position=cache_position).logits


def _model(name: str, device: torch.device, dtype: torch.dtype) -> PreTrainedModel:
    config, model_class = ARCHITECTURES[name]
    return seeded(lambda: model_class(config()), device, dtype)


def forward(name: str, device: torch.device, dtype: torch.dtype) -> tuple[PromptForward, tuple[torch.Tensor]]:
    return PromptForward(_model(name, device, dtype)), (token_ids((BATCH, PROMPT), VOCAB, device),)


def prefilled(name: str, device: torch.device, dtype: torch.dtype) -> tuple[PreTrainedModel, StaticCache]:
    """The model and a ``StaticCache`` a prompt of ``PROMPT`` tokens filled (its counter at ``PROMPT``)."""
    model = _model(name, device, dtype)
    cache = StaticCache(config=model.config, max_cache_len=MAX_CACHE)
    prompt = token_ids((BATCH, PROMPT), VOCAB, device)
    with torch.no_grad():
        model(prompt, past_key_values=cache, use_cache=True, cache_position=torch.arange(PROMPT, device=device))
    return model, cache


def decode(name: str, device: torch.device, dtype: torch.dtype) -> tuple[DecodeStep, tuple[torch.Tensor, ...]]:
    model, cache = prefilled(name, device, dtype)
    step = token_ids((BATCH, 1), VOCAB, device)
    return DecodeStep(model, cache), (step, torch.tensor([PROMPT], device=device))


def llama_forward(device: torch.device, dtype: torch.dtype) -> tuple[Any, tuple[torch.Tensor, ...]]:
    return forward("llama", device, dtype)


def llama_decode(device: torch.device, dtype: torch.dtype) -> tuple[Any, tuple[torch.Tensor, ...]]:
    return decode("llama", device, dtype)


def qwen2_forward(device: torch.device, dtype: torch.dtype) -> tuple[Any, tuple[torch.Tensor, ...]]:
    return forward("qwen2", device, dtype)


def qwen2_decode(device: torch.device, dtype: torch.dtype) -> tuple[Any, tuple[torch.Tensor, ...]]:
    return decode("qwen2", device, dtype)


def mixtral_forward(device: torch.device, dtype: torch.dtype) -> tuple[Any, tuple[torch.Tensor, ...]]:
    return forward("mixtral", device, dtype)


def mixtral_decode(device: torch.device, dtype: torch.dtype) -> tuple[Any, tuple[torch.Tensor, ...]]:
    return decode("mixtral", device, dtype)


def deepseek_v3_forward(device: torch.device, dtype: torch.dtype) -> tuple[Any, tuple[torch.Tensor, ...]]:
    return forward("deepseek_v3", device, dtype)


def deepseek_v3_decode(device: torch.device, dtype: torch.dtype) -> tuple[Any, tuple[torch.Tensor, ...]]:
    return decode("deepseek_v3", device, dtype)
