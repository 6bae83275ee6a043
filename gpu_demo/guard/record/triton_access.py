"""Which pointer arguments a Triton kernel reads and which it writes, read off its source.

A Triton launch passes tensors as bare pointers and declares nothing about
them, so the recorder would have to take every tensor argument as read and
written: two kernels that only read the same tensor on two streams would look
like a race (checker rule 3). The kernel's source says more. A parameter is
written when a pointer derived from it reaches the pointer operand of

* ``tl.store`` (``w``) or ``tl.atomic_*`` (``rw``: an atomic reads too),
* ``desc.store(...)`` / ``desc.atomic_*(...)`` on a block pointer or tensor
  descriptor made from it, or the ``tl._experimental_descriptor_store`` form,

and read when one reaches ``tl.load`` (``desc.load``). "Derived" follows every
assignment in the body (``p = out_ptr + offs``, ``bp = tl.make_block_ptr(p,
...)``, ``p += BLOCK``, tuple targets taking all of the right-hand side) to a
fixpoint, order and branches ignored, so it over-approximates: never a write
missed, sometimes one too many. A loaded value is data, not a pointer (an index
loaded from ``idx_ptr`` and added to ``out_ptr`` does not make ``idx_ptr``
written); a block pointer or descriptor points into its ``base`` only (not its
shape or strides); a ``tl.constexpr`` parameter is never a pointer. A pointer
handed to a function that is neither ``triton.language``'s nor one of the
builtins Triton allows (a ``@triton.jit`` helper) may be written there: its
parameter is ``rw``. A parameter none of this touches is ``r``.

How far a kernel reaches through a pointer is read off the same source where
it can be bounded: when every load and store through parameter ``p`` is at
``p + offs`` (directly, or through a name assigned that once) under
``mask=offs < n`` (or a mask assigned that once) with ``n`` a size parameter (not a ``tl.constexpr``), the
kernel touches at most the first ``n`` elements behind ``p``, the grid
assumed to cover the mask (``triton.cdiv(n, BLOCK)`` programs), and
``KernelAccess.extents[p]`` is ``n``: the recorder then freezes ``p``'s extent as
``n`` elements, and checker rule 6 compares it with the storage. Any other use
(another mask, a loop, a block pointer) leaves ``p``'s extent the tensor's own
size, as the recorder cannot know it.

Source that does not parse, or whose parameters are not the kernel's, leaves
every argument ``rw`` and says why (``KernelAccess.unknown``). ``access_of``
takes source text and parameter names, so it runs without Triton;
``of_kernel`` reads them off a ``JITFunction`` (``.src``, ``.arg_names``).
Results are cached per source.
"""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap
from dataclasses import dataclass, field
from typing import Any, Iterator

READ, WRITE, READ_WRITE = "r", "w", "rw"
LANGUAGE_ROOTS = frozenset({"tl", "triton"})        # ``tl.store``, ``triton.language.store``
TRITON_BUILTINS = frozenset({"float", "getattr", "int", "isinstance", "len", "list", "max", "min", "print",
                             "range"})               # the Python builtins a Triton kernel may call
POINTER_KEYWORDS = ("pointer", "desc_pointer", "desc", "base")
METADATA = frozenset({"dtype", "type", "shape", "element_ty"})   # ``out_ptr.dtype`` is no pointer


@dataclass(frozen=True)
class KernelAccess:
    """``access[parameter]`` is ``r``, ``w`` or ``rw``; ``unknown`` says why the source
    could not be read (then every parameter is ``rw``)."""

    access: dict[str, str]
    unknown: str | None = None
    extents: dict[str, str] = field(default_factory=dict)   # pointer parameter -> the size parameter bounding it

    def of(self, parameter: str) -> str:
        return READ_WRITE if self.unknown else self.access.get(parameter, READ_WRITE)


def of_kernel(kernel: Any) -> KernelAccess:
    """The access of a ``triton.runtime.jit.JITFunction`` (or anything with ``src`` or
    ``fn``, and ``arg_names``)."""
    source = getattr(kernel, "src", None)
    if source is None and getattr(kernel, "fn", None) is not None:
        try:
            source = inspect.getsource(kernel.fn)
        except (OSError, TypeError):
            source = None
    return access_of(source, tuple(getattr(kernel, "arg_names", ())))


@functools.lru_cache(maxsize=None)
def access_of(source: str | None, arg_names: tuple[str, ...]) -> KernelAccess:
    """Read, write or both for each of ``arg_names``, from the kernel's ``source``."""
    def unknown(why: str) -> KernelAccess:
        return KernelAccess({name: READ_WRITE for name in arg_names}, why)

    if source is None:
        return unknown("no source to read")
    try:
        tree = ast.parse(textwrap.dedent(source))
    except SyntaxError as exc:
        return unknown(f"source does not parse: {exc.msg} (line {exc.lineno})")
    kernel = next((node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)), None)
    if kernel is None:
        return unknown("no function definition in the source")
    arguments = kernel.args
    params = [a.arg for a in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs)]
    if not set(arg_names) <= set(params):
        return unknown(f"the source's parameters ({', '.join(params)}) are not the kernel's "
                       f"({', '.join(arg_names)})")
    constexprs = {a.arg for a in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs)
                  if a.annotation is not None and ast.unparse(a.annotation).endswith("constexpr")}
    flows = _flows(kernel, [p for p in params if p not in constexprs])
    found = _Uses()
    for call in (node for node in ast.walk(kernel) if isinstance(node, ast.Call)):
        found.add(call, flows)
    sizes = {p for p in params if p not in constexprs}
    return KernelAccess({name: found.access(name) for name in arg_names},
                        extents=_mask_bounds(kernel, flows, sizes))


# -- how far through each pointer ------------------------------------------------------------

def _mask_bounds(kernel: ast.FunctionDef, flows: dict[str, set[str]], sizes: set[str]) -> dict[str, str]:
    """Pointer parameter -> the size parameter ``n`` that bounds every load and store through
    it (``p + offs`` under ``mask=offs < n``); a pointer used any other way has no bound."""
    once = _assigned_once(kernel)
    bounds: dict[str, str | None] = {}
    for call in (node for node in ast.walk(kernel) if isinstance(node, ast.Call)):
        name = _callee(call.func)
        if name not in ("load", "store") or _root(call.func) not in LANGUAGE_ROOTS:
            continue
        pointer = _pointer_operand(call)
        reached = _params_in(pointer, flows)
        bound = _bound(pointer, _mask_of(call, name), once, sizes)
        for param in reached:
            bounds[param] = bound if bounds.get(param, bound) == bound else None
    for node in ast.walk(kernel):   # a pointer a helper or a block pointer takes has no bound read here
        if isinstance(node, ast.Call) and _callee(node.func) not in ("load", "store"):
            for argument in node.args:
                for param in _params_in(argument, flows):
                    bounds[param] = None
    return {param: bound for param, bound in bounds.items() if bound is not None}


def _assigned_once(kernel: ast.FunctionDef) -> dict[str, ast.expr]:
    """Names assigned exactly once in the body, with their expression."""
    seen: dict[str, list[ast.expr]] = {}
    for targets, value in _assignments(kernel):
        for name in targets:
            seen.setdefault(name, []).append(value)
    augmented = {n for node in ast.walk(kernel) if isinstance(node, ast.AugAssign) for n in _names(node.target)}
    return {name: values[0] for name, values in seen.items() if len(values) == 1 and name not in augmented}


def _mask_of(call: ast.Call, name: str) -> ast.expr | None:
    mask = next((k.value for k in call.keywords if k.arg == "mask"), None)
    position = 1 if name == "load" else 2
    return mask if mask is not None or len(call.args) <= position else call.args[position]


def _bound(pointer: ast.expr, mask: ast.expr | None, once: dict[str, ast.expr], sizes: set[str]) -> str | None:
    """``n`` when ``pointer`` is ``p + offs`` and ``mask`` is ``offs < n`` (``n`` a size parameter)."""
    if isinstance(pointer, ast.Name) and pointer.id in once:
        pointer = once[pointer.id]
    if isinstance(mask, ast.Name) and mask.id in once:   # mask = offs < n, then mask=mask
        mask = once[mask.id]
    if mask is None or not (isinstance(pointer, ast.BinOp) and isinstance(pointer.op, ast.Add)):
        return None
    if not (isinstance(mask, ast.Compare) and len(mask.ops) == 1 and isinstance(mask.ops[0], ast.Lt)
            and isinstance(mask.comparators[0], ast.Name) and mask.comparators[0].id in sizes):
        return None
    offsets = ast.dump(mask.left)
    sides = (pointer.left, pointer.right)
    if not any(isinstance(side, ast.Name) and ast.dump(other) == offsets
               for side, other in (sides, sides[::-1])):
        return None
    return mask.comparators[0].id


# -- where pointers flow ---------------------------------------------------------------------

def _flows(kernel: ast.FunctionDef, params: list[str]) -> dict[str, set[str]]:
    """Local name -> the parameters whose pointers may have flowed into it (``params``:
    those that can be pointers; a ``tl.constexpr`` cannot)."""
    flows = {p: {p} for p in params}
    assignments = list(_assignments(kernel))
    changed = True
    while changed:
        changed = False
        for targets, value in assignments:
            came = _params_in(value, flows)
            for name in targets:
                have = flows.setdefault(name, set())
                if not came <= have:
                    have |= came
                    changed = True
    return flows


def _assignments(kernel: ast.FunctionDef) -> Iterator[tuple[list[str], ast.expr]]:
    """``(names assigned, expression)`` for each assignment in the body."""
    for node in ast.walk(kernel):
        if isinstance(node, ast.Assign):
            yield [name for target in node.targets for name in _names(target)], node.value
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
            yield _names(node.target), node.value
        elif isinstance(node, ast.For):
            yield _names(node.target), node.iter
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            yield _names(node.optional_vars), node.context_expr


def _names(target: ast.expr) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [name for element in target.elts for name in _names(element)]
    if isinstance(target, ast.Starred):
        return _names(target.value)
    return []   # an attribute or subscript: no new name


def _params_in(expr: ast.AST, flows: dict[str, set[str]]) -> set[str]:
    """Parameters whose pointers ``expr`` may carry (loaded data carries none)."""
    found: set[str] = set()
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Name):
            found |= flows.get(node.id, set())
        elif isinstance(node, ast.Call) and _callee(node.func) in _YIELDS_DATA:
            continue
        elif isinstance(node, ast.Call) and _callee(node.func) in _POINTER_FROM_BASE:
            stack.append(_pointer_operand(node))
        elif isinstance(node, ast.Attribute) and node.attr in METADATA:
            continue
        else:
            stack.extend(ast.iter_child_nodes(node))
    return found


def _callee(func: ast.expr) -> str:
    """``store`` for ``tl.store``, ``desc.store`` or ``store``."""
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _root(func: ast.expr) -> str | None:
    while isinstance(func, ast.Attribute):
        func = func.value
    return func.id if isinstance(func, ast.Name) else None


def _is_atomic(name: str) -> bool:
    return name.startswith("atomic_")


# Calls whose result points where their first operand (``base``) does; shapes, strides
# and offsets only move it within that tensor.
_POINTER_FROM_BASE = frozenset({"make_block_ptr", "make_tensor_descriptor", "advance"})
_YIELDS_DATA = frozenset({"load", "atomic_add", "atomic_and", "atomic_cas", "atomic_max", "atomic_min",
                          "atomic_or", "atomic_xchg", "atomic_xor", "_experimental_descriptor_load"})


# -- what the calls do with them --------------------------------------------------------------

@dataclass
class _Uses:
    """Parameters each kind of call reaches."""

    stored: set[str] = field(default_factory=set)
    atomic: set[str] = field(default_factory=set)
    loaded: set[str] = field(default_factory=set)
    escaped: set[str] = field(default_factory=set)   # handed to a function not seen into

    def add(self, call: ast.Call, flows: dict[str, set[str]]) -> None:
        name = _callee(call.func)
        on_pointer = isinstance(call.func, ast.Attribute) and bool(_params_in(call.func.value, flows))
        if name == "store" or name.endswith("descriptor_store") or _is_atomic(name):
            into = self.atomic if _is_atomic(name) else self.stored
            into |= _params_in(call.func.value if on_pointer else _pointer_operand(call), flows)
        elif name == "load" or name.endswith("descriptor_load"):
            self.loaded |= _params_in(call.func.value if on_pointer else _pointer_operand(call), flows)
        elif not on_pointer and not _known(call.func, flows):
            for argument in (*call.args, *(k.value for k in call.keywords)):
                self.escaped |= _params_in(argument, flows)

    def access(self, param: str) -> str:
        if param in self.atomic or param in self.escaped:
            return READ_WRITE
        if param in self.stored:
            return READ_WRITE if param in self.loaded else WRITE
        return READ


def _pointer_operand(call: ast.Call) -> ast.AST:
    if call.args:
        return call.args[0]
    return next((k.value for k in call.keywords if k.arg in POINTER_KEYWORDS), ast.Constant(None))


def _known(func: ast.expr, flows: dict[str, set[str]]) -> bool:
    """Writes through no pointer it is given: ``triton.language`` (``tl.*``), a builtin
    Triton allows, or a method of a value (``(a + b).to(...)``, ``x.to(...)``)."""
    if isinstance(func, ast.Name):
        return func.id in TRITON_BUILTINS
    root = _root(func)
    return root is None or root in LANGUAGE_ROOTS or root in flows
