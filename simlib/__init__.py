"""simlib: a pure-Python model of CUDA graph capture, as PyTorch drives it.

Start with ``Runtime`` (the host thread and CUDA runtime a program calls) and
``Trace`` (the plain-data record of everything that happened, which the
checker, the plots and the exporters read).
"""

from .engine.errors import (
                     CapturedEvent,
                     CaptureError,
                     IllegalAddress,
                     ShapeMismatch,
                     SimulatedError,
                     StreamCaptureImplicit,
                     StreamCaptureInvalidated,
                     StreamCaptureIsolation,
                     StreamCaptureUnjoined,
                     StreamCaptureUnsupported,
)
from .engine.graph import CapturedGraph
from .engine.runtime import Runtime
from .engine.stream import Event, Stream
from .engine.tensor import RawArg, TensorHandle, raw
from .engine.timing import Profile
from .engine.values import Call, Const, Expr, Garbage, Sum, Sym, call
from .trace import Trace

__all__ = [
    "Runtime", "Trace", "Profile", "Stream", "Event", "TensorHandle", "RawArg", "raw",
    "CapturedGraph", "Expr", "Sym", "Const", "Call", "Sum", "Garbage", "call",
    "SimulatedError", "CaptureError", "StreamCaptureUnsupported", "StreamCaptureInvalidated",
    "StreamCaptureUnjoined", "StreamCaptureIsolation", "StreamCaptureImplicit", "CapturedEvent",
    "ShapeMismatch", "IllegalAddress",
]
