"""What the recorder does with one op, read from its schema once, and what an op was given.

An ``OpOverload``'s schema says which parameters can hold tensors and which of
them the op writes (an ``out=``, an overwrite such as ``copy_``, or any other
in-place write). ``plan_of`` reads that once per overload into an ``OpPlan``;
the recorder's per-op path then only looks the plan up. The helpers below
pick an op's tensors out of its arguments and its result.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.distributed as dist

from gpu_demo.guard.record import generators
from gpu_demo.guard.record.annotate import PDL_OPS
from gpu_demo.guard.record.dispatch_mode import op_caller
from simlib.trace import GENERATOR, Arg

aten = torch.ops.aten
_Tensor = torch.Tensor

_METADATA_MUTATIONS = {
    aten.set_, aten.resize_, aten.resize_as_, aten.as_strided_, aten.squeeze_,
    aten.unsqueeze_, aten.transpose_, aten.t_, aten.swapdims_, aten.swapaxes_, aten.detach_,
}
_NO_LAUNCH = {aten.empty, aten.empty_like, aten.empty_strided, aten.new_empty, aten.new_empty_strided}
_OVERWRITES = {aten.copy_, aten.fill_, aten.zero_, aten.normal_, aten.uniform_, aten.random_}
# Ops that copy one tensor's data into another, possibly across devices (``copy_role``).
_COPIES = {aten.copy_, aten._to_copy}
H2D = "h2d"   # the ``Launch.role`` of a copy from host memory into device memory
# ``torch.distributed`` collectives reach the dispatcher as ``c10d`` ops whose schemas mark no
# write: the parameters each one writes, by name (``rw``: reduced in place; ``w``: filled).
COLLECTIVE_NAMESPACE = "c10d"
_COLLECTIVE_WRITES: dict[str, dict[str, str]] = {
    "allreduce_": {"tensors": "rw"}, "allreduce_coalesced_": {"tensors": "rw"},
    "broadcast_": {"tensors": "rw"}, "reduce_": {"tensors": "rw"}, "recv_": {"tensors": "w"},
    "recv_any_source_": {"tensors": "w"}, "allgather_": {"output_tensors": "w"},
    "allgather_coalesced_": {"output_lists": "w"}, "allgather_into_tensor_coalesced_": {"outputs": "w"},
    "_allgather_base_": {"output_tensor": "w"}, "reduce_scatter_": {"output_tensors": "w"},
    "reduce_scatter_tensor_coalesced_": {"outputs": "w"}, "_reduce_scatter_base_": {"output_tensor": "w"},
    "alltoall_": {"output_tensors": "w"}, "alltoall_base_": {"output": "w"}, "gather_": {"output_tensors": "w"},
    "scatter_": {"output_tensors": "w"}, "send": {}, "barrier": {}, "monitored_barrier_": {},
}

# What the recorder does with an op, decided once per OpOverload (``OpPlan``).
MUTATE, VIEW, ITEM, NO_LAUNCH, LAUNCH = "mutate", "view", "item", "no_launch", "launch"
# Schema types that never hold a tensor; a parameter of any other type is looked into.
_NO_TENSOR_TYPE = re.compile(
    r"(?:Optional|List|Device|Generator|bool|complex|float|int|SymInt|number|str|Storage|AnyEnumType"
    r"|ScalarType|Layout|MemoryFormat|[\[\], ])+")


@dataclass(frozen=True, slots=True)
class OpPlan:
    """What the recorder does with one ``OpOverload``, read from its schema once.

    ``params`` are the parameters that can hold tensors: ``(position, name,
    access)``, access ``r``, ``w`` (an ``out=`` or an overwrite such as
    ``copy_``) or ``rw`` (any other in-place write). ``call`` runs the op
    (``dispatch_mode.op_caller``). ``op`` is the overload itself, held so that its
    ``id`` (the key in ``PLANS``) stays its own. ``names`` are every parameter's
    name in schema order (a non-tensor argument is frozen under it, ``scalars_of``);
    ``copies``: the op copies data between tensors (``copy_role``); ``writes``: it
    writes a tensor it is given; ``outs``: the parameters it writes its results into,
    which it may resize to fit.
    """

    op: Any
    action: str
    call: Callable[..., Any]
    kernel: str
    opname: str
    params: tuple[tuple[int, str, str], ...]
    pdl: bool
    names: tuple[str, ...] = ()
    copies: bool = False
    writes: bool = False   # some tensor parameter is written (``out=`` or in place)
    outs: frozenset[str] = frozenset()   # its ``out=`` parameters (``out``, ``values``, ``indices``, ...)
    collective: bool = False   # a ``c10d`` collective: its launch carries ``collective_scalars``
    lists: bool = False        # some tensor parameter is a list (``Tensor[]``): its elements' ``Arg.element_of``


# id(OpOverload) -> its plan, filled by ``plan_of`` on first use. Keyed by id: an
# ``OpOverload`` hashes in Python (``OpOverload.__hash__``), a frame on every op.
PLANS: dict[int, OpPlan] = {}


def plan_of(func: torch._ops.OpOverload) -> OpPlan:
    packet = func.overloadpacket
    if packet in _METADATA_MUTATIONS:
        action = MUTATE
    elif func.is_view:
        action = VIEW
    elif packet is aten._local_scalar_dense:
        action = ITEM
    elif packet in _NO_LAUNCH or packet is aten.detach:
        action = NO_LAUNCH
    else:
        action = LAUNCH
    collective = _COLLECTIVE_WRITES.get(func._opname) if func.namespace == COLLECTIVE_NAMESPACE else None
    params = []
    for i, spec in enumerate(func._schema.arguments):
        if _NO_TENSOR_TYPE.fullmatch(str(spec.type)) or str(spec.type).startswith("__torch__"):
            continue
        writes = spec.alias_info is not None and spec.alias_info.is_write
        access = ("w" if spec.name == "out" or packet in _OVERWRITES else "rw") if writes else "r"
        if collective is not None:
            access = collective.get(spec.name, "r")
        params.append((i, spec.name, access))
    kernel = str(func)
    names = tuple(spec.name for spec in func._schema.arguments)
    plan = PLANS[id(func)] = OpPlan(func, action, op_caller(func), kernel, func._opname, tuple(params),
                                      kernel in PDL_OPS, names, packet in _COPIES,
                                      any(access != "r" for _, _, access in params),
                                      frozenset(spec.name for spec in func._schema.arguments if spec.is_out),
                                      collective is not None,
                                      any("List" in str(func._schema.arguments[i].type) for i, _, _ in params))
    return plan


_NUMBER = (int, float, bool)


def frozen_scalar(value: Any) -> str | None:
    """``repr`` of a host number (or a list of them, a size) a launch freezes; ``None`` otherwise."""
    if type(value) in _NUMBER:
        return repr(value)
    if type(value) in (list, tuple) and value and all(type(v) in _NUMBER for v in value):
        return repr(list(value))
    return None


def scalars_of(names: tuple[str, ...], args: tuple, kwargs: dict) -> tuple[tuple[str, str], ...]:
    """``(name, repr)`` of each host number an op was given (``Launch.scalars``): a graph
    replays these values as the capture froze them, whatever the host passes later."""
    found = []
    for name, value in zip(names, args):
        if type(value) is _Tensor:   # most arguments: no call for them
            continue
        frozen = frozen_scalar(value)
        if frozen is not None:
            found.append((name, frozen))
    for name, value in kwargs.items():
        frozen = frozen_scalar(value)
        if frozen is not None:
            found.append((name, frozen))
        elif type(value) is torch.Generator:   # a random op's: the graph advances it, or replays its draw
            found.append((GENERATOR, generators.name_of(value)))
    return tuple(found)


def copy_role(sources: list[torch.Tensor], results: list[torch.Tensor]) -> str:
    """``H2D`` for a copy from host memory into device memory, else ``""``: the graph
    replays the copy from the host buffer the capture saw (``Launch.role``)."""
    from_host = any(not t.is_cuda for t in sources)
    return H2D if from_host and any(t.is_cuda for t in results) else ""


def collective_scalars(plan: OpPlan, args: tuple, kwargs: dict) -> tuple[tuple[str, str], ...]:
    """A collective's non-tensor arguments as the host froze them: its group (name, backend,
    member ranks), reduce op, roots and flags, and its buffers' dtype. The ranks of one group
    must issue the same sequence of these (``simlib.checker.rule_cross_rank``)."""
    found: list[tuple[str, str]] = []
    count = len(args)
    for position, spec in enumerate(plan.op._schema.arguments):
        value = args[position] if position < count else kwargs.get(spec.name, spec.default_value)
        kind = str(spec.type)
        if kind.endswith("c10d.ProcessGroup"):
            group = dist.ProcessGroup.unbox(value)
            ranks = dist.get_process_group_ranks(group)
            found += [("group", group.group_desc or group.group_name), ("group_ranks", ",".join(map(str, ranks))),
                      ("backend", str(dist.get_backend(group)))]
        elif kind.endswith("c10d.ReduceOp"):
            found.append(("reduce_op", dist.ReduceOp.RedOpType(value.op()).name))
        elif "Tensor" not in kind and spec.name != "timeout":
            found.append((spec.name, repr(value)))
    dtypes = sorted({str(t.dtype).removeprefix("torch.") for _, t, _ in tensors_of(plan, args, kwargs)})
    return (*found, ("dtype", ",".join(dtypes)))


def tensors_of(plan: OpPlan, args: tuple, kwargs: dict) -> list[tuple[str, torch.Tensor, str]]:
    """``(name, tensor, access)`` for each tensor an op was given, in schema order."""
    found = []
    count = len(args)
    for position, name, access in plan.params:
        value = args[position] if position < count else kwargs.get(name)
        if isinstance(value, _Tensor):
            found.append((name, value, access))
        elif isinstance(value, (list, tuple)):
            found += [(f"{name}[{j}]", t, access) for j, t in enumerate(value) if isinstance(t, _Tensor)]
            found += [(f"{name}[{j}][{k}]", t, access) for j, inner in enumerate(value)   # ``Tensor[][]``
                      if isinstance(inner, (list, tuple)) for k, t in enumerate(inner) if isinstance(t, _Tensor)]
    return found


def made_by(out: Any, given: list[tuple[str, torch.Tensor, str]]) -> list[torch.Tensor]:
    """The tensors in an op's result that it was not given (its new outputs)."""
    if isinstance(out, torch.Tensor):
        for _, t, _ in given:
            if t is out:
                return []
        return [out]
    given_ids = {id(t) for _, t, _ in given}
    return [t for t in tensors_in(out) if id(t) not in given_ids]


def tensors_in(out: Any) -> list[torch.Tensor]:
    """The tensors in an op's result: a tensor, or a tuple or list of them (nested)
    (``tree_flatten`` would leave a reference cycle behind on every call)."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for item in out for t in tensors_in(item)]
    return []


def tensor_behind(value: Any) -> torch.Tensor | None:
    """The tensor a Triton argument passes: itself, or a tensor descriptor's ``base``."""
    if isinstance(value, torch.Tensor):
        return value
    base = getattr(value, "base", None)
    return base if isinstance(base, torch.Tensor) else None


def writes_only_empty(args: tuple[Arg, ...]) -> bool:
    """True when the op writes something and everything it writes has zero elements
    (PyTorch launches no kernel for it)."""
    writes = False
    for a in args:
        if a.access != "r":
            if a.numel:
                return False
            writes = True
    return writes
