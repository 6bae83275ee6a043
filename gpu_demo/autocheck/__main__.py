"""``python -m gpu_demo.autocheck``: a package's ``__main__``, so that running it never meets an
already-imported ``gpu_demo.autocheck`` (a .pth imports it at start-up), which made runpy warn."""

import sys

from gpu_demo.autocheck import main

sys.exit(main())
