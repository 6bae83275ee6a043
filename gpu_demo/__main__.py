"""``python -m gpu_demo COMMAND``: the lab's command line (``gpu_demo.lab.cli.main``)."""

import sys

from gpu_demo.lab.cli.main import main

sys.exit(main())
