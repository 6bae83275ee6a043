"""The whole-process check's public entry points, where users type them; the check is the guard's.

``CAPTURE_ORDER_CHECK=1 python script.py``: ``capture_order_check.pth`` imports this package
at start-up and calls ``check_process_from_env``. ``python -m gpu_demo.autocheck script.py``
runs ``__main__``. Both hand over to ``gpu_demo.guard.autocheck``.
"""

from gpu_demo.guard.autocheck import check_process_from_env

__all__ = ["check_process_from_env"]
