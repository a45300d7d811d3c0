"""Run the CLI as ``python -m agentledger.cli``."""

import sys

from agentledger.cli import main

sys.exit(main())
