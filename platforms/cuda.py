"""NVIDIA GPUs: the parity platform (the same recipes with verl's CUDA defaults and vLLM's CUDA image)."""

from __future__ import annotations

import os
from collections.abc import Mapping

from platforms.base import HYDRA_FULL_ERROR, DeviceAccess, PinnedPackage, Platform
from platforms.env import BOTH, RL, SFT, EnvTable, EnvVar, check_phase
from platforms.npu import FUSED_KERNELS

#: The process environment per phase (platforms.env), in the order it is rendered. The reference is verl
#: 0.6.1's recipe/retool/*.sh, which exports only VLLM_USE_V1 (run_qwen2_7b_dapo.sh:3); a reason starting with "kit:"
#: marks a value it does not set. TOKENIZERS_PARALLELISM is left out: verl sets it to true itself
#: (verl/trainer/fsdp_sft_trainer.py:24, verl/trainer/constants_ppo.py:22).
ENV_TABLE: EnvTable = (
    (BOTH, FUSED_KERNELS),
    (BOTH, HYDRA_FULL_ERROR),
    (
        SFT,
        EnvVar(
            "PYTORCH_CUDA_ALLOC_CONF",
            "expandable_segments:True",
            "kit: less fragmentation with variable-length batches; verl 0.6.1 turns it on for its own FSDP training "
            "phases (verl/utils/device.py:88-94 'to avoid OOM', workers/fsdp_workers.py:746); safe in SFT (no vLLM)",
        ),
    ),
    (
        RL,
        EnvVar(
            "PYTORCH_CUDA_ALLOC_CONF",
            None,
            "vLLM 0.11.0's sleep-mode CuMemAllocator asserts expandable_segments is off (added by "
            "vllm-project/vllm#14189, dropped only by #40812 after 0.11.0); verl 0.6.1 always uses sleep mode "
            "(vllm_async_server.py:229) and toggles the setting itself (workers/fsdp_workers.py:698, 746)",
        ),
    ),
    (
        RL,
        EnvVar(
            "VLLM_USE_V1",
            "1",
            "verl 0.6.1 recipe/retool/run_qwen2_7b_dapo.sh:3; its async server is built on vLLM V1 "
            "(verl/workers/rollout/vllm_rollout/vllm_async_server.py:39-42)",
        ),
    ),
    (
        RL,
        EnvVar(
            "NCCL_CUMEM_ENABLE",
            "0",
            "verl 0.6.1's value for every PPO Ray worker against weight-sync hangs (verl/trainer/constants_ppo.py:"
            "29-33), which it skips when the driver already has the key (:51-53): set here so both agree",
        ),
    ),
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
    # The NVIDIA runtime's --gpus, host networking and host IPC (vLLM and NCCL share memory across processes).
    device_access = DeviceAccess(gpus="all", run_args=("--network=host", "--ipc=host"))
    run_script = "docker/run_cuda.sh"

    def is_available(self) -> bool:
        """False without torch: a host's python (retool-doctor, scripts/sft_to_rl.sh, ray_cluster.sh) may have none,
        and detecting the platform there crashed with ModuleNotFoundError (issue 33); like NPU's probe
        (npu.import_torch_npu), a missing package is "not this platform", anything else still raises."""
        try:
            import torch
        except ModuleNotFoundError as exc:
            if exc.name == "torch":
                return False
            raise
        return torch.cuda.is_available()

    def device_count(self, dev_root: str | os.PathLike[str] = "/dev") -> int:
        import torch

        return torch.cuda.device_count()

    def bf16_supported(self) -> bool:
        """Pre-Ampere GPUs (V100, T4) have no bf16."""
        import torch

        return bool(torch.cuda.is_bf16_supported())

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
