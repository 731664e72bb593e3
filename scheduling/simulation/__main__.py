"""``python -m scheduling.simulation simulate ...`` / ``... bench ...`` (see cli.py)."""

import sys

from scheduling.simulation.cli import main

sys.exit(main())
