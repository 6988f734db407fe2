"""Importing this module fuses Qwen2/Qwen3 kernels in the process: ``VERL_USE_EXTERNAL_MODULES=npu_kernels.auto``.

Why an import side effect: it is the one hook verl 0.6.1 runs in *every* process without code changes.
``verl/__init__.py`` imports each module named in ``VERL_USE_EXTERNAL_MODULES`` (comma-separated), and the driver,
the TaskRunner and every Ray worker import verl before they build a model; ``actor_rollout_ref.model.external_lib=
npu_kernels.auto`` (imported by the FSDP workers through ``import_external_libs``) reaches the workers as well.
Importing it again is free (Python caches the module; :func:`npu_kernels.patcher.apply` is idempotent anyway).

Turn it off with ``KIT_FUSED_KERNELS=off``; see :mod:`npu_kernels.patcher` for the other settings.
"""

from __future__ import annotations

import logging
import sys

from npu_kernels.patcher import PatchReport, apply_from_env


def _log_to_stderr() -> None:
    """verl sets the root logger to WARNING; give the kit's one INFO line per process its own stderr handler."""
    kit_logger = logging.getLogger("npu_kernels")
    if kit_logger.handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("[npu_kernels pid=%(process)d] %(message)s"))
    kit_logger.addHandler(handler)
    kit_logger.setLevel(logging.INFO)
    kit_logger.propagate = False  # the root handler would print the same line twice


_log_to_stderr()

#: What this process patched (inspect it in a debugger, or log it from a worker).
REPORT: PatchReport = apply_from_env()
