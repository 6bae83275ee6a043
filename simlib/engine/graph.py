"""Captured graphs: a DAG of launches whose arguments were frozen at capture time.

While a stream is captured, a launch does not run: it becomes a node that
depends on the previous node of its stream plus whatever captured events its
stream waited on. The ``Capture`` tracks, per participating stream, that
*frontier*; capture ends cleanly only if every forked stream's frontier has
been joined back into the origin stream's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..memory import graph_pool
from ..trace import Launch
from .errors import CaptureError
from .generators import Generator
from .stream import Stream
from .tensor import TensorHandle

GLOBAL, THREAD_LOCAL, RELAXED = "global", "thread_local", "relaxed"
CAPTURE_MODES = (GLOBAL, THREAD_LOCAL, RELAXED)
"""``torch.cuda.graph(..., capture_error_mode=...)``, i.e. ``cudaStreamCaptureMode``.

While a capture is underway, ``global`` (PyTorch's default) and ``thread_local``
forbid this thread's *potentially unsafe* calls even on streams that are not
being captured: a new device block (``cudaMalloc``, which the caching allocator
makes when it has no cached block for that stream), a synchronous copy from or to
the host, a stream or event synchronize, an event query. The call fails with
``cudaErrorStreamCaptureUnsupported`` ("operation not permitted when stream is
capturing") and invalidates the capture. ``relaxed`` allows them: work on a
stream outside the capture then simply runs eagerly. The two strict modes
differ only in whether *other* threads are restricted too; simlib has one host
thread, so they behave alike here. In every mode the captured streams
themselves may not be synchronised or read back.
"""

if TYPE_CHECKING:   # runtime imports graph
    from .runtime import Runtime


class CapturedGraph:
    """The result of a capture (``torch.cuda.CUDAGraph``): nodes with frozen args."""

    def __init__(self, rt: "Runtime", id: int, label: str, stream: str, pool: str | None = None) -> None:
        self._rt = rt
        self.id = id
        self.label = label
        self.stream = stream
        self.pool_shared = pool      # another graph's pool it was captured into (None: its own)
        self.nodes: list[Launch] = []
        self.inputs: tuple[TensorHandle, ...] = ()
        self.ok = False          # set when the capture ended without error
        self.replays = 0
        self.draws: dict[Generator, int] = {}   # per generator it advances, the draws of one replay

    def replay(self, stream: "Stream | None" = None) -> None:
        self._rt.replay(self, stream)

    def pool(self) -> str:
        """``g.pool()``: the memory pool this graph allocates from, to share with ``rt.graph(pool=...)``."""
        return self.pool_shared or graph_pool(self.id)

    def node(self, label: str) -> Launch:
        """The first node whose label or kernel is ``label`` (for tests and notebooks)."""
        for n in self.nodes:
            if label in (n.label, n.kernel):
                return n
        raise KeyError(f"graph {self.label!r} has no node labelled {label!r}; "
                       f"labels: {[n.label for n in self.nodes]}")

    def __repr__(self) -> str:
        state = "ok" if self.ok else "not usable"
        return f"<CapturedGraph {self.id} {self.label!r} {len(self.nodes)} nodes, {state}>"


@dataclass
class Capture:
    """The state of a capture in progress."""

    graph: CapturedGraph
    origin: Stream
    frontier: dict[str, tuple[int, ...]] = field(default_factory=dict)
    error: CaptureError | None = None   # the first error; the capture is invalidated
    mode: str = GLOBAL
    # blocks freed with recorded stream uses, held until the capture ends (record_stream)
    held: list[tuple[int, int, str, str, dict[str, bool]]] = field(default_factory=list)
    generators: tuple[Generator, ...] = ()       # registered with the graph: its replays advance them
    draws: dict[Generator, int] = field(default_factory=dict)   # the capture's draws from each it advances
    host_before: dict = field(default_factory=dict)   # host objects' ints and bools when it began

    def capturing(self, stream: Stream) -> bool:
        return stream.name in self.frontier

    def ancestors(self, nodes: tuple[int, ...]) -> set[int]:
        """Every node reachable backwards from ``nodes`` (inclusive)."""
        deps = {n.id: n.deps for n in self.graph.nodes}
        seen: set[int] = set()
        todo = list(nodes)
        while todo:
            n = todo.pop()
            if n not in seen:
                seen.add(n)
                todo.extend(deps[n])
        return seen

    def unjoined(self) -> list[str]:
        """Streams whose captured work the origin stream never waited for."""
        joined = self.ancestors(self.frontier[self.origin.name])
        return [s for s, tip in self.frontier.items()
                if s != self.origin.name and not set(tip) <= joined]
