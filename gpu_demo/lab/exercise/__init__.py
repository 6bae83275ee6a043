"""The classroom GPU lab: write a dual-stream layer in plain PyTorch, then let the guard judge it.

``my_layer.py``           the student's file: a layer with a TODO body and the instructions
``my_layer_solution.py``  a worked solution, with why
``test_my_layer.py``      the check as a test (``pytest gpu_demo/lab/exercise/test_my_layer.py``)

The instructor's notes are in ``docs/gpu-lab.md``.
"""
