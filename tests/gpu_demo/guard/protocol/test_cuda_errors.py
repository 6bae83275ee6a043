"""PyTorch's CUDA error messages as outcome words."""

from __future__ import annotations

import pytest

from gpu_demo.guard.protocol.cuda_errors import classify_capture_failure, first_error


@pytest.mark.parametrize("message, outcome", [
    ("CUDA error: operation not permitted when stream is capturing", "capture_error:cudaErrorStreamCaptureUnsupported"),
    ("CUDA error: capture sequence contains a fork that was not joined to the primary stream",
     "capture_error:cudaErrorStreamCaptureUnjoined"),
    ("CUDA error: operation failed due to a previous error during capture\nSearch for "
     "`cudaErrorStreamCaptureInvalidated' in https://docs.nvidia.com", "capture_error:cudaErrorStreamCaptureInvalidated"),
    ("The size of tensor a (512) must match the size of tensor b (0) at non-singleton dimension 1",
     "capture_error:shape_mismatch"),
    ("CUDA error: an illegal memory access was encountered", "illegal_address"),
    ("something else entirely", "capture_error:RuntimeError"),
    ("Attempt to increase offset for a CUDA generator not in capture mode.", "capture_error:generator_not_in_capture"),
    ("CUDAGeneratorImpl::set_philox_offset_per_thread called during CUDA graph capture without a registered "
     "capture state.", "capture_error:generator_not_in_capture"),
    ("The tensor has a non-zero number of elements, but its data is not allocated yet.\nIf you're using",
     "capture_error:storage_not_allocated"),
    ("both arguments to linear need to be at least 1D, but they are 0D and 2D", "capture_error:shape_mismatch"),
])
def test_torch_error_messages_map_to_the_outcome_vocabulary(message, outcome):
    assert classify_capture_failure(RuntimeError(message)) == outcome


def test_the_first_error_of_a_chain_is_reported():
    try:
        try:
            raise RuntimeError("The size of tensor a (16) must match the size of tensor b (0)")
        finally:
            raise RuntimeError("CUDA error: capture sequence contains a fork that was not joined")
    except RuntimeError as exc:
        assert classify_capture_failure(first_error(exc)) == "capture_error:shape_mismatch"
