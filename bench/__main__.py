"""``python -m bench [--quick] [--only NAME] [--profile]``: run the benchmarks (see _harness)."""

import sys

from bench._harness import main

sys.exit(main())
