"""The whole-process check's public entry points, where users type them; the check is the guard's.

``CAPTURE_ORDER_CHECK=1 python script.py``: ``capture_order_check.pth`` imports this package
at every start-up and calls ``check_process_from_env``, which imports nothing heavy: the check
starts when the program imports torch (``gpu_demo.guard.startup``). ``python -m
gpu_demo.autocheck script.py`` runs ``__main__``. Both hand over to the guard.
"""

from gpu_demo.guard.startup import check_process_from_env

__all__ = ["check_process_from_env"]
