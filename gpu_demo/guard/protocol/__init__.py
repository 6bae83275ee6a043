"""The protocol every real run follows: the guard's, and the lab's that stands on it.

``capture_replay``: warm up, capture, replay with fresh inputs, compare with an
eager reference; ``metric``: the one error metric; ``tolerance``: how close is
correct, per dtype; ``cuda_errors``: PyTorch's CUDA errors as outcome words;
``child``: one function in a fresh process, so a device fault cannot kill the
caller (``ChildError``: why one handed back less); ``worker``: the same in one
warm process kept for many calls (``warm_checks()``); ``child_result``: what the
guard's child hands back for a check, typed on both sides of the process
boundary. Imports nothing else from ``gpu_demo``.
"""
