"""Kernel launches and the ops built on them: eager runs, graph nodes under capture, host reads.

A launch freezes its arguments on the host when it is issued (``_snapshot``);
under capture the frozen arguments become a graph node that runs only on
replay.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from ...trace import Arg, DeviceSpan, HostSync, Launch, SkippedLaunch
from ..device import KernelFn
from ..errors import ShapeMismatch, StorageNotAllocated, StreamCaptureUnsupported
from ..sites import user_site
from ..stream import NEVER, Stream
from ..tensor import RawArg, TensorHandle
from ..timing import place
from ..values import Call, Const, Expr, Sum, Sym, terms

ArgLike = TensorHandle | RawArg
Scalar = Expr | str | int | float


class KernelCalls:
    """Launching kernels and the torch ops made of them (``op``, ``linear``, ``add``, ...).

    Mixed into ``simlib.engine.runtime.Runtime``, whose state (``trace``, ``streams``, ``_capture``, ...)
    and host clock (``_host``) it uses.
    """

    def sleep(self, duration_us: float, label: str = "sleep") -> Launch | None:
        """``torch.cuda._sleep(cycles)``: a kernel on the current stream that only spins."""
        return self.launch("sleep", label=label, duration_us=duration_us)

    def launch(self, kernel: str, *, reads: Sequence[ArgLike] = (), writes: Sequence[ArgLike] = (),
               fn: KernelFn | None = None, role: str = "other", label: str | None = None,
               duration_us: float | None = None, pdl: bool = False,
               scalars: Mapping[str, Scalar] | None = None, read_list: str = "") -> Launch | None:
        """Launch ``kernel`` on the current stream; returns its record, or None if skipped.

        The host reads every argument's pointer, size and shape *now* and freezes
        them, and so it does with ``scalars``, the non-tensor arguments (a Python
        float, a host int that sizes the kernel): a graph replays the values
        they had at capture. ``fn`` maps the values read to the values written
        (one per entry of ``writes``); by default each output is
        ``kernel(inputs..., scalars...)``, a string scalar being a symbol
        (``"scale@3"``). Like PyTorch, an op whose outputs all have zero
        elements launches nothing, but a raw pointer argument (``raw(t, n)``)
        always launches. ``read_list`` names the one tensor-list argument that
        ``reads`` make up (``torch.stack(tensors)``); "": each is an argument of its own.
        """
        s = self.current_stream
        step = self._host(self.profile.launch_host_us)
        cap = self._check_capture_ok(s, "launching", kernel)
        label = label or kernel
        frozen = tuple((name, _scalar_text(v)) for name, v in scalars.items()) if scalars else ()
        if fn is None:
            fn = _default_fn(kernel, len(writes), tuple(_scalar_value(v) for v in scalars.values()) if scalars else ())
        site = user_site()
        try:
            args = [_snapshot(a, f"{read_list}[{i}]" if read_list else _IN[i], "r", read_list)
                    for i, a in enumerate(reads)]
            args += [_snapshot(a, _OUT[i], "w") for i, a in enumerate(writes)]
        except StorageNotAllocated as exc:
            raise StorageNotAllocated(f"{label}: {exc.detail}") from None
        args = tuple(args)
        if writes and all(type(a) is TensorHandle and a.numel == 0 for a in writes):
            self.trace.records.append(SkippedLaunch(step, self.now, kernel, label, role, s.name,
                                                    cap.graph.id if cap else None,
                                                    "every output has zero elements", args))
            return None
        duration = self.profile.duration(role, kernel) if duration_us is None else duration_us
        if duration < 0:
            raise ValueError(f"duration_us={duration} for {kernel!r} must be >= 0")
        lid = self._next_id("launch")
        if cap is not None:
            record = Launch(step, self.now, lid, kernel, label, role, s.name, args,
                            cap.graph.id, cap.frontier[s.name], pdl, frozen, site)
            cap.frontier[s.name] = (lid,)
            cap.graph.nodes.append(record)
            self._kernels[lid] = (fn, duration)
            self.trace.records.append(record)
            return record
        record = Launch(step, self.now, lid, kernel, label, role, s.name, args, None, (), pdl, frozen, site)
        self.trace.records.append(record)
        self._run_eager(record, s, fn, duration)
        return record

    def _run_eager(self, record: Launch, s: Stream, fn: KernelFn, duration: float) -> None:
        waits = s.waits
        if s.legacy:   # the legacy stream waits for every blocking stream ...
            waits = max([waits] + [o.ready for o in self.streams.values() if o.blocking and o is not s])
        elif s.blocking:  # ... and every blocking stream waits for the legacy stream
            waits = max(waits, self.default_stream.ready)
        p = self.profile
        slot = place(self.now + p.launch_latency_us, duration, s.tail_end, s.tail_start,
                     waits if waits != NEVER else None, p.stream_gap_us, record.pdl, p)
        s.tail_start, s.tail_end, s.waits = slot.start, slot.end, NEVER
        self.trace.records.append(DeviceSpan(record.step, self.now, record.id, s.name,
                                             slot.start, slot.end, "eager"))
        self.device.schedule(record, slot, fn)

    def op(self, kernel: str, *inputs: TensorHandle, out_shape: Sequence[int], role: str = "other",
           label: str | None = None, fn: KernelFn | None = None, duration_us: float | None = None,
           pdl: bool = False, scalars: Mapping[str, Scalar] | None = None) -> TensorHandle:
        """An out-of-place op: allocate the output on the current stream, then launch."""
        out = self.empty(out_shape, label or kernel)
        self.launch(kernel, reads=inputs, writes=[out], fn=fn, role=role, label=label,
                    duration_us=duration_us, pdl=pdl, scalars=scalars)
        return out

    def linear(self, name: str, x: TensorHandle, in_features: int, out_features: int, *,
               role: str = "other", label: str | None = None, fn: KernelFn | None = None,
               out: TensorHandle | None = None) -> TensorHandle:
        """``x @ W.T`` for a weight of shape (out_features, in_features), shape-checked like torch."""
        step_label = label or name
        if not x.shape:
            self._host(self.profile.host_op_us)
            raise ShapeMismatch(
                f"{step_label}: both arguments to linear need to be at least 1D, but they are 0D "
                f"and 2D; input {x.label!r} is a 0-dim tensor. Was it set_ to a scalar "
                "(dispose) before this op?")
        if len(x.shape) != 2 or x.shape[-1] != in_features:
            self._host(self.profile.host_op_us)
            rows = x.shape[0] if len(x.shape) == 2 else 1
            raise ShapeMismatch(
                f"{step_label}: mat1 and mat2 shapes cannot be multiplied "
                f"({rows}x{x.shape[-1] if x.shape else 0} and {in_features}x{out_features}); "
                f"input {x.label!r} has shape {list(x.shape)} but the weight expects "
                f"{in_features} features. Was {x.label!r} emptied (set_/dispose) before this op?")
        fn = fn or (lambda v: Call(name, (v,)))
        if out is None:
            return self.op(name, x, out_shape=(x.shape[0], out_features), role=role,
                           label=step_label, fn=fn)
        self.launch(name, reads=[x], writes=[out], role=role, label=step_label, fn=fn)
        return out

    def add(self, *tensors: TensorHandle, label: str = "add", role: str = "merge",
            pdl: bool = False) -> TensorHandle:
        """``a + b (+ c ...)`` with torch's shape check (no broadcasting modelled)."""
        if len(tensors) < 2:
            raise ValueError(f"{label}: add() needs at least two tensors, got {len(tensors)}")
        a = tensors[0]
        for b in tensors[1:]:
            if a.shape != b.shape:
                self._host(self.profile.host_op_us)
                dim = next((i for i, (p, q) in enumerate(zip(a.shape, b.shape)) if p != q),
                           min(len(a.shape), len(b.shape)))
                p = a.shape[dim] if dim < len(a.shape) else 1
                q = b.shape[dim] if dim < len(b.shape) else 1
                raise ShapeMismatch(
                    f"{label}: the size of tensor a ({p}) must match the size of tensor b ({q}) "
                    f"at dimension {dim}: {a.label!r} is {list(a.shape)}, {b.label!r} is "
                    f"{list(b.shape)}")
        return self.op(label, *tensors, out_shape=a.shape, role=role, label=label,
                       fn=lambda *vals: Sum(tuple(t for v in vals for t in terms(v))), pdl=pdl)

    def copy_(self, dst: TensorHandle, src: TensorHandle) -> TensorHandle:
        """``dst.copy_(src)``: a device copy (how new inputs reach a captured graph)."""
        if dst.numel != src.numel:
            self._host(self.profile.host_op_us)
            raise ShapeMismatch(f"copy_: {dst.label!r} has {dst.numel} elements but "
                                f"{src.label!r} has {src.numel}")
        self.launch("copy_", reads=[src], writes=[dst], fn=lambda v: v, role="copy",
                    label=f"copy {src.label} -> {dst.label}")
        return dst

    def clone(self, t: TensorHandle, label: str | None = None) -> TensorHandle:
        out = self.empty(t.shape, label or f"{t.label}.clone", itemsize=t.itemsize)
        self.launch("clone", reads=[t], writes=[out], fn=lambda v: v, role="copy",
                    label=f"clone {t.label}")
        return out

    def stack(self, tensors: Sequence[TensorHandle], label: str = "stack") -> TensorHandle:
        """``torch.stack(tensors)``: one launch whose tensor-list argument holds every element."""
        if not tensors or any(t.shape != tensors[0].shape for t in tensors):
            self._host(self.profile.host_op_us)
            raise ShapeMismatch(f"{label}: stack expects a non-empty list of tensors of one shape, got "
                                f"{[list(t.shape) for t in tensors]}")
        out = self.empty((len(tensors), *tensors[0].shape), label, itemsize=tensors[0].itemsize)
        self.launch("stack", reads=tensors, writes=[out], fn=lambda *vals: Call("stack", vals), label=label,
                    read_list="tensors")
        return out

    def item(self, t: TensorHandle) -> Expr:
        """``t.item()``: copy to the host and wait, so it is illegal during capture."""
        s = self.current_stream
        step = self._host(self.profile.host_op_us)
        if self._capturing(s) is not None:
            self._fail(StreamCaptureUnsupported(
                f"{t.label!r}.item() reads a device value on the host while stream {s.name!r} is "
                "being captured; the value does not exist until replay. Keep the value on the "
                "device (use a tensor op instead) or read it after replay."))
        self.trace.records.append(HostSync(step, self.now, "item", t.label, s.name))
        self._wait_device(s.ready)
        return self.device.memory.read(t.ptr, t.nbytes)

    def read(self, t: TensorHandle) -> Expr:
        """What ``t`` holds once all device work is done (a test/notebook helper)."""
        self.synchronize()
        return self.device.memory.read(t.ptr, t.nbytes) if t.nbytes else Sym("<empty>")


_IN = [f"in{i}" for i in range(64)]
_OUT = [f"out{i}" for i in range(64)]


def _default_fn(kernel: str, outputs: int, scalars: tuple[Expr, ...] = ()) -> KernelFn:
    """Each output is ``kernel(inputs..., scalars...)``."""
    def fn(*vals: Expr) -> tuple[Expr, ...]:
        value = Call(kernel, vals + scalars)
        return (value,) * outputs
    return fn


def _scalar_value(v: Scalar) -> Expr:
    """A scalar as the value a kernel computes with: a symbol for a string, else itself or a constant."""
    if isinstance(v, Expr):
        return v
    if isinstance(v, str):
        return Sym(v)
    return Const(v)


def _scalar_text(v: Scalar) -> str:
    """A scalar as the trace keeps it (``Launch.scalars``): what the host froze, as text."""
    if isinstance(v, bool) or not isinstance(v, str | int | float | Expr):
        raise TypeError(f"a scalar argument must be a str (a symbol), an int, a float or an Expr, "
                        f"got {type(v).__name__} {v!r}")
    return v if isinstance(v, str) else str(v) if isinstance(v, Expr) else repr(v)


def _snapshot(a: ArgLike, name: str, access: str, element_of: str = "") -> Arg:
    """Freeze an argument the way a kernel launch does: by value, on the host, now.

    A torch op asks for a typed data pointer and refuses a tensor that has
    elements but no storage; a raw pointer argument (``raw``) takes whatever
    ``data_ptr()`` says, 0 included. ``storage_nbytes`` is what the storage
    holds from the pointer on, so an extent past it shows in the trace.
    """
    if type(a) is TensorHandle or isinstance(a, TensorHandle):
        held = a.storage.nbytes
        if not held:
            if a.numel:
                raise StorageNotAllocated(
                    f"{a.label!r} has {a.numel} elements (shape {list(a._shape)}) but its storage "
                    "was freed (untyped_storage().resize_(0)): the tensor has a non-zero number of "
                    "elements, but its data is not allocated yet. Re-allocate it (resize_ the "
                    "storage back) before this op, or free it only after its last use.")
            return Arg(name, a.id, a.label, 0, 0, a._shape, 0, access, 0, element_of)
        itemsize = a.itemsize
        return Arg(name, a.id, a.label, a.storage.ptr + a.offset * itemsize, a.numel, a._shape,
                   a.numel * itemsize, access, held - a.offset * itemsize, element_of)
    if isinstance(a, RawArg):
        t = a.tensor
        held = t.storage.nbytes
        return Arg(name, t.id, t.label, t.ptr, a.numel, (a.numel,), a.numel * t.itemsize, access,
                   held - t.offset * t.itemsize if held else 0)
    raise TypeError(f"kernel arguments must be TensorHandle or raw(...), got {type(a).__name__}")
