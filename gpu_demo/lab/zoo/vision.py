"""timm image models, random weights, at a small image size: ``<model>_forward(device, dtype)``.

The architectures are timm's own (``timm.create_model(name, pretrained=False)``);
only the input is smaller than their 224 pixels (ViT's position table is made for
that size), so the CPU dry run stays fast. timm is imported when a model is
built; it comes with the ``vision`` extra (timm and the torchvision built for the
pinned torch; ``pyproject.toml`` says what a GPU seat with its own torch adds).
"""

from __future__ import annotations

import torch

from gpu_demo.lab.zoo.build import generator, seeded

IMAGE, BATCH = 64, 2


def _forward(name: str, device: torch.device, dtype: torch.dtype, **options: int) -> tuple[torch.nn.Module, tuple]:
    import timm  # optional: only the vision entries need it (module docstring)

    model = seeded(lambda: timm.create_model(name, pretrained=False, **options), device, dtype)
    images = torch.randn(BATCH, 3, IMAGE, IMAGE, generator=generator()).to(device=device, dtype=dtype)
    return model, (images,)


def resnet18_forward(device: torch.device, dtype: torch.dtype) -> tuple[torch.nn.Module, tuple]:
    return _forward("resnet18", device, dtype)


def vit_tiny_patch16_224_forward(device: torch.device, dtype: torch.dtype) -> tuple[torch.nn.Module, tuple]:
    return _forward("vit_tiny_patch16_224", device, dtype, img_size=IMAGE)


def convnext_atto_forward(device: torch.device, dtype: torch.dtype) -> tuple[torch.nn.Module, tuple]:
    return _forward("convnext_atto", device, dtype)
