"""What the last H200 run of the corpus found wrong, by program, until a rerun shows it fixed.

The committed ``corpus-h200.json`` is what the H200 said; a program here is one whose result
contradicts what the corpus expects of it, with the finding and the issue that tracks it. Tests that
judge the committed results mark these ``xfail(strict=True)``: a rerun that fixes one fails its test
until the entry is removed, so nothing stays listed after it is fixed.
"""

from __future__ import annotations

import pytest

RUN = "the H200 run of 2026-12-03 at 590a57d (gpu_demo/lab/results/reruns/2026-12-03-rerun)"

# Empty since that run: the five programs listed after the run at 06c7f5a (drafter_shared_pool,
# fix_counter_on_device, fix_length_in_device_tensor, hf_full_attention_decode,
# safe_compile_reduce_overhead) came out as the corpus expects them.
OPEN: dict[str, str] = {}

# of those, the ones whose GPU truth itself contradicts the corpus (the rest are the guard's verdicts)
WRONG_TRUTH: frozenset[str] = frozenset()


def judged(names: list[str]) -> list:
    """``names`` as parameters, each one still open on the H200 marked as a strict xfail."""
    return [pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=f"{RUN}: {OPEN[name]}"))
            if name in OPEN else name for name in names]
