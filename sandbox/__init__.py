"""A SandboxFusion-compatible ``/run_code`` service for the ReTool recipe's code tool.

Warm fork-server workers (pre-imported numpy/sympy/scipy) run each request in a fresh forked child under
bubblewrap when it can run, with per-request wall/memory/process/file/output limits. See ``sandbox.cli``.
"""

__version__ = "0.1.0"
