"""A fresh process that imports verl with ``VERL_USE_EXTERNAL_MODULES=npu_kernels.auto`` (what every Ray worker does
when it unpickles a verl worker class) comes up patched: on CPU with the reference backend, and on a simulated NPU
(stub torch_npu registered as ``torch.npu``, so verl itself imports its npu_patch) with verl's patches kept or fixed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from kit_testing import REPO_ROOT, kit_env

STUBS = REPO_ROOT / "tests" / "kernels" / "stubs"

WORKER = textwrap.dedent(
    """
    import json, os, sys
    import torch
    if os.environ.get("SIMULATE_NPU"):
        import torch_npu  # the stub; on a real box TORCH_DEVICE_BACKEND_AUTOLOAD imports torch_npu with torch
        torch_npu.register_device()
    import verl  # runs verl's VERL_USE_EXTERNAL_MODULES hook, then (NPU only) its own npu_patch import
    from verl.utils.import_utils import import_external_libs
    import_external_libs("npu_kernels.auto")  # the model.external_lib route: a no-op the second time
    from npu_kernels import auto, patcher
    from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

    kw = dict(vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, attn_implementation="eager")
    for model in (Qwen3ForCausalLM(Qwen3Config(head_dim=16, **kw)), Qwen2ForCausalLM(Qwen2Config(**kw))):
        ids = torch.randint(0, 64, (2, 7))
        model(input_ids=ids).logits.float().logsumexp(-1).mean().backward()
    calls = sorted({c["op"] for c in sys.modules["torch_npu"].CALLS}) if "torch_npu" in sys.modules else []
    print(json.dumps({"state": patcher.state(), "report": auto.REPORT.summary(), "npu_ops": calls}))
    """
)


def _start(**env: str) -> subprocess.Popen[str]:
    environ = kit_env(VERL_USE_EXTERNAL_MODULES="npu_kernels.auto", **env)
    environ.pop("KIT_FUSED_KERNELS", None)
    environ.pop("KIT_FUSED_OPS", None)
    if env.get("SIMULATE_NPU"):
        environ["PYTHONPATH"] = os.pathsep.join([str(STUBS), environ["PYTHONPATH"]])
    return subprocess.Popen(
        [sys.executable, "-c", WORKER],
        env=environ,
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(proc: subprocess.Popen[str]) -> tuple[dict, str]:
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, f"worker failed:\n{out}\n{err[-4000:]}"
    return json.loads(out.strip().splitlines()[-1]), err


def test_workers_started_through_verl_hook_are_patched() -> None:
    # Both workers at once: each pays torch + verl import time, the suite only once.
    npu_proc = _start(KIT_DEVICE="npu", SIMULATE_NPU="1")
    cpu_proc = _start(KIT_DEVICE="cpu")
    npu_result, npu_err = _finish(npu_proc)
    cpu_result, cpu_err = _finish(cpu_proc)

    assert set(cpu_result["state"].values()) == {"kit:reference"}, cpu_result
    assert cpu_err.count("[npu_kernels pid=") == 1, cpu_err  # one log line per process, despite two imports

    assert npu_result["state"] == {
        "qwen2.Qwen2RMSNorm.forward": "kit:npu",
        "qwen2.Qwen2MLP.forward": "verl",
        "qwen2.apply_rotary_pos_emb": "verl",
        "qwen3.Qwen3RMSNorm.forward": "kit:npu",
        "qwen3.Qwen3MLP.forward": "verl",
        "qwen3.apply_rotary_pos_emb": "kit:npu",
    }, npu_result
    assert npu_result["npu_ops"] == ["npu_rms_norm", "npu_rotary_mul", "npu_swiglu"]
    # The ordering fix: verl/__init__ imports npu_patch *after* the hook, so the kit must have imported it first.
    assert "note: verl npu_patch imported first" in npu_result["report"], npu_result["report"]
    assert "[npu_kernels pid=" in npu_err and "replaced verl npu_patch.rms_norm_forward" in npu_err, npu_err
