"""``python -m gpu_demo.autocheck [--strict] script.py args...``: the guard's ``main``.

A package's ``__main__``, so that running it never meets an already-imported
``gpu_demo.autocheck`` (the .pth imports it at start-up), which made runpy warn.
"""

import sys

from gpu_demo.guard.autocheck import main

sys.exit(main())
