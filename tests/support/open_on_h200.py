"""What the last H200 run of the corpus found wrong, by program, until a rerun shows it fixed.

The committed ``corpus-h200.json`` is what the H200 said; a program here is one whose result
contradicts what the corpus expects of it, with the finding and the issue that tracks it. Tests that
judge the committed results mark these ``xfail(strict=True)``: a rerun that fixes one fails its test
until the entry is removed, so nothing stays listed after it is fixed.
"""

from __future__ import annotations

import pytest

RUN = "the H200 run of 2026-12-03 at 06c7f5a (gpu_demo/lab/results/reruns/2026-12-03-after-merge)"

OPEN = {
    "drafter_shared_pool": "silently wrong on the GPU and no rule fired in the whole-process check: a weak "
                           "reference the recorder did not follow (fixed on a CPU at 89a49c8; issue 36)",
    "fix_counter_on_device": "its script compared the first three replays with a reference one token ahead "
                             "(fixed at 89a49c8; issue 36)",
    "fix_length_in_device_tensor": "a false rule 7 in the whole-process check on a correct program: an input "
                                   "view's allocation looked up by its own pointer (fixed on a CPU at 08beb36; issue 36)",
    "hf_full_attention_decode": "a false rule 8 in the whole-process check: the prefill's arange end at the "
                                "decode step's call site (fixed on a CPU at 08beb36; issue 36)",
    "safe_compile_reduce_overhead": "a false rule 10 in the whole-process check since the merge of 06c7f5a; "
                                    "clean on 2026-12-02, cause not found without a GPU (issue 34)",
}

# of those, the ones whose GPU truth itself contradicts the corpus (the rest are the guard's verdicts)
WRONG_TRUTH = frozenset({"fix_counter_on_device"})


def judged(names: list[str]) -> list:
    """``names`` as parameters, each one still open on the H200 marked as a strict xfail."""
    return [pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=f"{RUN}: {OPEN[name]}"))
            if name in OPEN else name for name in names]
