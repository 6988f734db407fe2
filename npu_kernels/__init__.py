"""Ascend NPU port kit for verl's ReTool recipe.

Kept import-free on purpose: launch scripts run ``python -m npu_kernels.platform env ...`` before every job, and
importing torch (or, worse, torch_npu without CANN) here would make that slow or crash on a login node.
"""
