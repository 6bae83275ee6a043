"""Python methods the recorder wraps while it records, for what dispatch never sees.

* ``torch.cuda.CUDAGraph.capture_begin`` / ``capture_end`` / ``replay``: what
  ``torch.cuda.graph(g)`` and ``g.replay()`` call, so a plain capture is
  bracketed without the program saying so (with the memory pool it was given,
  ``torch.cuda.graph(g2, pool=g1.pool())``). ``capture_end`` runs from the
  ``with`` block's ``__exit__``; an exception in flight there that was not in
  flight at ``capture_begin`` is the block's own error. A listener that raises
  at capture end (a strict check) is held back until ``torch.cuda.graph``'s
  ``__exit__`` has restored the current stream, then raised from there.
* ``torch.cuda.CUDAGraph.register_generator_state``: the generators a graph
  advances on every replay (``gpu_demo.guard.record.generators``).
* ``torch.UntypedStorage.resize_``: ``x.untyped_storage().resize_(0)`` frees
  a block on the host side without any aten op.
* ``triton.runtime.jit.JITFunction.run``: a Triton kernel called directly
  (``kernel[grid](...)``) launches without the dispatcher; each launch goes to
  ``record_triton_launch`` with what the kernel's source says it reads and
  writes (``gpu_demo.record.triton_access``); tests call it without Triton.

The wrappers are installed when the first recorder starts and removed when
the last one stops; in between they forward to every recorder inside
``installed``. Triton is imported only if it is installed.
"""

from __future__ import annotations

import sys
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Iterator, Protocol, Sequence

import torch

from gpu_demo.guard.record import generators
from gpu_demo.guard.record.triton_access import KernelAccess, of_kernel


class PatchListener(Protocol):
    """A recorder, as the wrapped methods see it."""

    def on_capture_begin(self, graph: object, pool: object = None) -> None: ...

    def on_capture_end(self, graph: object, error: BaseException | None) -> None: ...

    def on_replay(self, graph: object) -> None: ...

    def on_pool_routing(self, pool: object, begin: bool) -> None: ...

    def resizing(self, storage: torch.UntypedStorage) -> ContextManager[None]: ...

    def on_triton_launch(self, kernel: str, args: Sequence[tuple[str, Any]],
                         access: KernelAccess | None = None) -> None: ...


_listeners_now: list[PatchListener] = []


def _listeners() -> tuple[PatchListener, ...]:
    return tuple(_listeners_now)


def record_triton_launch(kernel: str, args: Sequence[tuple[str, Any]], access: KernelAccess | None = None) -> None:
    """A direct launch of Triton kernel ``kernel`` with ``(parameter name, value)`` pairs;
    ``access``: what its source says it reads and writes (``None``: not known)."""
    for listener in _listeners():
        listener.on_triton_launch(kernel, args, access)


_held_back: list[list[Exception]] = []   # one list per torch.cuda.graph.__exit__ running


def _notify(call: Callable[[PatchListener], None]) -> None:
    """``call`` each listener; inside ``torch.cuda.graph.__exit__`` an error waits for its end."""
    for listener in _listeners():
        try:
            call(listener)
        except Exception as exc:
            if not _held_back:
                raise
            _held_back[-1].append(exc)


# -- the wrappers -----------------------------------------------------------------------

_in_flight_at_begin: dict[int, BaseException | None] = {}


def _capture_begin(original: Callable[..., Any]) -> Callable[..., Any]:
    def capture_begin(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = original(self, *args, **kwargs)
        _in_flight_at_begin[id(self)] = sys.exc_info()[1]
        pool = kwargs.get("pool", args[0] if args else None)   # ``capture_begin(pool=None, ...)``
        _notify(lambda listener: listener.on_capture_begin(self, pool))
        return out
    return capture_begin


def _capture_end(original: Callable[..., Any]) -> Callable[..., Any]:
    def capture_end(self: Any, *args: Any, **kwargs: Any) -> Any:
        in_flight = sys.exc_info()[1]
        block_error = in_flight if in_flight is not _in_flight_at_begin.pop(id(self), None) else None
        try:
            out = original(self, *args, **kwargs)
        except BaseException as exc:
            failed = block_error or exc
            _notify(lambda listener: listener.on_capture_end(self, failed))
            raise
        _notify(lambda listener: listener.on_capture_end(self, block_error))
        return out
    return capture_end


def _graph_exit(original: Callable[..., Any]) -> Callable[..., Any]:
    def __exit__(self: Any, *exc_info: Any) -> Any:
        _held_back.append([])
        try:
            out = original(self, *exc_info)
        finally:
            held = _held_back.pop()
        if held:
            block_error = exc_info[1] if len(exc_info) > 1 else None
            if block_error is None:
                raise held[0]
            for exc in held:  # the block's own error goes on; say what the check found too
                block_error.add_note(str(exc))
        return out
    return __exit__


def _replay(original: Callable[..., Any]) -> Callable[..., Any]:
    def replay(self: Any, *args: Any, **kwargs: Any) -> Any:
        _notify(lambda listener: listener.on_replay(self))
        return original(self, *args, **kwargs)
    return replay


def _pool_routing(begin: bool) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``torch._C._cuda_beginAllocateCurrentThreadToPool`` / ``_cuda_endAllocateToPool``: eager
    allocations routed into a graph's pool (``torch.compile``'s CUDA-graph trees warm up so,
    and ``torch.cuda.use_mem_pool``), so their blocks are booked to that pool, not the default."""
    def wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
        def route(device: Any, pool: Any, *args: Any, **kwargs: Any) -> Any:
            out = original(device, pool, *args, **kwargs)
            _notify(lambda listener: listener.on_pool_routing(pool, begin))
            return out
        return route
    return wrapper


def _storage_resize(original: Callable[..., Any]) -> Callable[..., Any]:
    def resize_(self: torch.UntypedStorage, size: int) -> Any:
        with ExitStack() as stack:
            for listener in _listeners():
                stack.enter_context(listener.resizing(self))
            return original(self, size)
    return resize_


def _triton_run(original: Callable[..., Any]) -> Callable[..., Any]:
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = original(self, *args, **kwargs)
        if not kwargs.get("warmup", False):
            names = list(getattr(self, "arg_names", ()))
            given = [(names[i] if i < len(names) else f"arg{i}", value) for i, value in enumerate(args)]
            given += [(k, v) for k, v in kwargs.items() if k not in ("grid", "warmup")]
            record_triton_launch(getattr(getattr(self, "fn", None), "__name__", repr(self)), given,
                                 of_kernel(self))
        return out
    return run


# -- installing them --------------------------------------------------------------------

@dataclass
class _Patch:
    owner: type
    name: str
    own: Any   # the owner's own attribute before patching (None: it inherited one)

    def restore(self) -> None:
        if self.own is None:
            delattr(self.owner, self.name)
        else:
            setattr(self.owner, self.name, self.own)


def _wrap(owner: type, name: str, wrapper: Callable[[Callable[..., Any]], Callable[..., Any]]) -> _Patch:
    patch = _Patch(owner, name, owner.__dict__.get(name))
    setattr(owner, name, wrapper(getattr(owner, name)))
    return patch


def _targets() -> list[tuple[type, str, Callable[[Callable[..., Any]], Callable[..., Any]]]]:
    graph = torch.cuda.CUDAGraph
    targets = [(graph, "capture_begin", _capture_begin), (graph, "capture_end", _capture_end),
               (graph, "replay", _replay), (torch.cuda.graphs.graph, "__exit__", _graph_exit),
               (torch.UntypedStorage, "resize_", _storage_resize)]
    if hasattr(graph, "register_generator_state"):
        targets.append((graph, "register_generator_state", generators.register_wrapper))
    targets += [(torch._C, name, _pool_routing(begin)) for name, begin in
                (("_cuda_beginAllocateCurrentThreadToPool", True), ("_cuda_beginAllocateToPool", True),
                 ("_cuda_endAllocateToPool", False)) if hasattr(torch._C, name)]
    try:
        from triton.runtime.jit import JITFunction
    except ImportError:  # no Triton (a CPU install): nothing launches through it
        return targets
    return [*targets, (JITFunction, "run", _triton_run)]


_installed: list[_Patch] = []


@contextmanager
def installed(listener: PatchListener) -> Iterator[None]:
    """The wrappers in place and forwarding to ``listener`` while inside."""
    if not _listeners_now:
        _installed.extend(_wrap(*target) for target in _targets())
    _listeners_now.append(listener)
    try:
        yield
    finally:
        _listeners_now.remove(listener)
        if not _listeners_now:
            while _installed:
                _installed.pop().restore()
