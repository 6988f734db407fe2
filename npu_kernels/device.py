"""The platform CLI's first name: ``python -m npu_kernels.device ...`` keeps working for people and scripts that
type it. Everything lives in :mod:`npu_kernels.platform`; this module only forwards the command line."""

import sys

from npu_kernels.platform.cli import main

if __name__ == "__main__":
    sys.exit(main())
