"""Turn (recipe, hardware profile, stack, user overrides, environment) into the exact verl command, and check it first.

One function, :func:`build`, serves both the dry run and the real launch, so what a dry run approves is byte for
byte what runs. The command is assembled from, in order: the hardware profile (``profile=<hw>``), the device
abstraction's overrides and devices per node (:mod:`platforms`), the stack's choices (its SFT trainer config, where
its verl reads the reward: :func:`recipes.launch.planning.compose.stack_overrides`), the environment inputs
(:mod:`recipes.launch.run_inputs.inputs`), the kit's own files (reward, tool config), and last the user's overrides,
which win: any key the user sets drops the launcher's value for it.

The stack is an argument, never read from the environment here: a caller plans either stack in one process. Whether
this interpreter's verl is the stack's is the entry point's question (:func:`check_installed`, which
``recipes.launch.cli`` asks before it plans): a library caller may plan a stack it does not run.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from platforms import PROFILES, current_platform, stacks
from platforms.cli_errors import OVERRIDE_KEY, UsageError  # the request itself is wrong: a bad override, ...
from platforms.stacks import Stack
from recipes.launch.cluster import multinode, ray_cluster
from recipes.launch.planning import checks, compose, facts, legacy_keys, reward_key
from recipes.launch.planning import parity as parity_settings
from recipes.launch.planning.compose import ConfigError
from recipes.launch.planning.facts import Facts
from recipes.launch.run_inputs import inputs, paths
from recipes.launch.run_inputs.catalog import CONFIG_DIR, Recipe
from recipes.launch.sizing import ray_cpus
from recipes.launch.supervision import trace
from recipes.retool import AGENT_LOOP_CONFIG_PATH, REWARD_PATH, TOOL_CONFIG_PATH

RL_ENTRY = "verl.trainer.main_ppo"
#: What _run_dir_overrides puts in the command's environment, read when the tracker and the trace store start,
#: after the driver's imports: a prewarmed driver may take them late (recipes.launch.supervision.prewarm).
LATE_ENV = frozenset({"TENSORBOARD_DIR", trace.URI_ENV, trace.ALLOW_FILE_STORE_ENV})

_SAFE_VALUE = re.compile(r"[\w./:@+\-]+")
#: Plain values Hydra's override grammar types as int, float, bool or null (case-insensitive, as Hydra reads them).
_NON_STRING = re.compile(r"[+-]?(\d[\d_]*(\.\d*)?([eE][+-]?\d+)?|\.\d+|inf|nan)|true|false|null", re.IGNORECASE)


def hydra_override(key: str, value: object, *, string: bool = False) -> str:
    """``key=value`` in Hydra's override grammar; values outside a safe character set are single-quoted.

    ``string``: also quote what Hydra would type as a number, bool or null, so ``1024`` stays a string (Ray refuses a
    runtime_env whose env_vars are not ``Dict[str, str]``)."""
    text = str(value)
    if _SAFE_VALUE.fullmatch(text) and not (string and _NON_STRING.fullmatch(text)):
        return f"{key}={text}"
    escaped = text.replace("\\", "\\\\").replace("'", "\\'")
    return f"{key}='{escaped}'"


def override_key(override: str) -> str | None:
    """The config key an override sets (``+a.b=1`` and ``a.b=1`` both set ``a.b``); None for a malformed one."""
    match = OVERRIDE_KEY.match(override.strip())
    return match.group(1).strip() if match else None


@dataclass
class Plan:
    """Everything a dry run prints and a launch executes: the command, the config it runs, and its numbers
    (:attr:`facts`, derived once), which :mod:`recipes.launch.planning.report` formats and the checks read."""

    recipe: Recipe
    hw: str
    stack: Stack  # the stack it is planned for: its verl's keys, its choices, the --stack of printed commands
    scale: str = "full"  # the config group's choice as Hydra made it (profile/cpu.yaml defaults it to smoke)
    scale_given: bool = False  # chosen on the command line (--scale), not the profile's default
    parity: bool = False  # --parity: every kit numerical change off (recipes.launch.planning.parity)
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # set for the command only (shown as an `env` prefix)
    command: list[str] = field(default_factory=list)  # ``env K=V ...`` (when ``env`` has any) + ``argv``: what runs
    cfg: DictConfig | None = None  # resolved
    inputs: list[inputs.Input] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    facts: Facts | None = None  # None until the counts the arithmetic divides by passed (facts.bad_counts)
    env_command: str = ""  # what the command runs after: the profile's environment for the phase
    joins_cluster: bool = False  # an RL run that connects to a running Ray cluster instead of starting its own


def _device_overrides(recipe: Recipe, hw: str, stack: Stack) -> list[str]:
    # the stack's choices (which SFT trainer config the SFT recipes extend, recipes/config/verl_sft/; where the RL
    # reward goes), then the platform's
    return [f"profile={hw}", *compose.stack_overrides(recipe, stack), *PROFILES[hw].verl_overrides(recipe.phase, stack)]


def check_installed(stack: Stack) -> None:
    """This interpreter can run ``stack``: its verl is the stack's. An entry point's check before it plans (one line,
    exit 2): :func:`build` does not ask, so a library caller (a test, a tool) may plan either stack from one process.
    Every recipe is ported to every stack (the SFT recipes through recipes/config/verl_sft/<stack>.yaml)."""
    problem = stacks.installed_problem(stack)
    if problem:
        raise UsageError(problem, stacks.venv_hint(stack))


def check_stack_overrides(user: Sequence[str], phase: str, stack: Stack) -> None:
    """No override sets a key the stack's verl never reads (the reward at the other stack's key, a legacy key): one
    line, exit 2, before any work."""
    for problem in [
        *reward_key.user_override_problems(list(user), stack),
        *legacy_keys.user_override_problems(user, phase, stack),
    ]:
        raise UsageError(problem)


def _without(ours: Sequence[str], user_keys: set[str]) -> list[str]:
    return [item for item in ours if override_key(item) not in user_keys]


def check_user_overrides(user: Sequence[str]) -> set[str]:
    """The keys the user's overrides set; a malformed one, or one that picks the profile, scale or stack (each has
    its option, and the launcher's own choices follow the option), is refused."""
    keys = set()
    for item in user:
        if "\n" in item or "\r" in item:
            raise UsageError(f"override {item!r} contains a line break")
        key = override_key(item)
        if key is None:
            raise UsageError(f"{item!r} is not a Hydra override (key=value)")
        if key == "profile":
            raise UsageError("choose the hardware profile with --hw (or KIT_HW), not a profile= override")
        if key == "scale":
            raise UsageError("choose the scale with --scale full|smoke, not a scale= override")
        if key == "stack":  # the launcher's keys, reward placement and verl check would still be the option's
            raise UsageError("choose the stack with --stack, not a stack= override")
        keys.add(key)
    return keys


#: Variables every Ray worker of an RL job must see when set here: the fused-kernel hook and its switches
#: (npu_kernels.auto reads them in every process), and the parity settings of the tool.
#: verl >= 0.9 also reads its platform and engine selectors in each worker (platforms/verl_platform.py).
_RL_JOB_VARS = (
    "VERL_USE_EXTERNAL_MODULES",
    "VERL_PLATFORM",
    "VERL_ENGINE_DEVICE",
    "KIT_FUSED_KERNELS",
    "KIT_FUSED_OPS",
    *parity_settings.RL_JOB_ENV,
)


def _rl_job_env(environ: Mapping[str, str]) -> dict[str, str]:
    """Variables every Ray worker of the job must see, whichever node it lands on."""
    return {name: environ[name].strip() for name in _RL_JOB_VARS if environ.get(name, "").strip()}


_NO_COMPOSE = "the config does not compose (Hydra, as verl would run it):\n"


def build(
    recipe: Recipe,
    hw: str,
    stack: Stack,
    user_overrides: Sequence[str] = (),
    *,
    scale: str | None = None,
    parity: bool = False,
    path_check: bool = True,
    for_launch: bool = False,
    environ: Mapping[str, str] | None = None,
) -> Plan:
    """Compose, validate and check for ``stack``; never raises for a bad config (see ``Plan.errors``), only for bad
    usage. Reads no KIT_STACK and does not check the installed verl (:func:`check_installed` is the entry point's).

    ``scale`` (full, smoke) overrides the profile's default scale (the ``scale`` config group)."""
    environ = os.environ if environ is None else environ
    if hw not in PROFILES:
        raise UsageError(f"unknown hardware profile {hw!r}; choose one of {', '.join(PROFILES)}")
    user = list(user_overrides)
    user_keys = check_user_overrides(user)
    check_stack_overrides(user, recipe.phase, stack)
    plan = Plan(recipe, hw, stack, scale_given=scale is not None, parity=parity)
    plan.env_command = PROFILES[hw].env_command(recipe.phase, stack)
    if parity:  # the reference's numerics on the kit's stack (recipes.launch.planning.parity)
        environ = {**environ, **parity_settings.ENV, **(parity_settings.RL_JOB_ENV if recipe.phase == "rl" else {})}
        plan.env.update(parity_settings.ENV)
    device = _device_overrides(recipe, hw, stack) + ([f"scale={scale}"] if scale else [])

    # First composition: what the choices and the user's overrides make of the experiment name (it names
    # CKPT_DIR) and of the scale (it picks the default model), before the inputs are known.
    try:
        first, choices = compose.compose_with_choices(recipe, _without(device, user_keys) + user)
    except ConfigError as exc:
        plan.errors.append(f"{_NO_COMPOSE}{exc}")
        return plan
    plan.scale = choices.get("scale", plan.scale)
    plan.joins_cluster = ray_cpus.joins_a_cluster(recipe.phase, int(first.trainer.nnodes), environ)
    if plan.joins_cluster:
        device = ray_cpus.for_existing_cluster(device, user_keys)
    plan.inputs = inputs.resolve(recipe, hw, stack, environ, plan.scale)
    ours = device + _kit_overrides(plan, environ)  # before _run_dir_overrides adds CKPT_DIR to plan.inputs
    overrides = _without(ours + _run_dir_overrides(plan, first, user_keys, environ), user_keys) + user
    try:
        plan.cfg = compose.resolved(compose.compose(recipe, overrides))
    except ConfigError as exc:
        plan.errors.append(f"{_NO_COMPOSE}{exc}")
        return plan
    plan.inputs = [_effective(item, plan.cfg, user_keys) for item in plan.inputs]
    if _check(plan, path_check=path_check, for_launch=for_launch, environ=environ):
        plan.argv = _argv(plan, overrides, environ)
        plan.command = (["env", *(f"{k}={v}" for k, v in plan.env.items())] if plan.env else []) + plan.argv
    return plan


def _kit_overrides(plan: Plan, environ: Mapping[str, str]) -> list[str]:
    """The environment inputs as overrides, and for RL the kit's reward, tool and agent loop configs (absolute
    paths: verl resolves a relative one against each node's working directory, agent_loop/utils.py:18-47), job
    variables and parity."""
    ours = [hydra_override(i.override_key, i.value) for i in plan.inputs]
    if plan.recipe.phase == "rl":
        ours += [
            hydra_override(f"{plan.stack.verl.reward_key}.path", REWARD_PATH),
            hydra_override("actor_rollout_ref.rollout.multi_turn.tool_config_path", TOOL_CONFIG_PATH),
            hydra_override("actor_rollout_ref.rollout.agent.agent_loop_config_path", AGENT_LOOP_CONFIG_PATH),
        ]
        ours += [hydra_override(f"+{inputs.RL_ENV_KEY}.{k}", v, string=True) for k, v in _rl_job_env(environ).items()]
        ours += list(parity_settings.rl_overrides(plan.stack.verl.reward_key)) if plan.parity else []
    return ours


def _run_dir_overrides(plan: Plan, first: DictConfig, user_keys: set[str], environ: Mapping[str, str]) -> list[str]:
    """What the run keeps with its checkpoints: CKPT_DIR (an input), the TensorBoard dir and the rollout traces.

    ``first`` is the first composition: its experiment name names CKPT_DIR. Sets the command's ``plan.env`` too."""
    ckpt = inputs.ckpt_input(str(first.trainer.experiment_name), environ)
    plan.inputs.append(ckpt)
    ours = [hydra_override(ckpt.key, ckpt.value)]
    ckpt_dir = str(first.trainer.default_local_dir) if ckpt.key in user_keys else ckpt.value
    tensorboard = environ.get("TENSORBOARD_DIR", "").strip() or str(Path(ckpt_dir) / "tensorboard")
    if plan.recipe.phase == "rl":
        ours.append(hydra_override(f"+{inputs.RL_ENV_KEY}.TENSORBOARD_DIR", tensorboard, string=True))
        # rollout traces kept with the run (recipes.launch.supervision.trace)
        traces = trace.job_env(first, ckpt_dir, environ)
        ours += [hydra_override(f"+{inputs.RL_ENV_KEY}.{k}", v, string=True) for k, v in traces.items()]
        plan.env.update(traces)
    plan.env["TENSORBOARD_DIR"] = tensorboard  # verl's tracker default is ./tensorboard_log: keep it with the run
    return ours


def _check(plan: Plan, *, path_check: bool, for_launch: bool, environ: Mapping[str, str]) -> bool:
    """Every check of the composed config; False when a count is bad (reported alone: the rest divides by them)."""
    cfg = plan.cfg
    assert cfg is not None
    rows = paths.parquet_rows(_as_list(cfg.data.train_files))
    profile = PROFILES[plan.hw]
    plan.facts, bad = facts.derive(
        cfg, plan.recipe, profile, plan.stack, rows, env=plan.env, environ=environ, path_check=path_check
    )
    if bad:  # a count the arithmetic divides by or fails to parse: reported alone
        plan.errors += bad
        return False
    assert plan.facts is not None
    complete = _validate(plan)
    errors, warnings = checks.check_plan(
        cfg, plan.recipe, profile, plan.stack, plan.facts, environ, path_check=path_check, layout=complete
    )
    plan.errors += errors
    plan.warnings += warnings
    if path_check:
        _check_paths(plan)
    if for_launch:
        _check_this_machine(plan, environ)
    else:
        _multi_node_notes(plan, environ)
    return True


def _effective(item: inputs.Input, cfg: DictConfig, user_keys: set[str]) -> inputs.Input:
    """An input as the composed config has it: a user override of its key beats the environment."""
    if item.key not in user_keys:
        return item
    return replace(item, value=str(OmegaConf.select(cfg, item.key)), source="override")


def _as_list(value: object) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]  # type: ignore[attr-defined]


def _validate(plan: Plan) -> bool:
    """verl's own validation of the config; False when required values are unset (then neither it nor the kit's
    layout checks run)."""
    cfg = plan.cfg
    assert cfg is not None
    missing = [i.key for i in plan.inputs if OmegaConf.select(cfg, i.key) in (None, "")]
    if missing:
        plan.errors.append(f"required values are unset: {', '.join(missing)}")
        return False
    try:
        if plan.recipe.phase == "rl":
            plan.checked += compose.validate_rl(cfg, plan.stack)
        else:
            plan.checked += compose.validate_sft(cfg, plan.stack)
    except ConfigError as exc:
        plan.errors.append(f"verl rejects the config: {exc}")
    assert plan.facts is not None
    heads = plan.facts.heads
    plan.checked.append(f"kit layout/batch checks (heads: {heads.attention}/{heads.kv} from {heads.source})")
    return True


def _source_of(plan: Plan, key: str) -> inputs.Input | None:
    for item in plan.inputs:
        if item.key == key:
            return item
    return None


def _messages_key(cfg: DictConfig, stack: Stack) -> tuple[str, str]:
    """(the column verl's SFT dataset reads the conversations from, the stack's key that names it: 0.6.1
    data.multiturn.messages_key, 0.9.1 data.messages_key; the recipes' sft.messages_key is placed there)."""
    key = stack.verl.sft_key("messages_key")
    return str(OmegaConf.select(cfg, key) or "messages"), key


def _check_paths(plan: Plan) -> None:
    cfg, phase = plan.cfg, plan.recipe.phase
    assert cfg is not None
    problems: list[paths.Problem] = []
    model_key = inputs.model_key(plan.recipe, plan.stack)
    problems += paths.check_model(str(OmegaConf.select(cfg, model_key)), _source_of(plan, model_key))
    for key in ("data.train_files", "data.val_files"):
        for item in _as_list(OmegaConf.select(cfg, key)):
            problems += paths.check_data(item, _source_of(plan, key), phase, _messages_key(cfg, plan.stack))
    for key, what in paths.OUTPUT_DIRS.items():  # the checkpoints, and the dumps a run writes beside them
        if OmegaConf.select(cfg, key):
            problems += paths.check_ckpt_dir(str(OmegaConf.select(cfg, key)), _source_of(plan, key), what)
    if phase == "rl":
        url_key = f"{inputs.RL_ENV_KEY}.RETOOL_SANDBOX_URL"
        url = plan.facts.sandbox_url if plan.facts else None
        if url:
            problems += paths.check_sandbox(url, _source_of(plan, url_key))
            # in-flight tool calls vs the sandbox's workers + queue (issue 14)
            from recipes.launch.sizing import capacity

            problems += capacity.check(cfg, url)
    plan.errors += [p.message for p in problems if p.error]
    plan.warnings += [p.message for p in problems if not p.error]
    plan.checked.append("paths" + (" and sandbox" if phase == "rl" else ""))


def _check_this_machine(plan: Plan, environ: Mapping[str, str]) -> None:
    """Only for a real launch: the profile's platform must be this machine's, with enough devices."""
    cfg = plan.cfg
    assert cfg is not None
    assert plan.facts is not None
    profile = PROFILES[plan.hw]
    platform = profile.platform
    nnodes, wanted = plan.facts.layout.nnodes, plan.facts.layout.per_node
    if plan.recipe.phase == "sft" and nnodes > 1:
        _torchrun_rendezvous(plan, nnodes, environ, on_node=True)
    if not platform.is_available():
        plan.errors.append(
            f"profile {plan.hw} runs on {platform.name}, but this machine's platform is {current_platform().name} "
            f"({platform.status_note() or 'not available'}). On an NPU host use the kit's image or source CANN's "
            "set_env.sh; to plan from here, add --dry-run."
        )
        return
    count = platform.device_count() if profile.devices_per_node else wanted  # CPU ranks are processes
    if count < wanted:
        smaller = [p.name for p in PROFILES.values() if p.platform is platform and p.devices_per_node == count]
        plan.errors.append(
            f"trainer.n_gpus_per_node={wanted} but this node has {count} visible {platform.ray_resource} devices"
            + (f" (an {smaller[0].upper()} node? use --hw {smaller[0]})" if smaller else "")
        )
    if plan.recipe.phase == "rl" and nnodes > 1:
        # verl would otherwise wait for a placement group that can never be scheduled
        address = environ.get("RAY_ADDRESS", "").strip() or None
        ray_problems = ray_cluster.cluster_problems(plan.hw, nnodes, address)
        plan.errors += [f"Ray: {p}" for p in ray_problems]
        url = plan.facts.sandbox_url
        if url and not ray_problems:
            # verl runs agent-loop workers on every node: each must reach the sandbox (issue 14, finding 1)
            reach = ray_cluster.sandbox_reach_problems(url, address)
            plan.errors += [f"sandbox: {p}" for p in reach]
        if not plan.errors:
            plan.checked.append(f"Ray cluster: {nnodes} live nodes" + (", each reaches the sandbox" if url else ""))
    if plan.recipe.phase == "sft" and nnodes > 1:
        missing = [name for name in ("MASTER_ADDR", "NODE_RANK") if not environ.get(name, "").strip()]
        if missing:
            plan.errors.append(
                f"trainer.nnodes={nnodes}: set {' and '.join(missing)} on every node "
                "(MASTER_ADDR = node 0's address, NODE_RANK = 0..nnodes-1)"
            )


def _multi_node_notes(plan: Plan, environ: Mapping[str, str]) -> None:
    """A dry run of a multi-node recipe: say what the real launch will require on the nodes."""
    assert plan.facts is not None
    nnodes = plan.facts.layout.nnodes
    if nnodes <= 1:
        return
    if plan.recipe.phase == "rl":
        plan.warnings.append(
            f"trainer.nnodes={nnodes}: start Ray on every node first (scripts/ray_cluster.sh head|worker --hw "
            f"{plan.hw}{plan.stack.cli_option}); the launch checks `scripts/ray_cluster.sh status --hw {plan.hw} "
            f"--nodes {nnodes}{plan.stack.cli_option}`"
        )
        url = plan.facts.sandbox_url
        plan.warnings += [w for w in [multinode.loopback_sandbox_warning(url, nnodes)] if w]
        return
    _torchrun_rendezvous(plan, nnodes, environ, on_node=False)
    if any(not environ.get(name, "").strip() for name in ("MASTER_ADDR", "NODE_RANK")):
        plan.warnings.append(
            f"trainer.nnodes={nnodes}: run this on every node with MASTER_ADDR (node 0's address) and NODE_RANK "
            f"(0..{nnodes - 1}) set"
        )


def _torchrun_rendezvous(plan: Plan, nnodes: int, environ: Mapping[str, str], *, on_node: bool) -> None:
    """Multi-node torchrun: rendezvous variables validated, socket interface in ``plan.env`` (multinode)."""
    found = multinode.torchrun_findings(plan.hw, nnodes, environ, on_node=on_node)
    plan.errors += found.errors
    plan.warnings += found.warnings
    plan.env.update(found.env)
    plan.checked += found.checked


def _argv(plan: Plan, overrides: Sequence[str], environ: Mapping[str, str]) -> list[str]:
    assert plan.cfg is not None
    config = ["--config-path", str(CONFIG_DIR), "--config-name", plan.recipe.config_name]
    if plan.recipe.phase == "sft":
        torchrun = multinode.torchrun_args(plan.cfg, environ)
        launcher = [sys.executable, "-m", "torch.distributed.run", *torchrun, "-m", plan.stack.verl.sft_module]
        return [*launcher, *config, *overrides]
    return [sys.executable, "-m", RL_ENTRY, *config, *overrides]
