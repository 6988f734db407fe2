"""The kit's fused Qwen2/Qwen3 kernels (RMSNorm, RoPE, SwiGLU) and the patcher that puts them into verl's processes.

Kept import-free on purpose: ``VERL_USE_EXTERNAL_MODULES=npu_kernels.auto`` makes every verl process import
``npu_kernels.auto``, which decides what to load; importing the package itself must cost nothing. Which backend a
device takes is the platform layer's decision (``platforms``).
"""
