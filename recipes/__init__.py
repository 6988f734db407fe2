"""Recipes of the ReTool NPU port kit: configs and helpers that drive verl 0.6.1's ReTool recipe on NPU, CUDA or CPU."""
