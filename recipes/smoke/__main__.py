"""``python -m recipes.smoke``: see :mod:`recipes.smoke.cli`."""

import sys

from recipes.smoke.cli import main

sys.exit(main())
