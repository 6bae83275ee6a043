"""Marks that hold across the suite: a ``gpu`` test is skipped, with the reason, where no CUDA device is."""

import pytest

# The browser tests' fixtures and moves live in tests/support: their asserts explain themselves too.
pytest.register_assert_rewrite("jupyterlab_session")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_tests = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_tests:
        return
    import torch  # only where a GPU test was collected: the simulator's tests never import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in gpu_tests:
        item.add_marker(skip)
