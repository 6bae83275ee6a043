"""The guard for users' own code: is this capture safe? Everything a check needs, in one room.

What users call, at this room's top:

``check``          ``check_capture`` / ``assert_capture_safe``: record a callable's capture,
                   explain it with ``simlib.checker``, prove it by a differential replay
``process``        ``capture_checked()`` for a block, and the whole-process check
``autocheck``      ``CAPTURE_ORDER_CHECK=1`` (the ``.pth``) and ``python -m gpu_demo.autocheck``
``pytest_plugin``  one warm worker per test session (``-p gpu_demo.guard.pytest_plugin``)

and what ``check`` stands on: ``differential`` (record then replay, in one child
process or a warm worker inside ``warm_checks()``), ``target`` (what can be checked
and how it travels), ``stochastic`` (why random ops still compare exactly).

Its parts, each a folder: ``record/`` (the recorder of real captures), ``protocol/``
(capture, replay, compare; the child process and the warm worker) and ``job/`` (the
check across the ranks of a torchrun job). For any program: the room imports nothing
from the rest of ``gpu_demo``, only simlib, torch and the standard library.
"""
