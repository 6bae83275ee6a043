"""Programs whose graph froze something the host changes every call: a scalar, a rebuilt input, a re-bound
buffer, weights a sync replaces."""

from __future__ import annotations

from ...engine.runtime import Runtime
from ..harness import Build, Program
from .case import refreshed

T, H = 4, 64       # tokens, hidden: small, every case's buffers are alike


def host_scalar(fixed: bool) -> Build:
    """An all-reduce scaled by a Python float the module changes every call (``scale@k``).

    Fixed: the scale lives in a device tensor that the host fills before every call and replay.
    """
    def build(rt: Runtime) -> Program:
        x, scale = rt.empty((T, H), "x"), rt.empty((1,), "scale")
        host = {"scale": ""}

        def feed(k: int) -> None:
            refreshed(rt, x, "x", k)
            host["scale"] = f"scale@{k}"
            if fixed:
                refreshed(rt, scale, "scale@", k)

        def forward():
            if fixed:
                return rt.op("all_reduce", x, scale, out_shape=(T, H))
            return rt.op("all_reduce", x, out_shape=(T, H), scalars={"scale": host["scale"]})
        return Program(forward, feed, [x, scale] if fixed else [x])
    return build


def input_rebuilt(fixed: bool) -> Build:
    """Positions rebuilt from a host list into a fresh device tensor every call
    (``torch.tensor(pos).pin_memory().to("cuda", non_blocking=True)``).

    Fixed: the host copies them into one static buffer before every call and replay.
    """
    def build(rt: Runtime) -> Program:
        x, positions = rt.empty((T, H), "x"), rt.empty((T,), "positions", itemsize=8)
        host = {"positions": ""}

        def feed(k: int) -> None:
            refreshed(rt, x, "x", k)
            host["positions"] = f"pos@{k}"
            if fixed:
                pinned = rt.from_host((T,), "positions_host", value=host["positions"], itemsize=8, pinned=True)
                positions.copy_(pinned)
                rt.release(pinned)

        def forward():
            pos = positions if fixed else rt.from_host((T,), "positions", value=host["positions"], itemsize=8,
                                                       pinned=True)
            return rt.op("rope", x, pos, out_shape=(T, H))
        return Program(forward, feed, [x, positions] if fixed else [x])
    return build


def buffer_rebound(fixed: bool) -> Build:
    """A module buffer re-bound to a new tensor every call (``self.buf = self.buf.to(dtype,
    copy=True)``): a scale that never changes, as in its twin (vLLM #11596).

    Fixed: the module keeps one buffer and copies the scale into it in place.
    """
    def build(rt: Runtime) -> Program:
        x = rt.empty((T, H), "x")
        source = rt.from_host((T, H), "scale", value="scale")   # converted at load
        module = {"buf": rt.clone(source, label="buf")}

        def forward():
            buf = module["buf"]
            if fixed:                                         # self.buf.copy_(self.source)
                buf.copy_(source)
            else:                                             # self.buf = self.buf.to(..., copy=True)
                module["buf"] = rt.clone(buf, label="buf")
                rt.release(buf)                               # the old one has no reference left
            return rt.op("scale_by_buf", x, module["buf"], out_shape=(T, H))
        return Program(forward, lambda k: refreshed(rt, x, "x", k), [x])
    return build


def weights_synced(fixed: bool) -> Build:
    """A policy whose weights the trainer syncs before every call (RL): the new weights replace the
    module's parameter (``module.weight = nn.Parameter(new)``), and the old one is dropped.

    Fixed: the new weights are copied into the captured parameter in place (``weight.data.copy_(new)``).
    """
    def build(rt: Runtime) -> Program:
        x = rt.empty((T, H), "x")
        mlp = rt.host_object("policy.mlp", weight=rt.from_host((H, H), "weight", value="w0"))

        def feed(k: int) -> None:
            refreshed(rt, x, "x", k)
            new = rt.from_host((H, H), "weight", value=f"w{k}")           # from the trainer
            if fixed:
                mlp.weight.copy_(new)
                rt.release(new)
            else:
                rt.rebind(mlp, "weight", new)
        return Program(lambda: rt.op("linear", x, mlp.weight, out_shape=(T, H)), feed, [x])
    return build
