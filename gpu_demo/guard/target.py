"""What the guard checks: a callable, how it is built on a device, how it reaches a child.

The guard captures ``fn`` in a child process (a device fault must never kill
the caller), so ``fn`` must be something a fresh Python process can rebuild:

* a ``"module:callable"`` string (``"mypkg.layers:make"``; a dotted path after the
  colon reaches a nested attribute), or ``"path/to/file.py:callable"``: the file is
  run as ``python file.py`` would import it (its folder first on ``sys.path``, so it
  imports its neighbours), once per process;
* a module-level function or class (pickled by reference: the child imports it);
* a function, closure, lambda or class defined in ``__main__`` (a notebook cell,
  a script) or inside a function: ``cloudpickle`` sends it by value, with the
  globals and cells it uses (the child cannot import ``__main__``);
* an object that pickles by value (an ``nn.Module`` instance whose attributes
  all pickle; one holding a ``torch.cuda.Stream`` does not, pass its class).

The factory convention (one rule for the API and the CLI):

* a **class** is a factory: it is instantiated with ``(device, dtype)`` when its
  ``__init__`` takes parameters named ``device`` and ``dtype``, else with no
  arguments;
* a **function** (or a ``functools.partial`` of one) is a factory when it takes no
  parameters at all, or when its first two parameters are named ``device`` and
  ``dtype``; parameters the partial or ``check_capture(kwargs=...)`` binds do not
  count, so ``make(device, dtype, layers=2)`` and ``make(hidden)`` with
  ``kwargs={"hidden": 64}`` are both factories;
* anything else (a function of tensors, an ``nn.Module`` instance, any callable
  object) is the function under test itself.

A factory returns the callable under test (usually an ``nn.Module``), or a pair
``(callable, example_inputs)`` like the corpus programs' ``make(device, dtype)``.
A factory that takes no device is built under ``with torch.device(device)`` and
an ``nn.Module`` it returns is moved with ``.to(device, dtype)``, where ``dtype``
is the one asked for, else that of the example inputs it returns (its floating
example inputs are cast to an asked-for dtype too), so a float32 factory stays
float32. Each build of
a factory is a new instance, made under the same seed, so the eager reference
can run on its own instance and never touch the captured one's static buffers.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import inspect
import pickle
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Sequence

import torch
import torch.nn as nn

from gpu_demo.guard.record.call_site import raised_at

try:
    import cloudpickle
except ImportError:  # an optional dependency (the gpu extra): without it, only importable targets travel
    cloudpickle = None

Target = str | Callable[..., Any]
"""A ``"module:callable"`` or ``"file.py:callable"`` string, or the object itself."""

DEFAULT_DTYPE = torch.bfloat16
"""What a ``(device, dtype)`` factory is built in when neither ``dtype=`` nor example inputs say."""


class TargetError(ValueError):
    """The target cannot be loaded, built or sent to a child; the message says how to fix it."""


@dataclass
class Built:
    """One build of a target: the callable to run and the example inputs its factory gave."""

    fn: Callable[..., Any]
    example_inputs: tuple[torch.Tensor, ...] | None
    fresh: bool
    """True when each build is a new instance (a factory, or a copy by value)."""


def load(spec: str) -> Any:
    """The object ``"module:attr.path"`` or ``"file.py:attr.path"`` names."""
    module_name, sep, attr_path = spec.partition(":")
    if not sep or not module_name or not attr_path:
        raise TargetError(f"{spec!r} is not 'module:callable' (for example 'gpu_demo.lab.corpus.safe_dual_stream:make') "
                          "or 'path/to/file.py:callable'")
    obj: Any = _module(module_name, spec)
    for part in attr_path.split("."):
        if not hasattr(obj, part):
            raise TargetError(f"module {module_name!r} has no {attr_path!r} (looked for {part!r})")
        obj = getattr(obj, part)
    if not callable(obj):
        raise TargetError(f"{spec!r} names a {type(obj).__name__}, not a callable")
    return obj


def _module(name: str, spec: str) -> ModuleType:
    """The module a target names: imported by its dotted name, or run from its file. What its own
    code raises on the way is the user's error, told in one line with the line that raised it."""
    try:
        return _module_of_file(Path(name), spec) if name.endswith(".py") else importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and f"{name}.".startswith(f"{exc.name}."):   # the target's own, not one it imports
            raise TargetError(f"cannot import module {name!r} of {spec!r}: {exc}; is it on PYTHONPATH (run from "
                              "the project root)? A file is named by its path ending in .py ('layers.py:make')") from exc
        raise TargetError(f"importing {name!r} of {spec!r} failed: {_raised(exc)}") from exc
    except TargetError:
        raise
    except Exception as exc:   # its own code failed: a syntax error, an exception at import
        raise TargetError(f"importing {name!r} of {spec!r} failed: {_raised(exc)}") from exc


def _module_of_file(path: Path, spec: str) -> ModuleType:
    """``path`` run as a module once per process, under a name of its own (its stem and a digest
    of its place: two files of one name stay two modules), with its folder on ``sys.path``."""
    if not path.is_file():
        raise TargetError(f"no file {str(path)!r} (of {spec!r}): give a Python file's path, or its module's "
                          "dotted name ('mypkg.layers:make')")
    place = path.resolve()
    name = f"_target_{place.stem}_{hashlib.sha1(str(place).encode()).hexdigest()[:8]}"
    if name in sys.modules:
        return sys.modules[name]
    if str(place.parent) not in sys.path:
        sys.path.insert(0, str(place.parent))   # as ``python file.py`` has it: its neighbours import
    module_spec = importlib.util.spec_from_file_location(name, place)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _raised(exc: BaseException) -> str:
    """``"SyntaxError: invalid syntax (at layers.py:2)"``: what the target's code raised, and where."""
    if isinstance(exc, SyntaxError):
        return f"SyntaxError: {exc.msg} (at {exc.filename}:{exc.lineno})"
    site = raised_at(exc)
    return f"{type(exc).__name__}: {exc}" + (f" (at {site})" if site else "")


def resolve(target: Target) -> Any:
    """The object behind ``target`` (loads a ``module:callable`` string)."""
    if isinstance(target, str):
        return load(target)
    if not callable(target):
        raise TargetError(f"the function to check must be callable or a 'module:callable' string, "
                          f"got a {type(target).__name__}")
    return target


def name_of(target: Target) -> str:
    """A short name for reports."""
    if isinstance(target, str):
        return target
    if isinstance(target, functools.partial):
        return f"functools.partial({name_of(target.func)}, ...)"
    if isinstance(target, nn.Module) or not hasattr(target, "__qualname__"):
        return f"{type(target).__name__} instance"
    return f"{target.__module__}:{target.__qualname__}"


def portable(target: Target) -> bytes | str:
    """What travels to the child: the string itself (a file's path made absolute), or the object
    pickled (by value with ``cloudpickle`` where the child could not import it: ``__main__``, a
    closure, a lambda)."""
    if isinstance(target, str):
        return _placed(target)
    if cloudpickle is None and _not_importable(target):
        raise TargetError(
            f"{name_of(target)} is defined in __main__ or inside a function, which a child process cannot "
            "import, and cloudpickle (which sends it by value) is not installed: pip install cloudpickle, "
            "or move it into a module and pass it (or 'module:callable'), or use isolate=False.")
    try:
        return (cloudpickle or pickle).dumps(target)
    except Exception as exc:  # pickling can fail with many exception types
        raise TargetError(
            f"{name_of(target)} cannot be sent to a child process ({type(exc).__name__}: {exc}). Pass its "
            "class or a factory function instead (built in the child), or a 'module:callable' string, "
            "or isolate=False to run in this process.") from exc


def _placed(spec: str) -> str:
    """``spec`` with its file's path made absolute: the child finds it from any folder."""
    module_name, sep, attr_path = spec.partition(":")
    return f"{Path(module_name).resolve()}{sep}{attr_path}" if sep and module_name.endswith(".py") else spec


def _not_importable(target: Any) -> bool:
    inner = target.func if isinstance(target, functools.partial) else target
    qualname = getattr(inner, "__qualname__", "")
    return getattr(inner, "__module__", None) == "__main__" or "<" in qualname


def unpack(sent: Any) -> Any:
    """The child side of ``portable``: the object (a new one on every call when pickled by value).
    Anything but a string or bytes is the object itself (``isolate=False``: it never left)."""
    if isinstance(sent, str):
        return load(sent)
    return pickle.loads(sent) if isinstance(sent, bytes) else sent


def factory_call(obj: Any, kwargs: dict[str, Any] | None = None) -> str | None:
    """``"device_dtype"`` or ``"no_args"`` if ``obj`` is a factory (module docstring), else ``None``.
    Parameters ``kwargs`` binds are left out first."""
    bound = set(kwargs or ())
    if inspect.isclass(obj):
        try:
            names = [n for n in inspect.signature(obj).parameters if n not in bound]
        except (TypeError, ValueError):
            return "no_args"
        return "device_dtype" if {"device", "dtype"} <= set(names) else "no_args"
    if not (inspect.isfunction(obj) or inspect.ismethod(obj) or isinstance(obj, functools.partial)):
        return None
    parameters = inspect.signature(obj).parameters.values()
    # A partial's keyword bindings show as keyword-only parameters with defaults: those are bound too.
    names = [p.name for p in parameters if p.name not in bound and not (
        isinstance(obj, functools.partial) and p.kind is p.KEYWORD_ONLY and p.name in obj.keywords)]
    if not names:
        return "no_args"
    return "device_dtype" if names[:2] == ["device", "dtype"] else None


def build(sent: Any, device: torch.device, dtype: torch.dtype | None, seed: int,
          kwargs: dict[str, Any] | None = None) -> Built:
    """Rebuild the target from what ``portable`` sent, on ``device`` (a new instance for a factory,
    called with ``kwargs``). ``dtype=None``: a ``(device, dtype)`` factory gets ``DEFAULT_DTYPE``; a
    factory without parameters keeps its own, the dtype of the example inputs it returns."""
    obj = unpack(sent)
    call = factory_call(obj, kwargs)
    if call is None:
        by_value = isinstance(sent, bytes) and not (inspect.isfunction(obj) or inspect.isbuiltin(obj))
        return Built(obj, None, fresh=by_value)
    torch.manual_seed(seed)
    if call == "device_dtype":
        made = obj(device=device, dtype=dtype or DEFAULT_DTYPE, **(kwargs or {}))
    else:
        with torch.device(device):
            made = obj(**(kwargs or {}))
    fn, examples = _split(made, obj)
    if call == "no_args":
        dtype = dtype or floating_dtype(examples or ())
        if isinstance(fn, nn.Module):
            fn = fn.to(device=device, dtype=dtype)
        if examples is not None and dtype is not None:
            examples = tuple(t.to(dtype) if t.is_floating_point() else t for t in examples)
    return Built(fn, examples, fresh=True)


def floating_dtype(tensors: Sequence[torch.Tensor]) -> torch.dtype | None:
    """The dtype of the first floating tensor, ``None`` when there is none."""
    return next((t.dtype for t in tensors if t.is_floating_point()), None)


def _split(made: Any, factory: Any) -> tuple[Callable[..., Any], tuple[torch.Tensor, ...] | None]:
    if isinstance(made, tuple) and len(made) == 2 and callable(made[0]):
        fn, examples = made
        if not isinstance(examples, Sequence) or not all(isinstance(t, torch.Tensor) for t in examples):
            raise TargetError(f"factory {name_of(factory)} returned (fn, example_inputs) but example_inputs "
                              "is not a sequence of tensors")
        return fn, tuple(examples)
    if not callable(made):
        raise TargetError(f"factory {name_of(factory)} returned a {type(made).__name__}; it must return the "
                          "callable to check (e.g. an nn.Module) or (callable, example_inputs)")
    return made, None
