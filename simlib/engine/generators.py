"""Random-number generators as a graph sees them: a state the host reads at launch, and draws a graph advances.

A ``Generator`` (``torch.Generator(device="cuda")``) is a name and an offset
(philox's counter): each random op draws the next offset. Eagerly, the host
reads the offset when it launches and advances it. Under capture, what happens
depends on whether the graph advances the generator: the default CUDA
generator and those registered with the graph (``register_generator_state``)
are advanced by every replay, so each replay draws new numbers (a ``Draw``:
the n-th draw of the capture, placed at the offset the replay starts from);
any other generator was read once, at capture, and every replay draws the
capture's numbers again.
"""

from __future__ import annotations

from dataclasses import dataclass

from .device import KernelFn
from .values import Call, Expr, Sym


class Generator:
    """A device random-number generator: ``name`` and the next offset it draws."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.offset = 0

    def draw(self) -> int:
        """The host reads the state for one random op and advances it."""
        offset, self.offset = self.offset, self.offset + 1
        return offset

    def advance(self, draws: int) -> int:
        """A replay of a graph that drew ``draws`` times: the offset it starts from, and the state moves on."""
        base, self.offset = self.offset, self.offset + draws
        return base

    def __repr__(self) -> str:
        return f"<Generator {self.name!r} offset={self.offset}>"


def drawn(kernel: str, generator: Generator, offset: int) -> KernelFn:
    """The kernel of a random op: ``kernel(inputs..., gen@offset)``, the numbers that offset gives."""
    numbers = Sym(f"{generator.name}@{offset}")

    def fn(*vals: Expr) -> Expr:
        return Call(kernel, (*vals, numbers))
    return fn


@dataclass(frozen=True)
class Draw:
    """A captured random op on a generator the graph advances: its ``nth`` draw in the capture."""

    kernel: str
    generator: Generator
    nth: int

    def at(self, base: int) -> KernelFn:
        """Its kernel in a replay whose draws start at offset ``base``."""
        return drawn(self.kernel, self.generator, base + self.nth)
