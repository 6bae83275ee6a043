import sys

from gpu_demo.cli.main import main

sys.exit(main())
