"""The values a run is given against what their readers take (issue 44): optimizer, sampling and batch values against
their domains, the devices per node against the profile, and the kit's own environment variables.

Why: ``actor_rollout_ref.actor.optim.lr=-1`` was planned as "lr -1" and ``trainer.n_gpus_per_node=16`` on ``--hw a2``
as "1 x 16 NPU devices" on an 8-NPU node; verl asserts some of these only inside its workers (``clip_ratio_c > 1``
in the policy loss), takes others silently (a negative learning rate ascends the loss; a top_p of 0 or above 1 is
refused by vLLM at the first rollout), and Ray waits for devices a node never has. The whole numbers the planner
divides by are :data:`recipes.launch.planning.facts.COUNT_KEYS`' (checked before any arithmetic); this table holds the
rest.

The variables: ``KIT_FUSED_KERNELS=npuu`` was passed into Ray's job environment as given, and every worker's
``import npu_kernels.auto`` then ended in a ``ValueError`` traceback, after the job had its nodes. Each variable a
process of the run reads is checked here from the launcher's environment and from the job's ``runtime_env``
(``+ray_kwargs.ray_init.runtime_env.env_vars.X=...``), whichever the workers get, with the readers' own value sets
(:mod:`npu_kernels.patcher`, :mod:`npu_kernels.ops`, ``platforms/cpu.py``, ``recipes/launch/run_inputs/mounts.py``,
``recipes/retool/verify.py``), so a new backend or op is allowed the day it exists. ``KIT_HW``/``KIT_DEVICE`` and
``KIT_RESTART_NODE_WAIT_S`` are refused by the launcher's own arguments already; ``KIT_IFNAME`` is any name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from omegaconf import DictConfig, OmegaConf

from platforms import HardwareProfile
from platforms.base import RL_JOB_ENV_KEY

#: A domain: (test, what the value must be).
Domain = tuple[Callable[[float], bool], str]
POSITIVE: Domain = (lambda v: v > 0, "must be > 0")
NON_NEGATIVE: Domain = (lambda v: v >= 0, "must be >= 0")
PROBABILITY: Domain = (lambda v: 0 < v <= 1, "must be in (0, 1]")
FRACTION: Domain = (lambda v: 0 <= v <= 1, "must be in [0, 1]")
COUNT: Domain = (lambda v: v >= 1 and float(v).is_integer(), "must be a whole number >= 1")
ABOVE_ONE: Domain = (lambda v: v > 1, "must be > 1 (verl's dual-clip bound asserts it in the policy loss)")

_ROLLOUT = "actor_rollout_ref.rollout"
_ACTOR = "actor_rollout_ref.actor"
#: key -> domain, by phase. Unset (null) values are verl's defaults and not checked.
DOMAINS: dict[str, dict[str, Domain]] = {
    "rl": {
        f"{_ACTOR}.optim.lr": POSITIVE,
        f"{_ACTOR}.optim.weight_decay": NON_NEGATIVE,
        f"{_ACTOR}.optim.lr_warmup_steps_ratio": FRACTION,
        f"{_ACTOR}.clip_ratio": NON_NEGATIVE,
        f"{_ACTOR}.clip_ratio_low": NON_NEGATIVE,
        f"{_ACTOR}.clip_ratio_high": NON_NEGATIVE,
        f"{_ACTOR}.clip_ratio_c": ABOVE_ONE,
        f"{_ACTOR}.kl_loss_coef": NON_NEGATIVE,
        f"{_ACTOR}.entropy_coeff": NON_NEGATIVE,
        f"{_ACTOR}.grad_clip": POSITIVE,
        f"{_ACTOR}.ppo_epochs": COUNT,
        f"{_ACTOR}.ppo_micro_batch_size_per_gpu": COUNT,
        f"{_ACTOR}.ppo_max_token_len_per_gpu": COUNT,
        f"{_ROLLOUT}.temperature": NON_NEGATIVE,
        f"{_ROLLOUT}.top_p": PROBABILITY,
        f"{_ROLLOUT}.gpu_memory_utilization": PROBABILITY,
        f"{_ROLLOUT}.log_prob_micro_batch_size_per_gpu": COUNT,
        f"{_ROLLOUT}.val_kwargs.temperature": NON_NEGATIVE,
        f"{_ROLLOUT}.val_kwargs.top_p": PROBABILITY,
        f"{_ROLLOUT}.val_kwargs.n": COUNT,
        f"{_ROLLOUT}.multi_turn.max_assistant_turns": COUNT,
        f"{_ROLLOUT}.agent.num_workers": COUNT,
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": COUNT,
    },
    "sft": {
        "optim.lr": POSITIVE,
        "optim.weight_decay": NON_NEGATIVE,
        "optim.warmup_steps_ratio": FRACTION,
        "optim.clip_grad": POSITIVE,
        "data.max_length": COUNT,
    },
}


def domain_problems(cfg: DictConfig, phase: str) -> list[str]:
    """Each value of :data:`DOMAINS` outside its domain, or not a number, named with the key and the value."""
    errors = []
    for key, (test, rule) in DOMAINS[phase].items():
        value = OmegaConf.select(cfg, key)
        if value is None:
            continue
        try:
            number = float(value)
            valid = not isinstance(value, bool) and test(number)
        except (TypeError, ValueError):
            valid = False
        if not valid:
            errors.append(f"{key}={value!r} {rule}")
    return errors


def device_problems(cfg: DictConfig, profile: HardwareProfile) -> list[str]:
    """``trainer.n_gpus_per_node`` above what a node of the profile has: Ray (RL) would wait for devices that never
    come, torchrun (SFT) would start ranks on devices that do not exist."""
    have = profile.devices_per_node
    value = OmegaConf.select(cfg, "trainer.n_gpus_per_node")
    if not have or value is None or isinstance(value, bool):
        return []
    try:
        asked = int(value)
    except (TypeError, ValueError):
        return []  # a count that is not a number is facts.bad_counts' to report
    if asked <= have:
        return []
    return [
        f"trainer.n_gpus_per_node={asked}: a node of the {profile.name} profile has {have} devices; use at most "
        f"{have} per node and trainer.nnodes for more"
    ]


# ------------------------------------------------------------------------------------------- the kit's variables


def _fused_kernels(value: str) -> str | None:
    from npu_kernels import patcher
    from npu_kernels.ops import BACKENDS

    allowed = ["auto", *BACKENDS, *sorted(patcher._OFF_VALUES)]  # noqa: SLF001  (the reader's own set)
    return None if value.strip().lower() in allowed else f"is not one of {', '.join(allowed)}"


def _fused_ops(value: str) -> str | None:
    from npu_kernels.ops import OP_NAMES

    chosen = [op.strip() for op in value.split(",") if op.strip()]
    unknown = [op for op in chosen if op not in OP_NAMES]
    if unknown or not chosen:
        return f"names {', '.join(unknown) or 'no op'}: a comma-separated subset of {', '.join(OP_NAMES)} is expected"
    return None


def _switch(value: str) -> str | None:
    return None if value.strip() in ("0", "1") else "must be 0 or 1"


def _workers(value: str) -> str | None:
    return None if value.strip().isdigit() and int(value) >= 1 else "must be a whole number >= 1 (its int() raises)"


#: Variable -> the rule its readers apply: None when the value is accepted, else what is wrong.
ENV_RULES: dict[str, Callable[[str], str | None]] = {
    "KIT_FUSED_KERNELS": _fused_kernels,  # npu_kernels/patcher.py apply_from_env, in every process
    "KIT_FUSED_OPS": _fused_ops,  # npu_kernels/patcher.py _parse_ops
    "KIT_ALLOW_EPHEMERAL_CKPT": _switch,  # recipes/launch/run_inputs/paths.py check_ckpt_dir ("1" allows)
    "KIT_CPU_TCMALLOC": _switch,  # platforms/cpu.py allocator ("0" switches it off)
    "RETOOL_MATH_VERIFY_WORKERS": _workers,  # recipes/retool/verify.py, int() at import in every reward worker
}


def env_problems(cfg: DictConfig, environ: Mapping[str, str]) -> list[str]:
    """Each of :data:`ENV_RULES`' variables, from ``environ`` or the job's env_vars, whose value its reader refuses."""
    job = OmegaConf.select(cfg, RL_JOB_ENV_KEY) or {}
    errors = []
    for name, rule in ENV_RULES.items():
        for where, values in (("", environ), (f"{RL_JOB_ENV_KEY}.", job)):
            value = values.get(name)
            if value is None or not str(value).strip() or (where and str(value).strip() == environ.get(name, "")):
                continue  # unset, or the launcher's own copy of the environment's value (said once)
            wrong = rule(str(value))
            if wrong:
                errors.append(f"{where}{name}={value}: {wrong}")
    return errors


def problems(cfg: DictConfig, phase: str, profile: HardwareProfile, environ: Mapping[str, str]) -> list[str]:
    """Every value rule of this module, one call for the plan's checks: domains, devices per node, the variables."""
    return domain_problems(cfg, phase) + device_problems(cfg, profile) + env_problems(cfg, environ)
