"""What the model says about itself while it runs, for whoever is listening.

A kernel launch only shows raw pointers and aten op names. To turn a real run
into a trace a learner can read, the model marks a few things as it goes:

* ``label(tensor, "x")``: the user-level name of a tensor (``x``, ``shared.out``);
* ``role("gate")``: which part of the layer is issuing ops now;
* ``issuing_on("alt")``: the logical stream ops are issued on, which the CPU
  dry run needs because there it has no real stream to look at;
* ``because("dispose_tensor")``: why a host-side mutation happens;
* stream events and host syncs, reported to the listener (the recorder);
* ``launches_with_pdl("ns::op.overload")``: a custom op whose kernel is
  launched with Programmatic Dependent Launch, which the trace marks (``pdl``).

Marking is plain bookkeeping and costs next to nothing when nobody listens.
Only ``gpu_demo.record`` reads it (``gpu_demo.measure.calibration`` reads the roles).
"""

from __future__ import annotations

import weakref
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Iterator, Protocol

import torch

MAIN = "main"
ALT = "alt"

# Ops (``str(OpOverload)``) whose kernels launch with PDL; read when the recorder first meets an op.
PDL_OPS: set[str] = set()


def launches_with_pdl(op: str) -> None:
    """Mark the op ``op`` (e.g. ``"gpu_demo.residual_add.default"``) as launched with PDL; register
    it before the op first runs under a recorder."""
    PDL_OPS.add(op)

# id(tensor) -> (weak reference, name): the recorder asks for every argument of every
# op, and a plain dict checked against the reference is ten times quicker to ask than
# a WeakIdKeyDictionary. An entry goes when its tensor does.
_labels: dict[int, tuple[weakref.ref, str]] = {}


def label(tensor: torch.Tensor, name: str) -> torch.Tensor:
    """Give ``tensor`` (this Python object) a readable name in traces; returns it."""
    key = id(tensor)
    _labels[key] = (weakref.ref(tensor, partial(_forget, key)), name)
    if marks.listener is not None:
        marks.listener.named(tensor, name)
    return tensor


def _forget(key: int, ref: weakref.ref) -> None:
    entry = _labels.get(key)
    if entry is not None and entry[0] is ref:
        del _labels[key]


def label_of(tensor: torch.Tensor) -> str | None:
    """The name ``label`` gave this tensor object, if any."""
    entry = _labels.get(id(tensor))
    return entry[1] if entry is not None and entry[0]() is tensor else None


class Listener(Protocol):
    """Receives what dispatch cannot see: names, stream events and host syncs."""

    def named(self, tensor: torch.Tensor, name: str) -> None: ...

    def stream_event(self, op: str, event: int, stream: str | None) -> None: ...

    def host_sync(self, op: str, what: str) -> None: ...


@dataclass
class _Marks:
    role: str = ""
    stream: str | None = None
    why: str = ""
    listener: Listener | None = None
    profile_roles: bool = False


# The marks in force now. Listeners may read it directly (the recorder does, on every
# op); only the functions below set it.
marks = _Marks()


@contextmanager
def _marking(field: str, value: object) -> Iterator[None]:
    """Set one mark for the ops issued inside, and restore it after."""
    previous = getattr(marks, field)
    setattr(marks, field, value)
    try:
        yield
    finally:
        setattr(marks, field, previous)


@contextmanager
def role(name: str) -> Iterator[None]:
    """Ops issued inside belong to ``name`` (``gate``, ``shared_expert``, ...)."""
    with _marking("role", name):
        if marks.profile_roles:
            with torch.profiler.record_function(name):
                yield
        else:
            yield


def issuing_on(stream: str) -> "AbstractContextManager[None]":
    """Ops issued inside go to the logical stream ``stream`` (``main``/``alt``)."""
    return _marking("stream", stream)


def because(why: str) -> "AbstractContextManager[None]":
    """Host-side mutations inside happen for the reason ``why``."""
    return _marking("why", why)


def listening(listener: Listener) -> "AbstractContextManager[None]":
    """Send stream events and host syncs to ``listener`` while inside."""
    return _marking("listener", listener)


def profiling_roles() -> "AbstractContextManager[None]":
    """Wrap each role in ``torch.profiler.record_function`` (for calibration)."""
    return _marking("profile_roles", True)


def current_stream() -> str:
    """The logical stream marked by ``issuing_on``, else ``main``."""
    return marks.stream or MAIN


def current_why() -> str:
    return marks.why


def stream_event(op: str, event: int, stream: str | None) -> None:
    """Report ``record``/``wait``/``query`` of logical event ``event``."""
    if marks.listener is not None:
        marks.listener.stream_event(op, event, stream)


def host_sync(op: str, what: str) -> None:
    """Report that the host is about to wait for the device (``synchronize``...)."""
    if marks.listener is not None:
        marks.listener.host_sync(op, what)
