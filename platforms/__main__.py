"""``python -m platforms``: see :mod:`platforms.cli`."""

import sys

from platforms.cli import main

sys.exit(main())
