"""``python -m platforms.doctor``: the same as ``retool-doctor``."""

import sys

from platforms.doctor.cli import main

sys.exit(main())
