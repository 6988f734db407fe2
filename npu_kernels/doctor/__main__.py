"""``python -m npu_kernels.doctor``: the same as ``retool-doctor``."""

import sys

from npu_kernels.doctor.cli import main

sys.exit(main())
