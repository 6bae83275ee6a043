"""Errors the simulated program can hit, each named after what it models.

CUDA reports capture mistakes as ``cudaError_t`` codes; PyTorch turns them into
``RuntimeError("CUDA error: ...")``. Here each is its own exception class with
the CUDA enum name in ``code`` (what the outcome classes use) and a message
that says what the program did and how to fix it.
"""

from __future__ import annotations


class SimulatedError(Exception):
    """Base of every error a simulated program can raise."""

    code: str = "simulated_error"

    def __init__(self, message: str) -> None:
        super().__init__(f"{self.code}: {message}")
        self.detail = message


class CaptureError(SimulatedError):
    """A mistake the CUDA runtime reports while a stream is being captured."""


class StreamCaptureUnsupported(CaptureError):
    """An operation that is illegal while capturing (sync, host read, ...)."""

    code = "cudaErrorStreamCaptureUnsupported"


class StreamCaptureInvalidated(CaptureError):
    """The capture already failed; every later captured operation fails too.

    It is also what the user sees when a capture fails inside ``with
    torch.cuda.graph(...)``: ``__exit__`` calls ``capture_end``, which raises this
    error while Python handles the first one, so the first error (``Unsupported``,
    ``Isolation``, ...) is its ``__context__``: the cause, printed above it.
    """

    code = "cudaErrorStreamCaptureInvalidated"


class StreamCaptureUnjoined(CaptureError):
    """Capture ended while a forked stream had not joined back to the origin."""

    code = "cudaErrorStreamCaptureUnjoined"


class StreamCaptureIsolation(CaptureError):
    """A captured stream tried to depend on work outside the capture."""

    code = "cudaErrorStreamCaptureIsolation"


class StreamCaptureImplicit(CaptureError):
    """The legacy default stream would implicitly depend on a capturing stream."""

    code = "cudaErrorStreamCaptureImplicit"


class CapturedEvent(CaptureError):
    """``query``/``synchronize``/``wait`` on an event last recorded in a capture."""

    code = "cudaErrorCapturedEvent"


def first_error(exc: BaseException) -> BaseException:
    """The earliest simulated error in ``exc``'s implicit chain (``__context__``): the cause of
    a ``StreamCaptureInvalidated`` that ``capture_end`` raised over it."""
    seen = {id(exc)}
    while isinstance(exc.__context__, SimulatedError) and id(exc.__context__) not in seen:
        exc = exc.__context__
        seen.add(id(exc))
    return exc


class ShapeMismatch(SimulatedError, ValueError):
    """A host-side shape check failed before any kernel launched (like torch's)."""

    code = "shape_mismatch"


class StorageNotAllocated(SimulatedError, RuntimeError):
    """A torch op was given a tensor whose storage was freed while it kept its shape.

    ``x.untyped_storage().resize_(0)`` (FSDP's way to free a parameter) leaves
    ``x`` with its elements but no data; an op that asks for a typed data
    pointer refuses it on the host ("The tensor has a non-zero number of
    elements, but its data is not allocated yet", ``c10::TensorImpl``).
    """

    code = "storage_not_allocated"


class IllegalAddress(SimulatedError):
    """The device touched an address it does not own (pointer 0 with a size).

    Sticky, like the real fault: once raised, every later call on the same
    runtime raises it again, because the CUDA context is unusable.
    """

    code = "cudaErrorIllegalAddress"
