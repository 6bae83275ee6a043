"""The trace: one plain-data record of everything a program did, simulated or real.

This module is the contract between the producers (the simulator engine and
gpu_demo's recorder of real PyTorch runs) and the consumers (the hazard
checker, the plots and the Perfetto export). It holds dataclasses only, so a
trace is JSON-serialisable and the consumers never need the engine's objects.

Vocabulary
----------
step
    Position in *host program order*: every record the host thread produces
    gets the next step number. Device spans carry the step of the launch (or
    replay) that caused them.
t_us
    Host clock in microseconds when the record happened.
Launch
    A kernel launch: the host read each argument's pointer, element count and
    shape *at launch time* and froze them into ``args``. A launch made while
    a stream is being captured is a graph node (``graph`` is set, ``deps``
    lists the nodes it waits for) and does not run until the graph replays.
Mutation
    A host-side change of a tensor's metadata (``set_``, ``resize_``): no
    kernel runs, but every later launch reads the new pointer.
HostRead
    The host read a tensor's metadata (``x.shape``, ``x.numel()``) during a
    capture: no kernel runs, but host code may branch on what it saw, so a
    ``set_`` before it changes what is captured even when no kernel follows.
View
    A new tensor handle on an existing handle's storage (``t.view``, slicing).
    It takes the base's metadata *as it is then*, so a ``set_`` of the base
    before the view reaches the view's launches too.
Rebind
    An owner's attribute (a module's parameter or buffer, an attribute of an
    object captured code used) now names another tensor: no kernel runs, but a
    graph captured before keeps the old tensor's address.
HostState
    A host int or flag on an object the captured code reached changed during a
    capture: replays keep what the capture left and whatever branch host code
    took on it.
DeviceSpan
    When a launch (eager) or a graph node (replay) occupied a stream.

Records are plain data: treat them as immutable. They are hashable by value
but not ``frozen`` (frozen dataclasses are about five times slower to build,
and a long trace holds hundreds of thousands of them).

Records appear in the order they were produced. Stream names are plain
strings (``"default"`` is the legacy default stream).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar, Iterator, TypeVar

TRACE_VERSION = 1

# A random launch names the generator it draws from as a scalar (``Launch.scalars``):
# ``(GENERATOR, name)``; the default CUDA generator, which every graph advances, is this one.
GENERATOR = "generator"
DEFAULT_GENERATOR = "default"

TensorId = int
LaunchId = int
GraphId = int
EventId = int
DataPtr = int
StreamName = str


@dataclass(slots=True, unsafe_hash=True)
class Arg:
    """One kernel argument as the host froze it at launch time."""

    name: str
    tensor: TensorId
    label: str
    ptr: DataPtr
    numel: int
    shape: tuple[int, ...]
    # The byte span the kernel can touch from ``ptr``: 0 for no elements, else for a
    # strided view ``(1 + sum((size_i - 1) * stride_i)) * itemsize`` (an expanded, stride-0
    # view spans less than numel * itemsize); for a raw kernel, its declared size.
    nbytes: int
    access: str  # "r", "w" or "rw"
    # Bytes of the storage from ``ptr`` to its end, as the host saw it at launch
    # (None: not known). ``nbytes`` larger than this reads or writes past the storage.
    storage_nbytes: int | None = None
    # The tensor-list argument (``torch.stack(tensors)``) this tensor is an element of;
    # "" for a tensor argument of its own.
    element_of: str = ""

    @property
    def reads(self) -> bool:
        return "r" in self.access

    @property
    def writes(self) -> bool:
        return "w" in self.access


@dataclass(slots=True, unsafe_hash=True)
class Record:
    """Base of every trace record: where in host order, and when."""

    kind: ClassVar[str] = "record"
    step: int
    t_us: float


@dataclass(slots=True, unsafe_hash=True)
class Alloc(Record):
    """A storage got a device block (from the default pool or a graph's pool)."""

    kind: ClassVar[str] = "alloc"
    tensor: TensorId
    label: str
    ptr: DataPtr
    nbytes: int
    stream: StreamName
    pool: str


@dataclass(slots=True, unsafe_hash=True)
class Free(Record):
    """A storage's last reference went; its block returned to ``pool``."""

    kind: ClassVar[str] = "free"
    label: str
    ptr: DataPtr
    nbytes: int
    stream: StreamName
    pool: str
    graph: GraphId | None


@dataclass(slots=True, unsafe_hash=True)
class Mutation(Record):
    """Host-side metadata change of a tensor handle (``set_``, ``resize_``)."""

    kind: ClassVar[str] = "mutation"
    op: str
    tensor: TensorId
    label: str
    old_ptr: DataPtr
    old_numel: int
    old_shape: tuple[int, ...]
    new_ptr: DataPtr
    new_numel: int
    new_shape: tuple[int, ...]
    graph: GraphId | None
    why: str = ""
    site: str = ""      # where the host changed it ("file:line" of the user's line; "" not known)


@dataclass(slots=True, unsafe_hash=True)
class View(Record):
    """A new handle ``tensor`` on the storage of handle ``base`` (no kernel runs)."""

    kind: ClassVar[str] = "view"
    tensor: TensorId
    label: str
    base: TensorId
    ptr: DataPtr
    numel: int
    shape: tuple[int, ...]
    graph: GraphId | None


@dataclass(slots=True, unsafe_hash=True)
class HostRead(Record):
    """The host read ``tensor``'s metadata (``op``: ``shape``, ``numel``, ...); no kernel runs."""

    kind: ClassVar[str] = "host_read"
    op: str
    tensor: TensorId
    label: str
    shape: tuple[int, ...]
    stream: StreamName
    graph: GraphId | None


@dataclass(slots=True, unsafe_hash=True)
class Launch(Record):
    """A kernel launch with its arguments frozen on the host."""

    kind: ClassVar[str] = "launch"
    id: LaunchId
    kernel: str
    label: str
    role: str
    stream: StreamName
    args: tuple[Arg, ...]
    graph: GraphId | None
    deps: tuple[LaunchId, ...] = ()
    pdl: bool = False
    # The launch's non-tensor arguments as the host froze them: (name, repr) pairs
    # (a Python float, a host int that sizes or slices; a random op's ``(GENERATOR, name)``).
    # A graph replays these values.
    scalars: tuple[tuple[str, str], ...] = ()
    # Where the host issued it: "file:line" of the innermost user frame ("" unknown).
    # Launches of one call site line up across calls (the frozen-value rules).
    site: str = ""


@dataclass(slots=True, unsafe_hash=True)
class SkippedLaunch(Record):
    """An op the host did not launch (zero elements, like PyTorch)."""

    kind: ClassVar[str] = "skipped_launch"
    kernel: str
    label: str
    role: str
    stream: StreamName
    graph: GraphId | None
    reason: str
    args: tuple[Arg, ...] = ()


@dataclass(slots=True, unsafe_hash=True)
class EventOp(Record):
    """``record``, ``wait``, ``query`` or ``synchronize`` on an event."""

    kind: ClassVar[str] = "event"
    op: str
    event: EventId
    stream: StreamName | None
    graph: GraphId | None
    deps: tuple[LaunchId, ...] = ()


@dataclass(slots=True, unsafe_hash=True)
class HostSync(Record):
    """The host waited for the device (``synchronize``, ``.item()``)."""

    kind: ClassVar[str] = "host_sync"
    op: str
    label: str
    stream: StreamName | None


@dataclass(slots=True, unsafe_hash=True)
class Call(Record):
    """One call of the code under check began or ended: a warm-up call, the capture's
    call, or an eager call the whole-process mode saw. Launches between a ``begin`` and
    its ``end`` belong to call ``index``; the rules compare calls op by op."""

    kind: ClassVar[str] = "call"
    op: str  # "begin" | "end"
    index: int
    phase: str  # "warmup" | "capture" | "eager"


@dataclass(slots=True, unsafe_hash=True)
class Capture(Record):
    """Capture of a graph began or ended on ``stream``."""

    kind: ClassVar[str] = "capture"
    op: str  # "begin" | "end"
    graph: GraphId
    stream: StreamName
    inputs: tuple[DataPtr, ...] = ()
    error: str | None = None
    # The memory pool the capture allocates from: "" is the graph's own private pool
    # (``simlib.memory.graph_pool(graph)``); another graph's pool name when it was
    # captured into that pool (``torch.cuda.graph(g2, pool=g1.pool())``).
    pool: str = ""
    # The generators registered with the graph (``graph.register_generator_state``), which
    # every replay advances; the default CUDA generator is always advanced.
    generators: tuple[str, ...] = ()
    site: str = ""      # the user's line that began or ended it ("file:line"; "" not known)


@dataclass(slots=True, unsafe_hash=True)
class Replay(Record):
    """The host launched a captured graph."""

    kind: ClassVar[str] = "replay"
    graph: GraphId
    index: int
    stream: StreamName
    site: str = ""      # the user's line that replayed it ("file:line"; "" not known)


@dataclass(slots=True, unsafe_hash=True)
class Rebind(Record):
    """``owner.attr`` now names tensor ``new_tensor`` instead of ``old_tensor`` (no kernel runs).

    Written before the attribute changes, so before the free of the old tensor it may cause
    (``nn.Module.__setattr__``, ``register_parameter``, ``register_buffer``, a plain attribute).
    """

    kind: ClassVar[str] = "rebind"
    owner: str
    attr: str
    old_tensor: TensorId
    old_ptr: DataPtr
    old_nbytes: int
    new_tensor: TensorId
    new_ptr: DataPtr
    new_nbytes: int
    label: str          # the old tensor's label, as the launches that used it name it


@dataclass(slots=True, unsafe_hash=True)
class HostState(Record):
    """During graph ``graph``'s capture, host value ``owner.attr`` (an int or a bool) went from
    ``before`` to ``after``: written when the capture ends, before its ``Capture`` end record."""

    kind: ClassVar[str] = "host_state"
    graph: GraphId
    owner: str
    attr: str
    before: str
    after: str
    site: str = ""      # where the host changed it ("file:line"; "" not known)


@dataclass(slots=True, unsafe_hash=True)
class DeviceSpan(Record):
    """A launch (eager) or graph node (replay) running on a stream."""

    kind: ClassVar[str] = "device_span"
    launch: LaunchId
    stream: StreamName
    start_us: float
    end_us: float
    phase: str  # "eager" | "replay"
    replay: int | None = None


@dataclass(slots=True, unsafe_hash=True)
class Fault(Record):
    """The device faulted (sticky: the context is unusable afterwards)."""

    kind: ClassVar[str] = "fault"
    error: str
    launch: LaunchId | None
    detail: str


RECORD_TYPES: dict[str, type[Record]] = {
    cls.kind: cls
    for cls in (Alloc, Free, Mutation, View, HostRead, Launch, SkippedLaunch, EventOp, HostSync,
                Call, Capture, Replay, Rebind, HostState, DeviceSpan, Fault)
}

R = TypeVar("R", bound=Record)


@dataclass
class Trace:
    """An ordered list of records plus free-form metadata (provenance)."""

    records: list[Record] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    version: int = TRACE_VERSION

    def of(self, kind: type[R]) -> Iterator[R]:
        """Records of one type, in order."""
        return (r for r in self.records if type(r) is kind)

    def launches(self, graph: GraphId | None = None) -> list[Launch]:
        """Eager launches (graph=None) or the nodes of one captured graph."""
        return [r for r in self.of(Launch) if r.graph == graph]

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "meta": self.meta,
            "records": [{"kind": r.kind, **asdict(r)} for r in self.records],
        }

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Trace":
        version = data.get("version")
        if version != TRACE_VERSION:
            raise ValueError(
                f"trace version {version!r} is not supported; this simlib reads "
                f"version {TRACE_VERSION}. Re-record the trace with this version."
            )
        records = [_record_from_dict(r) for r in data.get("records", [])]
        return cls(records=records, meta=dict(data.get("meta", {})), version=version)

    @classmethod
    def from_json(cls, text: str) -> "Trace":
        return cls.from_dict(json.loads(text))


def _record_from_dict(data: dict[str, Any]) -> Record:
    kind = data.get("kind")
    if kind not in RECORD_TYPES:
        raise ValueError(
            f"unknown trace record kind {kind!r}; expected one of {sorted(RECORD_TYPES)}"
        )
    cls = RECORD_TYPES[kind]
    values = {}
    for f in fields(cls):
        if f.name not in data:
            continue
        value = data[f.name]
        if f.name == "args":
            value = tuple(Arg(**{**a, "shape": tuple(a["shape"])}) for a in value)
        elif f.name == "scalars":
            value = tuple(tuple(pair) for pair in value)
        elif isinstance(value, list):
            value = tuple(value)
        values[f.name] = value
    try:
        return cls(**values)
    except TypeError as exc:
        raise ValueError(f"malformed {kind!r} record {data!r}: {exc}") from None
