"""The model_type-keyed patcher on tiny Qwen2/Qwen3 models: parity, idempotence, coexistence with verl's npu_patch."""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
import torch

from npu_kernels import patcher
from npu_kernels.ops import npu as npu_ops

MODEL_TYPES = ("qwen2", "qwen3")
MODULES = {
    "qwen2": "transformers.models.qwen2.modeling_qwen2",
    "qwen3": "transformers.models.qwen3.modeling_qwen3",
}


def _module(model_type: str) -> ModuleType:
    return importlib.import_module(MODULES[model_type])


def _originals() -> dict[str, Any]:
    found = {}
    for model_type in MODEL_TYPES:
        mod, prefix = _module(model_type), model_type.capitalize()
        found[f"{model_type}.rms_norm"] = getattr(mod, f"{prefix}RMSNorm").forward
        found[f"{model_type}.mlp"] = getattr(mod, f"{prefix}MLP").forward
        found[f"{model_type}.rope"] = mod.apply_rotary_pos_emb
    return found


def _normwise_close(actual: torch.Tensor, expected: torch.Tensor, tol: float, what: str) -> None:
    err = (actual.float() - expected.float()).abs().max() / expected.float().abs().max().clamp_min(1e-12)
    assert err <= tol, f"{what}: max|diff|/max|ref| = {err:.3g} > {tol}"


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_reference_backend_is_bit_identical(model_type: str, tiny_model, run_fwd_bwd, same_run) -> None:
    model = tiny_model(model_type)
    expected = run_fwd_bwd(model)
    report = patcher.apply("reference", model_types=[model_type])
    assert [a.action for a in report.actions] == ["patched"] * 3
    same_run(expected, run_fwd_bwd(model))


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_npu_backend_parity_fp32(
    model_type: str, stub_torch_npu: ModuleType, tiny_model, run_fwd_bwd, same_run
) -> None:
    model = tiny_model(model_type)
    expected = run_fwd_bwd(model)
    patcher.apply("npu", model_types=[model_type])
    actual = run_fwd_bwd(model)
    same_run(expected, actual, atol=1e-5, rtol=1e-5)
    ops_called = {c["op"] for c in stub_torch_npu.CALLS}
    assert ops_called == {"npu_rms_norm", "npu_rotary_mul", "npu_swiglu"}
    # 2 layers x (input, post-attention [, q_norm, k_norm]) + final norm, forward only (autograd does the backward).
    norms = sum(c["op"] == "npu_rms_norm" for c in stub_torch_npu.CALLS)
    assert norms == (2 * 4 + 1 if model_type == "qwen3" else 2 * 2 + 1)
    assert all(c["contiguous"] for c in stub_torch_npu.CALLS if c["op"] == "npu_rotary_mul")


def test_npu_backend_parity_bf16(stub_torch_npu: ModuleType, tiny_model, run_fwd_bwd) -> None:
    model = tiny_model("qwen3", dtype=torch.bfloat16)
    logits, grads = run_fwd_bwd(model)
    patcher.apply("npu", model_types=["qwen3"])
    fused_logits, fused_grads = run_fwd_bwd(model)
    _normwise_close(fused_logits, logits, 2e-2, "logits")
    for name, grad in grads.items():
        _normwise_close(fused_grads[name], grad, 5e-2, name)


def test_wrong_rotary_mode_fails_model_parity(
    stub_torch_npu: ModuleType, tiny_model, run_fwd_bwd, same_run, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = tiny_model("qwen3")
    expected = run_fwd_bwd(model)
    monkeypatch.setattr(npu_ops, "ROTARY_MODE", "interleave")
    patcher.apply("npu", model_types=["qwen3"])
    with pytest.raises(AssertionError, match="logits"):
        same_run(expected, run_fwd_bwd(model), atol=1e-5, rtol=1e-5)


def test_wrong_layout_fails_model_forward(
    stub_torch_npu: ModuleType, tiny_model, run_fwd_bwd, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = tiny_model("qwen3")
    monkeypatch.setattr(npu_ops, "COS_UNSQUEEZE_DIM", {"BNSD": 2, "BSND": 1})
    patcher.apply("npu", model_types=["qwen3"])
    with pytest.raises(AssertionError, match="is not a documented broadcast of input"):
        run_fwd_bwd(model)


def test_apply_twice_is_apply_once_and_revert_restores() -> None:
    originals = _originals()
    first = patcher.apply("reference")
    patched = _originals()
    second = patcher.apply("reference")
    assert {a.action for a in first.actions} == {"patched"}
    assert {a.action for a in second.actions} == {"unchanged"}
    assert _originals() == patched
    assert all(patched[key] is not originals[key] for key in originals)
    assert len(patcher.revert()) == 6
    assert _originals() == originals
    assert patcher.revert() == []


def test_switching_backend_keeps_the_true_original(stub_torch_npu: ModuleType) -> None:
    originals = _originals()
    patcher.apply("reference")
    report = patcher.apply("npu")
    assert {a.action for a in report.actions} == {"patched"}
    assert all(a.detail == "was the kit's reference backend" for a in report.actions)
    assert set(patcher.state().values()) == {"kit:npu"}
    patcher.revert()
    assert _originals() == originals


def test_non_silu_mlp_keeps_its_activation(tiny_model, run_fwd_bwd, same_run) -> None:
    model = tiny_model("qwen2", hidden_act="gelu")
    expected = run_fwd_bwd(model)
    patcher.apply("reference", model_types=["qwen2"])
    same_run(expected, run_fwd_bwd(model))


def _foreign_rope(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
    raise AssertionError("never called")


def test_foreign_patch_is_kept() -> None:
    mod = _module("qwen3")
    mod.apply_rotary_pos_emb = _foreign_rope
    report = patcher.apply("reference", model_types=["qwen3"])
    action = report.by_target()["qwen3.apply_rotary_pos_emb"]
    assert action.action == "kept" and "_foreign_rope" in action.detail
    assert mod.apply_rotary_pos_emb is _foreign_rope


def test_verl_npu_patch_first_then_kit(
    stub_torch_npu: ModuleType, tiny_model, run_fwd_bwd, same_run, caplog: pytest.LogCaptureFixture
) -> None:
    """verl 0.6.1's npu_patch ran first (as on an NPU box): close its two gaps for Qwen3, redo nothing else."""
    models = {mt: tiny_model(mt) for mt in MODEL_TYPES}
    expected = {mt: run_fwd_bwd(model) for mt, model in models.items()}

    npu_patch = importlib.import_module(patcher.VERL_NPU_PATCH)  # the real verl module, on the stub torch_npu
    assert patcher.state() == {
        "qwen2.Qwen2RMSNorm.forward": "verl",
        "qwen2.Qwen2MLP.forward": "verl",
        "qwen2.apply_rotary_pos_emb": "verl",
        "qwen3.Qwen3RMSNorm.forward": "verl",
        "qwen3.Qwen3MLP.forward": "verl",
        "qwen3.apply_rotary_pos_emb": "transformers",  # gap 1: no fused RoPE for Qwen3 dense
    }

    with caplog.at_level(logging.INFO, logger="npu_kernels.patcher"):
        report = patcher.apply("npu")
    actions = {key: (a.action, a.detail) for key, a in report.by_target().items()}
    gap2 = f"replaced verl npu_patch.rms_norm_forward: {patcher.VERL_GAPS['rms_norm', 'rms_norm_forward']}"
    assert actions == {
        "qwen2.Qwen2RMSNorm.forward": ("patched", gap2),
        "qwen2.Qwen2MLP.forward": ("kept", "verl npu_patch.silu_forward already fuses it"),
        "qwen2.apply_rotary_pos_emb": ("kept", "verl npu_patch.apply_rotary_pos_emb_npu already fuses it"),
        "qwen3.Qwen3RMSNorm.forward": ("patched", gap2),
        "qwen3.Qwen3MLP.forward": ("kept", "verl npu_patch.silu_forward already fuses it"),
        "qwen3.apply_rotary_pos_emb": ("patched", "verl's npu_patch leaves it unfused"),
    }
    assert [r.getMessage() for r in caplog.records] == [report.summary()]
    assert "qwen3: patched Qwen3RMSNorm.forward (replaced verl npu_patch.rms_norm_forward" in report.summary()
    mod3 = _module("qwen3")
    assert mod3.Qwen3MLP.forward is npu_patch.silu_forward

    for model_type, model in models.items():
        same_run(expected[model_type], run_fwd_bwd(model), atol=1e-5, rtol=1e-5)

    # Again: nothing changes, and revert gives back verl's versions, not transformers'.
    assert {a.action for a in patcher.apply("npu").actions} == {"unchanged", "kept"}
    patcher.revert()
    assert mod3.Qwen3RMSNorm.forward is npu_patch.rms_norm_forward
    assert mod3.apply_rotary_pos_emb.__module__ == MODULES["qwen3"]


def test_verl_rms_norm_gap_with_mixed_dtypes(stub_torch_npu: ModuleType) -> None:
    """Gap 2 on a module: fp32 activations into a bf16-weight norm fail under verl's forward, work under the kit's."""
    importlib.import_module(patcher.VERL_NPU_PATCH)
    norm = _module("qwen3").Qwen3RMSNorm(64).to(torch.bfloat16)
    x = torch.randn(2, 7, 64)
    with pytest.raises(AssertionError, match="gamma dtype torch.bfloat16 must equal self dtype torch.float32"):
        norm(x)
    patcher.apply("npu", model_types=["qwen3"])
    assert norm(x).dtype == torch.bfloat16


def test_apply_from_env_off_and_op_selection(stub_torch_npu: ModuleType) -> None:
    originals = _originals()
    report = patcher.apply_from_env({"KIT_FUSED_KERNELS": "off"})
    assert report.backend == "off" and report.actions == []
    assert _originals() == originals

    report = patcher.apply_from_env({"KIT_FUSED_KERNELS": "reference", "KIT_FUSED_OPS": "rope"})
    assert {k: a.action for k, a in report.by_target().items() if a.op == "rope"} == {
        "qwen2.apply_rotary_pos_emb": "patched",
        "qwen3.apply_rotary_pos_emb": "patched",
    }
    assert {a.action for a in report.actions if a.op != "rope"} == {"skipped"}

    with pytest.raises(ValueError, match="unknown op"):
        patcher.apply_from_env({"KIT_FUSED_OPS": "rope,flash"})
    with pytest.raises(ValueError, match="unknown kernel backend 'triton'"):
        patcher.apply_from_env({"KIT_FUSED_KERNELS": "triton"})


def test_apply_from_env_auto_on_cpu_uses_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    import platforms as kit_platform

    monkeypatch.setattr(kit_platform, "current_platform", lambda: kit_platform.CPU)
    report = patcher.apply_from_env({})
    assert report.backend == "reference (pure torch)"
    assert set(patcher.state().values()) == {"kit:reference"}


def test_forced_npu_without_torch_npu_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(__import__("sys").modules, "torch_npu", None)
    with pytest.raises(RuntimeError, match="KIT_FUSED_KERNELS=npu: npu backend needs torch_npu"):
        patcher.apply_from_env({"KIT_FUSED_KERNELS": "npu"})


def test_register_extends_to_another_model_type(tiny_model: Callable[..., Any]) -> None:
    llama = patcher.ModelTargets("llama", "transformers.models.llama.modeling_llama", "LlamaRMSNorm", "LlamaMLP")
    patcher.register(llama)
    try:
        report = patcher.apply("reference", model_types=["llama"])
        assert [a.target for a in report.actions if a.action == "patched"] == [
            "LlamaRMSNorm.forward",
            "LlamaMLP.forward",
            "apply_rotary_pos_emb",
        ]
        patcher.revert(["llama"])
    finally:
        patcher.MODELS.pop("llama")
