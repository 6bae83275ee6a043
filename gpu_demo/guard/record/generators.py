"""Which generator a random op draws from, and which generators a graph advances (checker rule 17).

A captured random op reads its generator's seed and offset through the graph
only when the graph advances that generator on every replay: the default CUDA
generator always, another one only once it was registered with the graph
(``CUDAGraph.register_generator_state``). So the recorder writes each random
op's generator into its launch's scalars (``(GENERATOR, name)``) and the
generators registered with a graph into its ``Capture`` end record. A generator
is named once, by the order it was first seen (``generator1``, ...); a device's
default generator is ``DEFAULT_GENERATOR``. Generators are told apart by their
device and initial seed (see ``_key``): a private generator seeded as the
default one was is taken for it, and a draw from it is not reported.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from typing import Any, Callable

import torch

from simlib.trace import DEFAULT_GENERATOR

_names: dict[tuple[str, int, int], str] = {}   # a generator's key (``_key``) -> its name
_numbers = itertools.count(1)
_registered: dict[int, list[str]] = defaultdict(list)   # id(CUDAGraph) -> the generators registered with it


def _key(generator: torch.Generator) -> tuple[str, int, int]:
    """What tells generators apart: the dispatcher hands an op a new Python object for the same
    generator every time, so not its identity, but its device and the seed it was given."""
    device = generator.device
    return device.type, device.index or 0, generator.initial_seed()


def _default_for(device: torch.device) -> torch.Generator | None:
    if device.type == "cpu":
        return torch.default_generator
    if device.type == "cuda" and torch.cuda.is_available():
        return torch.cuda.default_generators[device.index or 0]
    return None


def name_of(generator: torch.Generator) -> str:
    """The generator's name in a trace: ``DEFAULT_GENERATOR`` for a device's default one."""
    key = _key(generator)
    name = _names.get(key)
    if name is None:
        default = _default_for(generator.device)
        name = DEFAULT_GENERATOR if default is not None and _key(default) == key else f"generator{next(_numbers)}"
        _names[key] = name
    return name


def take_registered(cuda_graph: object) -> tuple[str, ...]:
    """The generators registered with ``cuda_graph`` (its capture's ``Capture.generators``), once."""
    return tuple(_registered.pop(id(cuda_graph), ()))


def register_wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
    """``CUDAGraph.register_generator_state``, noting which generator a graph will advance."""
    def register_generator_state(self: Any, generator: Any, *args: Any, **kwargs: Any) -> Any:
        out = original(self, generator, *args, **kwargs)
        if isinstance(generator, torch.Generator):
            _registered[id(self)].append(name_of(generator))
        return out
    return register_generator_state
