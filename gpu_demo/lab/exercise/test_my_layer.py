"""The lab's check as a test: ``pytest gpu_demo/lab/exercise/test_my_layer.py``.

``LAB_LAYER=gpu_demo.lab.exercise.my_layer_solution:make`` checks the worked solution
instead of your file. On a CPU seat the test runs the static dry run and is
then skipped: the replay, which decides, needs a GPU.
"""

import os

import pytest
import torch

from gpu_demo import assert_capture_safe

LAYER = os.environ.get("LAB_LAYER", "gpu_demo.lab.exercise.my_layer:make")


def test_my_layer_is_capture_safe():
    report = assert_capture_safe(LAYER, strict=True, dry_run_ok=True)
    print(report.format())
    if not torch.cuda.is_available():
        pytest.skip("CPU seat: only the static dry run ran (it passed); the replay needs a GPU seat")
