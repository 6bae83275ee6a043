"""Turning what a GPU run did into ``simlib.glossary``'s outcome vocabulary.

PyTorch reports CUDA failures as ``RuntimeError("CUDA error: <text> ...")``
and usually names the enum too ("Search for `cudaErrorXxx' ..."). The
outcome classes need the enum name, so this module reads it from the message,
or from the CUDA error text when the enum is not given. Host-side shape checks
(before any launch) become ``shape_mismatch``.

A failed capture often raises twice: the first error inside the captured code,
then another when ``torch.cuda.graph`` ends the capture on the way out (a fork
left unjoined, say). Python chains them; ``first_error`` finds the first.
"""

from __future__ import annotations

import re

from simlib.engine.errors import StorageNotAllocated
from simlib.glossary import ILLEGAL_ADDRESS, SHAPE_MISMATCH, capture_error

_ENUM_IN_MESSAGE = re.compile(r"\b(cudaError[A-Za-z]+)\b")

# cudaGetErrorString texts (or distinctive parts of them) -> enum names.
CUDA_ERROR_TEXTS: dict[str, str] = {
    "operation not permitted when stream is capturing": "cudaErrorStreamCaptureUnsupported",
    "operation failed due to a previous error during capture": "cudaErrorStreamCaptureInvalidated",
    "merge of separate capture sequences": "cudaErrorStreamCaptureMerge",
    "capture was not initiated in this stream": "cudaErrorStreamCaptureUnmatched",
    "fork that was not joined": "cudaErrorStreamCaptureUnjoined",
    "dependency created on uncaptured work": "cudaErrorStreamCaptureIsolation",
    "legacy stream depend on a capturing blocking stream": "cudaErrorStreamCaptureImplicit",
    "event last recorded in a capturing stream": "cudaErrorCapturedEvent",
    "thread-local capture sequence from another thread": "cudaErrorStreamCaptureWrongThread",
    "illegal memory access": "cudaErrorIllegalAddress",
}
# PyTorch's own refusals while a stream captures (its texts, lower case) -> the name a capture error gets.
TORCH_CAPTURE_TEXTS: dict[str, str] = {
    # a random op of PyTorch's drew from a generator not registered with the graph (CUDAGeneratorState::increase)
    "increase offset for a cuda generator not in capture mode": "generator_not_in_capture",
    # the host set a generator's state during capture, and no graph had registered it
    "during cuda graph capture without a registered capture state": "generator_not_in_capture",
}
SHAPE_ERROR_TEXTS = ("size mismatch", "must match the size", "shapes cannot be multiplied",
                     "need to be at least 1D")
NO_DATA_TEXT = "data is not allocated yet"   # c10::TensorImpl: storage freed, shape kept


def first_error(exc: BaseException) -> BaseException:
    """The earliest exception in the implicit chain (``__context__``) of ``exc``."""
    seen = {id(exc)}
    while exc.__context__ is not None and id(exc.__context__) not in seen:
        exc = exc.__context__
        seen.add(id(exc))
    return exc


def cuda_error_name(message: str) -> str | None:
    """The ``cudaError...`` enum a PyTorch error message reports, if any."""
    found = _ENUM_IN_MESSAGE.search(message)
    if found:
        return found.group(1)
    return _named_by(CUDA_ERROR_TEXTS, message)


def _named_by(texts: dict[str, str], message: str) -> str | None:
    """The name of the first of ``texts`` (lower case) that ``message`` contains, if any."""
    lowered = message.lower()
    return next((name for text, name in texts.items() if text in lowered), None)


def is_illegal_address(exc: BaseException) -> bool:
    return cuda_error_name(str(exc)) == "cudaErrorIllegalAddress"


def classify_capture_failure(exc: BaseException) -> str:
    """``capture_error:<enum>``, ``capture_error:shape_mismatch``, a PyTorch refusal's name
    (``TORCH_CAPTURE_TEXTS``) or, for an error that names none, ``capture_error:<exception type>``."""
    message = str(exc)
    if any(text in message for text in SHAPE_ERROR_TEXTS):
        return capture_error(SHAPE_MISMATCH)
    if NO_DATA_TEXT in message:
        return capture_error(StorageNotAllocated.code)
    name = cuda_error_name(message)
    if name == "cudaErrorIllegalAddress":
        return ILLEGAL_ADDRESS
    name = name or _named_by(TORCH_CAPTURE_TEXTS, message)
    return capture_error(name or type(exc).__name__)


def one_line(exc: BaseException, limit: int = 300) -> str:
    """The first line of an exception's message, for tables."""
    text = str(exc).strip().splitlines()
    line = text[0] if text else type(exc).__name__
    return line if len(line) <= limit else line[: limit - 3] + "..."
