"""Swap transformers' Qwen2/Qwen3 RMSNorm, SwiGLU MLP and RoPE for the device's fused ops, keyed by ``model_type``.

Why monkey-patch module attributes (like verl's ``npu_patch.py`` and liger) instead of wrapping model instances: verl
builds models in many places (actor, ref, critic, reward, FSDP meta init), and all of them resolve
``Qwen3RMSNorm.forward`` / ``modeling_qwen3.apply_rotary_pos_emb`` at call time, so one patch per process covers
every model that process will ever build. :mod:`npu_kernels.auto` applies it on import, which verl's
``VERL_USE_EXTERNAL_MODULES`` hook (in ``verl/__init__.py``) does in the driver and in every Ray worker.

Rules, per target (a class's ``forward`` or a module function):

* transformers' own code -> replaced by the kit's;
* already the kit's with the same backend -> left alone (applying twice is applying once);
* verl's ``npu_patch.py`` version -> kept, unless it is a known gap (:data:`VERL_GAPS`), then replaced;
* anything else (liger's own patching, a user's) -> kept: never stack two fusions.

Every decision is logged in one line (:meth:`PatchReport.summary`), and :func:`revert` restores what was replaced.

Environment (read by :func:`apply_from_env`):

* ``KIT_FUSED_KERNELS``: ``auto`` (default: npu on NPU, liger on CUDA if installed, else reference), ``off`` (also
  ``0``/``false``/``none``), or a backend name to force one.
* ``KIT_FUSED_OPS``: comma-separated subset of ``rms_norm,rope,swiglu`` (default all), e.g. to bisect numerics.

CLI: ``python -m npu_kernels.patcher`` applies from the environment and prints the report.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from npu_kernels.ops import OP_NAMES, BackendUnavailable, KernelOps, load, select
from platforms.cli_errors import entry_point

logger = logging.getLogger(__name__)

BACKEND_ENV = "KIT_FUSED_KERNELS"
OPS_ENV = "KIT_FUSED_OPS"
_OFF_VALUES = frozenset({"off", "0", "false", "no", "none", "disable", "disabled"})

#: verl 0.6.1's patch module; imported by ``verl/__init__.py`` only when torch.npu is available.
VERL_NPU_PATCH = "verl.models.transformers.npu_patch"

#: (op, verl function name) -> why the kit replaces it. Everything else verl patched is kept as verl made it.
VERL_GAPS: dict[tuple[str, str], str] = {
    ("rms_norm", "rms_norm_forward"): (
        "verl 0.6.1 does not cast the input to the weight dtype, which npu_rms_norm requires (fixed upstream later)"
    ),
}

# Attributes the kit sets on its replacement functions.
_BACKEND_ATTR = "__npu_kernels_backend__"
_PREVIOUS_ATTR = "__npu_kernels_previous__"

_SILU_ACTS = frozenset({"silu", "swish"})


@dataclass(frozen=True)
class ModelTargets:
    """Where one ``model_type`` keeps the three patchable pieces; None for a piece the model lacks."""

    model_type: str
    module: str
    rms_norm_class: str | None
    mlp_class: str | None
    rope_function: str | None = "apply_rotary_pos_emb"


#: Registry keyed by ``config.model_type``; add a model with :func:`register` (Llama-like models fit as they are).
MODELS: dict[str, ModelTargets] = {}


def register(targets: ModelTargets) -> None:
    MODELS[targets.model_type] = targets


register(ModelTargets("qwen2", "transformers.models.qwen2.modeling_qwen2", "Qwen2RMSNorm", "Qwen2MLP"))
register(ModelTargets("qwen3", "transformers.models.qwen3.modeling_qwen3", "Qwen3RMSNorm", "Qwen3MLP"))


@dataclass(frozen=True)
class Action:
    """What happened to one target: ``patched``, ``unchanged`` (already the kit's), ``kept`` or ``skipped``."""

    model_type: str
    op: str
    target: str
    action: str
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.action} {self.target}" + (f" ({self.detail})" if self.detail else "")


@dataclass
class PatchReport:
    backend: str
    actions: list[Action] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def by_target(self) -> dict[str, Action]:
        return {f"{a.model_type}.{a.target}": a for a in self.actions}

    def summary(self) -> str:
        parts = [f"npu_kernels: backend {self.backend}"]
        for model_type in dict.fromkeys(a.model_type for a in self.actions):
            items = "; ".join(str(a) for a in self.actions if a.model_type == model_type)
            parts.append(f"{model_type}: {items}")
        parts.extend(f"note: {note}" for note in self.notes)
        return " | ".join(parts)


@dataclass(frozen=True)
class _Target:
    op: str
    holder: Any  # a class (forward) or a module (function)
    attr: str
    label: str


def _targets(spec: ModelTargets, module: Any) -> list[_Target]:
    found: list[_Target] = []
    for op, cls_name in (("rms_norm", spec.rms_norm_class), ("swiglu", spec.mlp_class)):
        if cls_name and hasattr(module, cls_name):
            found.append(_Target(op, getattr(module, cls_name), "forward", f"{cls_name}.forward"))
    if spec.rope_function and hasattr(module, spec.rope_function):
        found.append(_Target("rope", module, spec.rope_function, spec.rope_function))
    return found


def _mark(fn: Callable[..., Any], target: _Target, ops: KernelOps, previous: Callable[..., Any]) -> Any:
    fn.__name__ = target.attr
    fn.__qualname__ = target.label
    fn.__doc__ = f"npu_kernels ({ops.name} backend) replacement of transformers' {target.label}."
    setattr(fn, _BACKEND_ATTR, ops.name)
    setattr(fn, _PREVIOUS_ATTR, previous)
    return fn


def _rms_norm_forward(ops: KernelOps) -> Callable[..., Any]:
    rms_norm = ops.rms_norm

    def forward(self: Any, hidden_states: Any) -> Any:
        return rms_norm(hidden_states, self.weight, self.variance_epsilon)

    return forward


def _mlp_forward(ops: KernelOps, previous: Callable[..., Any]) -> Callable[..., Any]:
    swiglu = ops.swiglu

    def forward(self: Any, x: Any) -> Any:
        # SwiGLU fusion is only silu(gate) * up; a config with another activation keeps the code it replaced.
        if getattr(getattr(self, "config", None), "hidden_act", "silu") not in _SILU_ACTS:
            return previous(self, x)
        return self.down_proj(swiglu(self.gate_proj(x), self.up_proj(x)))

    return forward


def _rope_function(ops: KernelOps) -> Callable[..., Any]:
    rope = ops.rope

    def apply_rotary_pos_emb(q: Any, k: Any, cos: Any, sin: Any, position_ids: Any = None, unsqueeze_dim: int = 1):
        return rope(q, k, cos, sin, unsqueeze_dim)

    return apply_rotary_pos_emb


def _replacement(target: _Target, ops: KernelOps, previous: Callable[..., Any]) -> Callable[..., Any]:
    if target.op == "rms_norm":
        fn = _rms_norm_forward(ops)
    elif target.op == "swiglu":
        fn = _mlp_forward(ops, previous)
    else:
        fn = _rope_function(ops)
    return _mark(fn, target, ops, previous)


def kit_backend_of(fn: Any) -> str | None:
    """The kit backend a function was built for, or None when it is not the kit's."""
    return getattr(fn, _BACKEND_ATTR, None)


def _describe(fn: Any) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', getattr(fn, '__name__', repr(fn)))}"


def _decide(target: _Target, current: Any, spec: ModelTargets, ops: KernelOps) -> tuple[str, Any, str]:
    """(action, function the kit's replacement falls back to / restores, detail)."""
    owner_module = getattr(current, "__module__", None)
    kit_backend = kit_backend_of(current)
    if kit_backend is not None:
        previous = getattr(current, _PREVIOUS_ATTR)
        if kit_backend == ops.name:
            return "unchanged", previous, "already patched"
        return "patched", previous, f"was the kit's {kit_backend} backend"
    if owner_module == spec.module:
        detail = ""
        if target.op == "rope" and VERL_NPU_PATCH in sys.modules:
            detail = "verl's npu_patch leaves it unfused"
        return "patched", current, detail
    name = getattr(current, "__name__", "?")
    if owner_module == VERL_NPU_PATCH:
        gap = VERL_GAPS.get((target.op, name))
        if gap is None:
            return "kept", current, f"verl npu_patch.{name} already fuses it"
        return "patched", current, f"replaced verl npu_patch.{name}: {gap}"
    return "kept", current, f"already replaced by {_describe(current)}"


def _parse_ops(enabled_ops: Iterable[str] | None) -> frozenset[str]:
    if enabled_ops is None:
        return frozenset(OP_NAMES)
    chosen = frozenset(op.strip() for op in enabled_ops if op.strip())
    unknown = chosen - set(OP_NAMES)
    if unknown:
        raise ValueError(f"unknown op(s) {', '.join(sorted(unknown))}; known: {', '.join(OP_NAMES)}")
    return chosen


def apply(
    ops: KernelOps | str | None = None,
    model_types: Sequence[str] | None = None,
    enabled_ops: Iterable[str] | None = None,
    notes: Sequence[str] = (),
) -> PatchReport:
    """Patch ``model_types`` (default: all registered) with ``ops`` (a bundle, a backend name, or None = detect).

    Does not import verl: callers inside a verl process should go through :func:`apply_from_env` (or import
    :mod:`npu_kernels.auto`), which first lets verl's own npu_patch land so it can never overwrite the kit's.
    """
    notes = list(notes)
    if ops is None:
        ops, selection_notes = select()
        notes.extend(selection_notes)
    elif isinstance(ops, str):
        ops = load(ops)
    enabled = _parse_ops(enabled_ops)
    report = PatchReport(backend=ops.describe(), notes=notes)
    for model_type in model_types or list(MODELS):
        spec = MODELS[model_type]
        try:
            module = importlib.import_module(spec.module)
        except ImportError as exc:
            report.actions.append(Action(model_type, "*", spec.module, "skipped", f"not importable: {exc}"))
            continue
        for target in _targets(spec, module):
            if target.op not in enabled:
                report.actions.append(Action(model_type, target.op, target.label, "skipped", f"{OPS_ENV} excludes it"))
                continue
            current = getattr(target.holder, target.attr)
            action, previous, detail = _decide(target, current, spec, ops)
            if action == "patched":
                setattr(target.holder, target.attr, _replacement(target, ops, previous))
            report.actions.append(Action(model_type, target.op, target.label, action, detail))
    logger.info("%s", report.summary())
    return report


def revert(model_types: Sequence[str] | None = None) -> list[str]:
    """Put back whatever each kit replacement replaced (transformers' code or verl's); returns the targets restored."""
    restored: list[str] = []
    for model_type in model_types or list(MODELS):
        spec = MODELS[model_type]
        module = sys.modules.get(spec.module)
        if module is None:
            continue
        for target in _targets(spec, module):
            current = getattr(target.holder, target.attr)
            if kit_backend_of(current) is not None:
                setattr(target.holder, target.attr, getattr(current, _PREVIOUS_ATTR))
                restored.append(f"{model_type}.{target.label}")
    return restored


def state(model_types: Sequence[str] | None = None) -> dict[str, str]:
    """``model_type.target`` -> who provides it now: ``kit:<backend>``, ``transformers``, ``verl`` or the module."""
    result: dict[str, str] = {}
    for model_type in model_types or list(MODELS):
        spec = MODELS[model_type]
        module = importlib.import_module(spec.module)
        for target in _targets(spec, module):
            current = getattr(target.holder, target.attr)
            owner = getattr(current, "__module__", "?")
            if kit_backend_of(current):
                owner = f"kit:{kit_backend_of(current)}"
            elif owner == spec.module:
                owner = "transformers"
            elif owner == VERL_NPU_PATCH:
                owner = "verl"
            result[f"{model_type}.{target.label}"] = owner
    return result


def preload_verl_npu_patch() -> str:
    """Import verl's npu_patch now if verl would import it in this process; return what happened.

    ``verl/__init__.py`` runs the ``VERL_USE_EXTERNAL_MODULES`` imports *before* it imports its npu_patch, which
    assigns ``Qwen3RMSNorm.forward`` & co. unconditionally: left alone, it would overwrite the kit's fix a moment
    after it was applied. Importing it first (the module is cached, so verl's own import becomes a no-op) fixes the
    order, and the kit then sees verl's patches and keeps or replaces them by the rules above.
    """
    if VERL_NPU_PATCH in sys.modules:
        return "verl npu_patch already imported"
    if importlib.util.find_spec("verl") is None:
        return "verl not installed"
    try:
        from verl.utils.device import is_npu_available
    except Exception as exc:  # noqa: BLE001  (a broken verl must not stop the kit's own patching)
        return f"verl.utils.device import failed: {type(exc).__name__}: {exc}"
    if not is_npu_available:
        return "verl sees no NPU and will not import its npu_patch"
    try:
        importlib.import_module(VERL_NPU_PATCH)
    except Exception as exc:  # noqa: BLE001  (verl itself will raise it again on its own import)
        logger.warning("importing %s failed: %s: %s", VERL_NPU_PATCH, type(exc).__name__, exc)
        return f"verl npu_patch import failed: {type(exc).__name__}"
    return "verl npu_patch imported first"


def apply_from_env(environ: Mapping[str, str] | None = None) -> PatchReport:
    """Apply according to ``KIT_FUSED_KERNELS`` / ``KIT_FUSED_OPS``; what :mod:`npu_kernels.auto` runs."""
    environ = os.environ if environ is None else environ
    requested = environ.get(BACKEND_ENV, "auto").strip().lower() or "auto"
    if requested in _OFF_VALUES:
        report = PatchReport(backend="off", notes=[f"{BACKEND_ENV}={environ[BACKEND_ENV]}: transformers' code kept"])
        logger.info("%s", report.summary())
        return report
    notes: list[str] = []
    if requested == "auto":
        ops, notes = select()
    else:
        try:
            ops = load(requested)
        except BackendUnavailable as exc:
            raise RuntimeError(f"{BACKEND_ENV}={requested}: {exc}") from exc
    if ops.after_verl_npu_patch:
        notes.append(preload_verl_npu_patch())
    enabled = environ.get(OPS_ENV)
    return apply(ops, enabled_ops=enabled.split(",") if enabled else None, notes=notes)


@entry_point("python -m npu_kernels.patcher")
def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m npu_kernels.patcher",
        description=f"Apply the fused kernels as {BACKEND_ENV}/{OPS_ENV} say and print what was patched.",
    )
    parser.add_argument("--state", action="store_true", help="only print who provides each target, patch nothing")
    args = parser.parse_args(argv)
    if not args.state:
        print(apply_from_env().summary())
    for key, owner in state().items():
        print(f"{key}: {owner}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
