"""NVIDIA GPUs: the parity platform (the same recipes with verl's CUDA defaults and vLLM's CUDA image)."""

from __future__ import annotations

import os
from collections.abc import Mapping

from npu_kernels.platform.base import HYDRA_FULL_ERROR, TOKENIZERS_PARALLELISM, PinnedPackage, Platform
from npu_kernels.platform.env import BOTH, RL, SFT, EnvTable, EnvVar, check_phase
from npu_kernels.platform.npu import FUSED_KERNELS

#: The process environment per phase (npu_kernels.platform.env), in the order it is rendered.
ENV_TABLE: EnvTable = (
    (BOTH, FUSED_KERNELS),
    (BOTH, HYDRA_FULL_ERROR),
    (
        SFT,
        EnvVar(
            "PYTORCH_CUDA_ALLOC_CONF",
            "expandable_segments:True",
            "less fragmentation with variable-length packed batches; safe in SFT because no vLLM runs",
        ),
    ),
    (
        RL,
        EnvVar(
            "PYTORCH_CUDA_ALLOC_CONF",
            None,
            "vLLM's sleep-mode CuMemAllocator asserts expandable_segments is off",
        ),
    ),
    (RL, EnvVar("VLLM_USE_V1", "1", "verl's async agent-loop server needs the vLLM V1 engine")),
    (
        RL,
        EnvVar(
            "NCCL_CUMEM_ENABLE",
            "0",
            "avoids hangs in actor-to-rollout weight sync (verl's PPO runtime env sets it only inside Ray workers)",
        ),
    ),
    (SFT, TOKENIZERS_PARALLELISM),
)


class CudaPlatform(Platform):
    name = "cuda"
    verl_device = "cuda"
    torch_module_name = "cuda"
    dist_backend = "nccl"
    visible_devices_env = "CUDA_VISIBLE_DEVICES"
    ray_resource = "GPU"
    attn_implementation = "flash_attention_2"
    use_torch_compile = True
    socket_ifname_vars = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME")
    kernel_backends = ("liger", "reference")
    # torch comes with the vLLM image (pins.env pins no CUDA torch); vLLM is pinned.
    pinned_stack = (PinnedPackage("torch", None, "image"), PinnedPackage("vllm", "VLLM_VERSION", "image"))
    env_table = ENV_TABLE

    def is_available(self) -> bool:
        import torch

        return torch.cuda.is_available()

    def device_count(self, dev_root: str | os.PathLike[str] = "/dev") -> int:
        import torch

        return torch.cuda.device_count()

    def status_note(self) -> str:
        return f"{self.device_count()} CUDA devices"

    def ray_start_args(self, count: int) -> list[str]:
        return [f"--num-gpus={count}"]

    def env_problems(self, env: Mapping[str, str], phase: str) -> list[str]:
        check_phase(phase)
        alloc = (env.get("PYTORCH_CUDA_ALLOC_CONF") or "").replace(" ", "").lower()
        if phase == "rl" and "expandable_segments:true" in alloc:
            return ["PYTORCH_CUDA_ALLOC_CONF enables expandable_segments, which breaks vLLM sleep mode in RL: unset it"]
        return []
