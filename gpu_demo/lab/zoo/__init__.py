"""The model zoo: small random-weight builds of real architectures, on which the guard must stay silent.

Real models are full of views the guard must size right (an expanded ``position_ids``,
GQA's ``repeat_kv``, a broadcast mask, ViT's expanded cls token), so the zoo is a
standing false-positive test: each entry is a correct program, and any finding is the
guard's mistake. Nothing is downloaded: tiny configurations, random weights, seeded so
that two builds are identical (the eager reference is a second build).

Each entry is a factory with the corpus programs' interface,
``make(device, dtype) -> (fn, example_inputs)``, at ``gpu_demo.lab.zoo.<module>:<model>_<mode>``:

* ``vision`` (timm): ``resnet18``, ``vit_tiny_patch16_224``, ``convnext_atto``, ``forward`` only;
* ``decoders`` (Hugging Face transformers): ``llama``, ``qwen2``, ``mixtral``, ``deepseek_v3``, each
  as a ``forward`` over a prompt and as a one-token ``StaticCache`` ``decode`` step.

``gpu_demo.lab.zoo.runner`` records each entry's H200 truth and the guard's verdict.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

FORWARD, DECODE = "forward", "decode"
LIBRARIES = {"vision": "timm", "decoders": "transformers"}


@dataclass(frozen=True)
class Entry:
    """One zoo model in one mode."""

    model: str
    mode: str
    module: str   # ``vision`` or ``decoders``

    @property
    def name(self) -> str:
        return f"{self.model}_{self.mode}"

    @property
    def target(self) -> str:
        """The ``module:callable`` string the guard checks."""
        return f"{__name__}.{self.module}:{self.name}"

    @property
    def library(self) -> str:
        return LIBRARIES[self.module]


ENTRIES: tuple[Entry, ...] = (
    *(Entry(model, FORWARD, "vision") for model in ("resnet18", "vit_tiny_patch16_224", "convnext_atto")),
    *(Entry(model, mode, "decoders") for model in ("llama", "qwen2", "mixtral", "deepseek_v3")
      for mode in (FORWARD, DECODE)),
)
NAMES: tuple[str, ...] = tuple(e.name for e in ENTRIES)


def entry(name: str) -> Entry:
    """The entry called ``name`` (one of ``NAMES``)."""
    for e in ENTRIES:
        if e.name == name:
            return e
    raise ValueError(f"{name!r} is not a zoo entry; the entries are: {', '.join(NAMES)}")


def factory(e: Entry) -> Callable[..., Any]:
    """The entry's ``make(device, dtype)``."""
    return getattr(importlib.import_module(f"{__name__}.{e.module}"), e.name)


def unavailable(e: Entry) -> str | None:
    """Why the entry's library cannot be imported here (one line), or ``None`` when it can."""
    try:
        importlib.import_module(e.library)
    except Exception as exc:   # a broken install raises more than ImportError (torchvision: RuntimeError)
        return f"{e.library} cannot be imported here ({type(exc).__name__}: {str(exc).splitlines()[0]})"
    return None
