"""``python -m recipes.launch`` (see :mod:`recipes.launch.cli`)."""

import sys

from recipes.launch.cli import main

sys.exit(main())
