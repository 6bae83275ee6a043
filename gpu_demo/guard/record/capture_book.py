"""The graphs a recording captured, the memory pools they draw from, and their replays.

A capture opens when ``torch.cuda.graph`` calls ``capture_begin`` (``patches``)
or by hand (``capturing``: ``record_capture``, the dry run), and closes at its
end; records made in between carry its graph id. Opening and closing one
changes what the other parts of the recorder keep (blocks taken before it are
not its pool's, its launches follow nothing issued before it, shape reads are
watched only inside it), so the book makes those changes, in order, and writes
the ``Capture`` records, with the host state the captured code changed
(``host_state``) and the generators registered with the graph
(``generators``). With ``eager=False`` the recorder sits on the dispatch
stack only while a capture is open: the book puts it there and takes it off.

A graph's memory comes from its own pool (``graph<id>``) or one it shares
(``capture_begin(pool=other.pool())``, a ``graph_pool_handle()``); eager
allocations can be routed into a pool too (``torch.compile``'s CUDA-graph
trees, ``torch.cuda.use_mem_pool``). The book names each pool handle once, so
every record of that pool's memory carries the same name.
"""

from __future__ import annotations

import itertools
import weakref
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode

from gpu_demo.guard.protocol.cuda_errors import cuda_error_name, first_error, one_line
from gpu_demo.guard.record.annotate import MAIN
from gpu_demo.guard.record.call_site import user_site
from gpu_demo.guard.record.generators import take_registered
from gpu_demo.guard.record.handles import HandleTable
from gpu_demo.guard.record.host_state import HostSnapshot
from gpu_demo.guard.record.journal import Journal
from gpu_demo.guard.record.ledger import AllocationLedger
from gpu_demo.guard.record.mutations import MutationWatch
from gpu_demo.guard.record.stream_order import StreamOrder
from simlib.memory import graph_pool
from simlib.trace import Capture, Fault, Replay


@dataclass
class OpenCapture:
    graph: int
    inputs: tuple[int, ...]
    by_hand: bool                  # opened by ``capturing()``, which also writes its end
    cuda_graph: object | None = None
    pool: str = ""                 # ``Capture.pool``: "" its own, else the shared pool's name


class CaptureBook:
    """The capture open now, the graphs and pools seen, and who is told when a graph
    is done (``capture_ended``, with its id) or replayed (``replayed``, after its ``Replay``)."""

    def __init__(self, journal: Journal, handles: HandleTable, order: StreamOrder, ledger: AllocationLedger,
                 watch: MutationWatch, mode: TorchDispatchMode) -> None:
        self.open: OpenCapture | None = None
        self.capture_ended: list[Callable[[int], None]] = []
        self.replayed: list[Callable[[int], None]] = []
        self._graph_of: dict[int, int] = {}          # id(CUDAGraph) -> graph id
        self._replays: dict[int, int] = defaultdict(int)
        self._pool_names: dict[Any, str] = {}        # a CUDAGraph.pool() handle -> its pool name
        self._graph_ids = itertools.count()
        self._journal = journal
        self._handles = handles
        self._order = order
        self._ledger = ledger
        self._watch = watch
        self._mode = weakref.ref(mode)   # the recorder, which owns the book: no reference cycle
        self._dispatching = False   # ``eager=False``: the recorder is on the dispatch stack now
        self.host = HostSnapshot()  # the host ints and flags the capturing code reaches (rule 16)

    @contextmanager
    def capturing(self, inputs: Sequence[torch.Tensor] = ()) -> Iterator[int]:
        """Bracket a capture by hand: ``Capture`` begin/end records, graph id on records inside.

        ``torch.cuda.graph`` captures are bracketed without this; a
        ``torch.cuda.graph`` inside joins the capture opened here. ``inputs``
        are the graph's static inputs (checker rule 5 watches them).
        """
        graph = self._begin(MAIN, tuple(t.data_ptr() for t in inputs), by_hand=True)
        try:
            yield graph
        except BaseException as exc:
            self._end(exc)
            raise
        self._end(None)

    def on_capture_begin(self, cuda_graph: object, pool: object = None) -> None:
        """``pool``: the memory pool handle ``capture_begin`` was given (another graph's
        ``pool()``), ``None`` for the graph's own."""
        stream = self._order.capture_stream()
        opened = self.open
        if opened is not None and opened.by_hand and opened.cuda_graph is None:
            opened.cuda_graph = cuda_graph
            self._graph_of[id(cuda_graph)] = opened.graph
            self._own_pool(cuda_graph, opened.graph)
            return
        key = None if pool is None else _pool_key(pool)
        shared = self._pool_names.get(key, "") if key is not None else ""
        graph = self._begin(stream, (), by_hand=False, cuda_graph=cuda_graph, pool=shared)
        if key is not None and not shared:   # a fresh handle (graph_pool_handle()): this graph's pool
            self._pool_names[key] = graph_pool(graph)
        self._own_pool(cuda_graph, graph, shared)

    def on_capture_end(self, cuda_graph: object, error: BaseException | None) -> None:
        opened = self.open
        if opened is not None and not opened.by_hand:
            self._end(error)
            if error is None:   # ``pool()`` answers only once a capture has ended
                self._own_pool(cuda_graph, opened.graph, opened.pool)

    def on_pool_routing(self, pool: object, begin: bool) -> None:
        """Eager allocations go to graph pool ``pool`` from now on (``begin``), or no longer:
        their blocks are that pool's, named as a capture into it will be."""
        ledger = self._ledger
        ledger.unclaimed()   # what was taken so far came from the pool before this one
        if begin:
            ledger.eager_pool = self._pool_names.setdefault(_pool_key(pool), f"mempool{len(self._pool_names)}")
        else:
            ledger.eager_pool = None
        ledger.route()   # standing aside, the routed blocks are still taken down

    def on_replay(self, cuda_graph: object) -> None:
        graph = self._graph_of.get(id(cuda_graph))
        if graph is not None and (self._journal.recording or self._journal.aside):
            self.replay(graph, self._replays[graph])

    def replay(self, graph: int, index: int) -> None:
        self._replays[graph] = index + 1
        self._journal.settle()
        self._journal.emit(Replay, graph=graph, index=index, stream=self._order.stream(), site=user_site())
        for callback in self.replayed:
            callback(graph)

    def fault(self, exc: BaseException) -> None:
        self._journal.emit(Fault, error=cuda_error_name(str(exc)) or type(exc).__name__, launch=None,
                           detail=one_line(exc))

    def leave_dispatch(self, *, entered_eagerly: bool = False) -> None:
        """``eager=False``: the recorder off the dispatch stack once the capture is over
        (``entered_eagerly``: it went on when the recording began, and stands aside now). A mode
        the program entered since and has not left sits above it: then it stays (recording
        nothing) until a later capture ends with it on top."""
        mode = self._mode()
        self._dispatching = self._dispatching or entered_eagerly
        if self._dispatching and _get_current_dispatch_mode() is mode:
            TorchDispatchMode.__exit__(mode, None, None, None)
            self._dispatching = False

    def _own_pool(self, cuda_graph: object, graph: int, shared: str = "") -> None:
        """Remember which pool name ``cuda_graph.pool()`` stands for (a later capture may share it)."""
        try:
            key = _pool_key(cuda_graph.pool())
        except Exception:   # a stand-in graph (tests), or a torch without pool()
            return
        self._pool_names.setdefault(key, shared or graph_pool(graph))

    def _begin(self, stream: str, inputs: tuple[int, ...], *, by_hand: bool, cuda_graph: object = None,
               pool: str = "") -> int:
        journal, ledger = self._journal, self._ledger
        ledger.unclaimed()   # blocks taken before the capture are not its pool's
        graph = next(self._graph_ids)
        journal.settle()
        journal.emit(Capture, op="begin", graph=graph, stream=stream, inputs=inputs, pool=pool, site=user_site())
        self.host.take()
        self.open = OpenCapture(graph, inputs, by_hand, cuda_graph, pool)
        if cuda_graph is not None:
            self._graph_of[id(cuda_graph)] = graph
        journal.graph, ledger.capture_pool = graph, pool or graph_pool(graph)
        self._order.capture_began()
        if not journal.eager:   # what tensors went through since the last capture was not watched
            self._handles.forget_seen()
        self._watch.capture_began()
        ledger.route()
        if not journal.eager and not self._dispatching:   # onto the dispatch stack of the capturing thread
            TorchDispatchMode.__enter__(self._mode())
            self._dispatching = True
        return graph

    def _end(self, error: BaseException | None) -> None:
        journal = self._journal
        self._ledger.unclaimed()   # blocks taken during the capture are its pool's
        opened, self.open = self.open, None
        journal.graph = None
        self._order.capture_ended()
        self._watch.capture_ended()
        self._ledger.route()
        self.leave_dispatch()
        message = None if error is None else one_line(first_error(error))
        self.host.changed(journal, opened.graph)
        generators = take_registered(opened.cuda_graph) if opened.cuda_graph is not None else ()
        journal.emit(Capture, op="end", graph=opened.graph, stream=MAIN if opened.by_hand else self._order.stream(),
                     inputs=opened.inputs, error=message, pool=opened.pool, generators=generators,
                     site=user_site())
        for callback in self.capture_ended:
            callback(opened.graph)


def _pool_key(pool: object) -> Any:
    """A pool handle as a dict key (``CUDAGraph.pool()`` returns a tuple of two ints)."""
    return tuple(pool) if isinstance(pool, (list, tuple)) else pool
