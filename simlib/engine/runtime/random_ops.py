"""Random ops and the generators they draw from (``torch.Generator``, ``torch.rand(..., generator=)``).

A launch records its generator as a scalar (``(GENERATOR, name)``), so the
checker can tell which a graph advances; ``simlib.engine.generators`` says how
a replay draws.
"""

from __future__ import annotations

from typing import Sequence

from ...trace import DEFAULT_GENERATOR, GENERATOR
from ..generators import Draw, Generator, drawn
from ..tensor import TensorHandle


class RandomCalls:
    """``rt.Generator(name)`` and ``rt.random(...)``. Mixed into ``simlib.engine.runtime.Runtime``,
    whose state (``_capture``, ``default_generator``) and launches it uses."""

    def Generator(self, name: str) -> Generator:  # noqa: N802 (mirrors torch)
        """A new generator on the device (``torch.Generator(device="cuda")``); names must be unique."""
        if name == DEFAULT_GENERATOR or name in self._generators:
            raise ValueError(f"a generator named {name!r} already exists; pick another name")
        self._generators[name] = gen = Generator(name)
        return gen

    def random(self, kernel: str, *inputs: TensorHandle, out_shape: Sequence[int],
               generator: Generator | None = None, label: str | None = None) -> TensorHandle:
        """A random op (``torch.rand``, dropout, sampling) drawing from ``generator`` (the default one if None).

        Under capture it draws anew on every replay only when the graph advances the generator:
        the default one, or one registered with ``rt.graph(generators=...)``. Any other is read
        now, once, and every replay draws these numbers again.
        """
        gen = generator or self.default_generator
        cap = self._capturing(self.current_stream)
        if cap is not None and (gen is self.default_generator or gen in cap.generators):
            fn = Draw(kernel, gen, cap.draws.get(gen, 0))
            cap.draws[gen] = fn.nth + 1
        else:
            fn = drawn(kernel, gen, gen.draw())
        out = self.empty(out_shape, label or kernel)
        self.launch(kernel, reads=inputs, writes=[out], fn=fn, label=label, scalars={GENERATOR: gen.name})
        return out
