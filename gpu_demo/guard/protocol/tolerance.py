"""How close a replay must come to its eager reference to count as correct.

A replay runs the same kernels on the same data as eager, so a correct replay
is normally bit-identical (error 0.0); the tolerance only has to absorb a
different reduction order, which changes a result by about one rounding of the
dtype (unit roundoff: bf16 2**-8 = 3.9e-3, fp16 2**-11 = 4.9e-4, fp32 2**-24).
The tolerances sit a few roundoffs above that, and two orders of magnitude
below the errors of the failures this lab studies (about 0.9 for the stale
shared buffer).
"""

from __future__ import annotations

import torch

DTYPES: dict[str, torch.dtype] = {
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "float32": torch.float32,
}

SHORT_NAMES: dict[str, str] = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32",
                               "float": "float32"}


def dtype_name(text: str) -> str:
    """The ``DTYPES`` name ``text`` spells (``"bf16"``, ``"torch.float16"``, ``" Float32"``), else ``text``."""
    name = text.strip().lower().removeprefix("torch.")
    return SHORT_NAMES.get(name, name)


def dtype_named(value: torch.dtype | str) -> torch.dtype:
    """A ``torch.dtype``, or its name: one of ``DTYPES`` (the CLI's ``--dtype``), a ``SHORT_NAMES``
    spelling, or either with ``torch.`` in front; anything else is a ``ValueError`` naming them."""
    if isinstance(value, torch.dtype):
        return value
    if isinstance(value, str) and dtype_name(value) in DTYPES:
        return DTYPES[dtype_name(value)]
    raise ValueError(f"dtype {value!r} is not one the guard knows: pass a torch.dtype or one of "
                     f"{', '.join(repr(n) for n in (*DTYPES, *SHORT_NAMES))}")


# Largest relative L2 error (in float32) between a replay and the eager reference that still
# counts as correct, per dtype name.
TOLERANCES: dict[str, float] = {"bfloat16": 1e-2, "float16": 2e-3, "float32": 1e-5}


def tolerance_for(dtype: torch.dtype) -> float:
    """Largest relative error of a correct replay: a few roundings of the dtype (``TOLERANCES``);
    0 for exact dtypes (integers, bool), whose replays must match exactly."""
    names = {torch_dtype: name for name, torch_dtype in DTYPES.items()}
    if dtype in names:
        return TOLERANCES[names[dtype]]
    return 1e-12 if dtype == torch.float64 else 0.0
