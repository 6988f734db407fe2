"""``python -m npu_kernels.platform``: see :mod:`npu_kernels.platform.cli`."""

import sys

from npu_kernels.platform.cli import main

sys.exit(main())
