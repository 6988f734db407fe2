"""Every recipe x hardware profile composes against the installed (patched) verl and passes verl's own validation.

In-process and shared: one import of verl and Hydra for all 30 compositions. Also the kit checks that must reject a
plan (a typo, broken batch arithmetic, parallelism that does not divide the heads, fused log-probs with Ulysses SP,
a misspelt reward knob), the precedence of user overrides over the launcher's values, and what the references fix.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from kit_testing import interpreter_stack

from platforms import CPU, PROFILES, current_platform
from platforms import PROFILE_NAMES as HARDWARE
from platforms.cpu import CPU_RAY_NUM_CPUS
from recipes.launch import cli
from recipes.launch.planning import plan, report
from recipes.launch.run_inputs import catalog
from recipes.launch.run_inputs.catalog import CONFIG_DIR, RECIPES
from recipes.retool import AGENT_LOOP_CONFIG_PATH, REWARD_PATH, TOOL_CONFIG_PATH

#: The stack this interpreter's verl serves, as an entry point resolves it without --stack or KIT_STACK.
STACK = interpreter_stack()  # the stack this venv's verl serves

ALL = [(name, hw) for name in RECIPES for hw in HARDWARE]
FAKE_HOME = "/nonexistent/kit-home"


@pytest.fixture(scope="module")
def plans() -> dict[tuple[str, str], plan.Plan]:
    return {
        (name, hw): plan.build(RECIPES[name], hw, STACK, path_check=False, environ={"HOME": FAKE_HOME})
        for name, hw in ALL
    }


def _build(name: str, hw: str, *overrides: str, **kwargs: object) -> plan.Plan:
    environ = kwargs.pop("environ", {"HOME": FAKE_HOME})
    return plan.build(RECIPES[name], hw, STACK, overrides, path_check=False, environ=environ, **kwargs)  # type: ignore[arg-type]


def test_every_recipe_has_every_profile() -> None:
    for name in RECIPES:
        assert (CONFIG_DIR / f"retool_{name}.yaml").is_file(), name
        for hw in HARDWARE:
            assert (CONFIG_DIR / "scaling" / name / f"{hw}.yaml").is_file(), (name, hw)
    assert sorted(p.stem for p in (CONFIG_DIR / "profile").glob("*.yaml")) == sorted(HARDWARE)


@pytest.mark.parametrize(("name", "hw"), ALL, ids=[f"{n}-{h}" for n, h in ALL])
def test_composes_and_validates(plans: dict[tuple[str, str], plan.Plan], name: str, hw: str) -> None:
    built = plans[(name, hw)]
    assert built.errors == [], "\n".join(built.errors)
    recipe, cfg = RECIPES[name], built.cfg
    assert cfg is not None
    assert ("verl validate_config" if recipe.phase == "rl" else "verl SFT trainer assertions") in built.checked
    profile = PROFILES[hw]
    # device facts come from the device abstraction, not from YAML
    assert cfg.trainer.device == profile.platform.verl_device
    assert cfg.trainer.n_gpus_per_node == (profile.devices_per_node or 2)
    assert cfg.trainer.experiment_name == recipe.experiment_name(hw)
    assert list(cfg.trainer.logger) == ["console", "tensorboard"]
    assert cfg.trainer.default_local_dir == f"{FAKE_HOME}/checkpoints/retool/{recipe.experiment_name(hw)}"
    argv = built.argv
    assert argv[argv.index("--config-name") + 1] == recipe.config_name
    assert argv[argv.index("--config-path") + 1] == str(CONFIG_DIR)
    assert f"profile={hw}" in argv
    for override in profile.platform.verl_overrides(recipe.phase, STACK):
        assert override in argv, override


@pytest.mark.parametrize(("name", "hw"), ALL, ids=[f"{n}-{h}" for n, h in ALL])
def test_compute_dtype_of_every_role(plans: dict[tuple[str, str], plan.Plan], name: str, hw: str) -> None:
    """cpu: every role computes in fp32 (bf16 GEMMs crawl without AVX512-BF16/AMX); npu/cuda keep verl's bf16."""
    cfg = plans[(name, hw)].cfg
    assert cfg is not None
    want = "fp32" if hw == "cpu" else "bf16"
    torch_name = {"fp32": "float32", "bf16": "bfloat16"}[want]
    if RECIPES[name].phase == "sft":
        mp = cfg.model.fsdp_config.mixed_precision  # the kit's SFT patch (0013)
        assert (mp.param_dtype, mp.reduce_dtype, mp.buffer_dtype) == (want, "fp32", "fp32")
        assert cfg.model.fsdp_config.model_dtype == "fp32"
    else:
        arr = cfg.actor_rollout_ref
        for role in ("actor", "ref"):
            fsdp = arr[role].fsdp_config
            # FSDP param dtype (verl's default bf16 when mixed_precision is absent) and the forward's autocast
            assert (fsdp.get("mixed_precision") or {}).get("param_dtype", "bf16") == want, (role, fsdp)
            assert fsdp.dtype == torch_name, (role, fsdp.dtype)
            assert fsdp.model_dtype == "fp32", role
        assert arr.rollout.dtype == torch_name
    expected_row = f"{want} compute"
    assert any(n == "dtype" and v.startswith(expected_row) for n, v in report.rows(plans[(name, hw)])), name


def test_qwen3_4b_a3_is_the_reference_run(plans: dict[tuple[str, str], plan.Plan]) -> None:
    sft = plans[("qwen3_4b_sft", "a3")].cfg
    assert sft is not None
    assert (sft.trainer.nnodes, sft.trainer.n_gpus_per_node) == (1, 16)
    assert (sft.data.max_length, sft.data.train_batch_size, sft.data.micro_batch_size_per_gpu) == (16384, 64, 8)
    assert (sft.ulysses_sequence_parallel_size, sft.use_remove_padding, sft.trainer.total_epochs) == (4, True, 6)
    assert sft.data.multiturn.enable and sft.data.multiturn.tools_key == "tools"
    rl = plans[("qwen3_4b_dapo", "a3")].cfg
    assert rl is not None
    arr = rl.actor_rollout_ref
    assert rl.algorithm.adv_estimator == "grpo" and not rl.algorithm.use_kl_in_reward and not arr.actor.use_kl_loss
    assert (arr.actor.clip_ratio_low, arr.actor.clip_ratio_high, arr.actor.clip_ratio_c) == (0.2, 0.28, 10.0)
    assert arr.actor.optim.lr == 1e-6
    assert (rl.data.train_batch_size, arr.rollout.n, arr.actor.ppo_mini_batch_size) == (64, 16, 16)
    assert (rl.data.max_prompt_length, rl.data.max_response_length) == (2048, 16384)
    assert arr.actor.use_dynamic_bsz and arr.actor.ppo_max_token_len_per_gpu == 18432
    assert arr.actor.ulysses_sequence_parallel_size == 4 and not arr.actor.use_torch_compile
    assert arr.actor.fsdp_config.param_offload and arr.actor.fsdp_config.optimizer_offload
    assert (arr.rollout.name, arr.rollout.mode, arr.rollout.tensor_model_parallel_size) == ("vllm", "async", 4)
    assert arr.rollout.gpu_memory_utilization == 0.8 and arr.rollout.agent.num_workers == 16
    mt = arr.rollout.multi_turn
    assert (mt.format, mt.max_user_turns, mt.max_assistant_turns) == ("hermes", 16, 16)
    vk = arr.rollout.val_kwargs
    assert (vk.n, vk.temperature, vk.top_p, vk.top_k) == (30, 0.7, 0.8, 20)
    assert rl.trainer.val_before_train
    assert rl.custom_reward_function.path == str(REWARD_PATH)
    assert mt.tool_config_path == str(TOOL_CONFIG_PATH)
    assert rl.data.custom_cls.path == "pkg://recipes.retool.dataset"


def test_every_rl_recipe_runs_tool_agent_through_the_kits_loop(plans: dict[tuple[str, str], plan.Plan]) -> None:
    """The loss mask's witness (recipes/retool/agent_loop.py) is on in every RL run: the launcher points verl at the
    kit's agent loop file by its absolute path (verl resolves a relative one per node), which registers tool_agent,
    the name every row and the default use, to the kit's class (tests/retool/test_agent_loop.py: that verl reads it)."""
    from omegaconf import OmegaConf

    for (name, hw), built in plans.items():
        if RECIPES[name].phase != "rl":
            continue
        assert built.cfg is not None, (name, hw)
        agent = built.cfg.actor_rollout_ref.rollout.agent
        assert agent.agent_loop_config_path == str(AGENT_LOOP_CONFIG_PATH), (name, hw)
        assert agent.default_agent_loop == "tool_agent"
    assert AGENT_LOOP_CONFIG_PATH.is_absolute()
    entries = {entry.name: entry._target_ for entry in OmegaConf.load(AGENT_LOOP_CONFIG_PATH)}
    assert entries == {"tool_agent": "recipes.retool.agent_loop.KitToolAgentLoop"}


def test_a2_keeps_the_optimisation_and_memory_per_device(plans: dict[tuple[str, str], plan.Plan]) -> None:
    for name in ("qwen3_4b_sft", "qwen3_4b_dapo"):
        a2, a3 = plans[(name, "a2")].cfg, plans[(name, "a3")].cfg
        assert a2 is not None and a3 is not None
        assert a2.data.train_batch_size == a3.data.train_batch_size
        assert a2.trainer.nnodes * a2.trainer.n_gpus_per_node == 8
    sft2, sft3 = plans[("qwen3_4b_sft", "a2")].cfg, plans[("qwen3_4b_sft", "a3")].cfg
    assert sft2.data.micro_batch_size_per_gpu == sft3.data.micro_batch_size_per_gpu == 8  # type: ignore[union-attr]
    assert sft2.ulysses_sequence_parallel_size == sft3.ulysses_sequence_parallel_size == 4  # type: ignore[union-attr]
    rl2, rl3 = plans[("qwen3_4b_dapo", "a2")].cfg, plans[("qwen3_4b_dapo", "a3")].cfg
    assert rl2 is not None and rl3 is not None
    a2r, a3r = rl2.actor_rollout_ref, rl3.actor_rollout_ref
    assert a2r.actor.ppo_max_token_len_per_gpu == a3r.actor.ppo_max_token_len_per_gpu
    assert a2r.actor.ulysses_sequence_parallel_size == a3r.actor.ulysses_sequence_parallel_size == 4
    # TP 4 -> 2 keeps the number of vLLM replicas: 16 / 4 == 8 / 2
    assert a2r.rollout.tensor_model_parallel_size == 2
    assert 16 // a3r.rollout.tensor_model_parallel_size == 8 // a2r.rollout.tensor_model_parallel_size


def test_qwen25_32b_layouts(plans: dict[tuple[str, str], plan.Plan]) -> None:
    heads, kv = catalog.QWEN25_32B.num_attention_heads, catalog.QWEN25_32B.num_key_value_heads
    for name in ("qwen2.5_32b_sft", "qwen2.5_32b_dapo"):
        a2, a3 = plans[(name, "a2")].cfg, plans[(name, "a3")].cfg
        assert a2 is not None and a3 is not None
        assert (a3.trainer.nnodes, a3.trainer.n_gpus_per_node) == (2, 16)
        assert (a2.trainer.nnodes, a2.trainer.n_gpus_per_node) == (4, 8)
    sft = plans[("qwen2.5_32b_sft", "a3")].cfg
    assert sft is not None and sft.ulysses_sequence_parallel_size == 8
    assert (sft.data.train_batch_size, sft.data.micro_batch_size_per_gpu) == (32, 4)
    rl = plans[("qwen2.5_32b_dapo", "a3")].cfg
    assert rl is not None
    arr = rl.actor_rollout_ref
    sp, tp = arr.actor.ulysses_sequence_parallel_size, arr.rollout.tensor_model_parallel_size
    assert sp == 8 and tp in (4, 8) and heads % sp == 0 and kv % sp == 0 and heads % tp == 0 and kv % tp == 0
    assert arr.actor.fsdp_config.param_offload and arr.actor.fsdp_config.optimizer_offload
    assert (rl.data.train_batch_size, arr.actor.ppo_mini_batch_size, arr.rollout.n) == (512, 64, 16)
    assert rl.custom_reward_function.reward_kwargs.shaping == "verl"
    cuda = plans[("qwen2.5_32b_sft", "cuda")].cfg
    assert cuda is not None and (cuda.trainer.nnodes, cuda.ulysses_sequence_parallel_size) == (2, 4)


def test_qwen25_7b_a2_is_the_published_a2_pair(plans: dict[tuple[str, str], plan.Plan]) -> None:
    """issue 23: the a2 plans keep the settings of verl's A2 references (run_qwen2_7b_sft_npu.sh; the RL script of
    ascend_retool_best_pratice.rst), and the model table gives Qwen2.5-7B's ~7.6B parameters."""
    facts = catalog.QWEN25_7B
    assert 7.55e9 < facts.parameters < 7.7e9  # 7,615,616,512 from the config.json shape
    assert (facts.num_attention_heads, facts.num_key_value_heads) == (28, 4)
    sft = plans[("qwen2.5_7b_sft", "a2")].cfg
    assert sft is not None and (sft.trainer.nnodes, sft.trainer.n_gpus_per_node, sft.trainer.device) == (1, 8, "npu")
    assert (sft.ulysses_sequence_parallel_size, sft.data.max_length, sft.data.train_batch_size) == (4, 16384, 64)
    assert (sft.trainer.total_epochs, sft.use_remove_padding, sft.model.strategy) == (6, True, "fsdp")
    # the one kit deviation on a2: micro-batch 4 instead of 8 (the worst-case memory estimate; scaling/.../a2.yaml)
    assert sft.data.micro_batch_size_per_gpu == 4
    assert plans[("qwen2.5_7b_sft", "a3")].cfg.data.micro_batch_size_per_gpu == 8  # type: ignore[union-attr]
    rl = plans[("qwen2.5_7b_dapo", "a2")].cfg
    assert rl is not None and (rl.trainer.nnodes, rl.trainer.n_gpus_per_node, rl.trainer.device) == (1, 8, "npu")
    arr = rl.actor_rollout_ref
    assert (arr.rollout.tensor_model_parallel_size, arr.actor.ulysses_sequence_parallel_size) == (2, 4)
    assert (rl.data.train_batch_size, arr.actor.ppo_mini_batch_size, arr.rollout.n, arr.rollout.val_kwargs.n) == (
        32,
        16,
        16,
        30,
    )
    assert (rl.data.max_prompt_length, rl.data.max_response_length, arr.actor.ppo_max_token_len_per_gpu) == (
        2048,
        20480,
        22528,
    )
    assert arr.actor.fsdp_config.param_offload and arr.actor.fsdp_config.optimizer_offload and arr.actor.use_dynamic_bsz
    assert (arr.actor.clip_ratio_low, arr.actor.clip_ratio_high, arr.actor.optim.lr) == (0.2, 0.28, 1e-6)
    assert (arr.rollout.gpu_memory_utilization, arr.rollout.max_num_seqs, arr.rollout.enable_chunked_prefill) == (
        0.9,
        1024,
        True,
    )
    assert arr.rollout.max_num_batched_tokens == 22528
    for role in (arr.actor, arr.ref):
        assert role.entropy_checkpointing and role.entropy_from_logits_with_chunking
    assert arr.rollout.enforce_eager  # kit: eager with TASK_QUEUE_ENABLE=2 (platforms/npu.py)
    assert rl.custom_reward_function.reward_kwargs.shaping == "verl"
    assert RECIPES["qwen2.5_7b_dapo"].reference_result is None  # none is published
    assert "ascend_retool_best_pratice" in RECIPES["qwen2.5_7b_dapo"].reference
    assert "run_qwen2_7b_sft_npu.sh" in RECIPES["qwen2.5_7b_sft"].reference
    for name in ("qwen2.5_7b_sft", "qwen2.5_7b_dapo"):
        assert ("reference", RECIPES[name].reference) in report.rows(plans[(name, "a2")])


def test_cpu_profile_is_the_tiny_smoke(plans: dict[tuple[str, str], plan.Plan]) -> None:
    for name in RECIPES:
        built = plans[(name, "cpu")]
        cfg = built.cfg
        assert cfg is not None
        assert cfg.trainer.n_gpus_per_node == 2 and cfg.trainer.nnodes == 1
        assert cfg.trainer.total_training_steps == 2
        if RECIPES[name].phase == "sft":
            assert cfg.model.strategy == "fsdp2" and cfg.model.attn_implementation == "kit_packed_sdpa"
            assert cfg.ulysses_sequence_parallel_size == 1
            assert "--nproc_per_node=2" in built.argv and "--standalone" in built.argv
            # batches load in the training rank, not in 8 forked workers a rank (patch 0032's key): 35 s of the
            # learning check's SFT on 2 cores (docs/measurements/sft_dataloader_workers.yaml); the full scale keeps 8
            assert cfg.data.num_workers == 0
            assert plans[(name, "a3")].cfg.data.num_workers == 8
        else:
            arr = cfg.actor_rollout_ref
            assert (arr.rollout.name, arr.rollout.mode) == (CPU.rollout_engine(STACK).name, "async")
            assert arr.rollout.multi_turn.enable and arr.rollout.agent.default_agent_loop == "tool_agent"
            assert arr.actor.strategy == "fsdp2" and arr.model.override_config.attn_implementation == "kit_packed_sdpa"
            assert cfg.ray_kwargs.ray_init.num_cpus == CPU_RAY_NUM_CPUS and not arr.actor.use_torch_compile
            model = str(cfg.actor_rollout_ref.model.path)
            assert model == f"{FAKE_HOME}/checkpoints/retool/{RECIPES[name].sft_recipe}_cpu/hf_merged"


def test_fused_log_probs_are_refused_with_sequence_parallelism() -> None:
    for name in ("qwen3_4b_dapo", "qwen2.5_32b_dapo"):
        assert _build(name, "a3").cfg.actor_rollout_ref.model.use_fused_kernels is False  # type: ignore[union-attr]
        refused = _build(name, "a3", "actor_rollout_ref.model.use_fused_kernels=True")
        assert any("use_fused_kernels=True with Ulysses SP > 1" in e for e in refused.errors), refused.errors
    # SP 1 (the cpu smoke) is where verl 0.6.1's torch backend is correct: allowed
    assert _build("qwen3_4b_dapo", "cpu", "actor_rollout_ref.model.use_fused_kernels=True").errors == []


def test_misspelt_override_is_rejected_naming_the_key() -> None:
    built = _build("qwen3_4b_dapo", "a3", "actor_rollout_ref.rollout.nn=4")
    assert built.cfg is None and built.argv == []
    assert "actor_rollout_ref.rollout.nn" in built.errors[0] and "not in struct" in built.errors[0]


@pytest.mark.parametrize(
    ("name", "override", "message"),
    [
        ("qwen3_4b_dapo", "data.train_batch_size=60", "must be a multiple of actor.ppo_mini_batch_size=16"),
        ("qwen3_4b_dapo", "actor_rollout_ref.rollout.agent.num_workers=7", "rollout.agent.num_workers=7"),
        ("qwen3_4b_dapo", "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=4000", "below one full sequence"),
        ("qwen3_4b_dapo", "actor_rollout_ref.rollout.mode=sync", "ReTool needs the agent loop"),
        ("qwen2.5_32b_dapo", "actor_rollout_ref.actor.ulysses_sequence_parallel_size=16", "40 attention heads"),
        ("qwen2.5_32b_dapo", "actor_rollout_ref.rollout.tensor_model_parallel_size=16", "40 attention heads"),
        ("qwen3_4b_sft", "data.train_batch_size=66", "divisible by the data-parallel size 4"),
        ("qwen3_4b_sft", "data.micro_batch_size_per_gpu=5", "divisible by data.micro_batch_size_per_gpu=5"),
        ("qwen3_4b_sft", "use_remove_padding=false", "needs use_remove_padding=true"),
        ("qwen3_4b_dapo", "+custom_reward_function.reward_kwargs.no_tool_penality=0.5", "no_tool_penality"),
        ("qwen3_4b_dapo", "custom_reward_function.reward_kwargs.shaping=paper", "shaping=paper"),
        ("qwen3_4b_dapo", "actor_rollout_ref.actor.use_dynamic_bsz=False", "verl rejects the config"),
    ],
)
def test_bad_plans_are_rejected(name: str, override: str, message: str) -> None:
    built = _build(name, "a3", override)
    assert any(message in error for error in built.errors), built.errors


def test_profile_is_chosen_with_hw_not_an_override() -> None:
    with pytest.raises(plan.UsageError, match="--hw"):
        _build("qwen3_4b_sft", "a3", "profile=a2")
    with pytest.raises(plan.UsageError, match="unknown hardware profile"):
        _build("qwen3_4b_sft", "a5")


def test_user_overrides_beat_the_launcher() -> None:
    built = _build("qwen3_4b_dapo", "a3", "trainer.n_gpus_per_node=8", "actor_rollout_ref.model.path=/m/x")
    assert built.errors == []
    assert built.cfg.trainer.n_gpus_per_node == 8  # type: ignore[union-attr]
    assert [a for a in built.argv if a.startswith("trainer.n_gpus_per_node=")] == ["trainer.n_gpus_per_node=8"]
    model = next(i for i in built.inputs if i.env == "MODEL_PATH")
    assert (model.value, model.source) == ("/m/x", "override")
    assert [a for a in built.argv if a.startswith("actor_rollout_ref.model.path=")] == [
        "actor_rollout_ref.model.path=/m/x"
    ]


def test_environment_inputs_become_explicit_overrides() -> None:
    environ = {
        "HOME": FAKE_HOME,
        "MODEL_PATH": "/models/sft merged",
        "DATA_DIR": "/data",
        "CKPT_DIR": "/ckpt/run1",
        "RETOOL_SANDBOX_URL": "http://10.0.0.5:8080/run_code",
        "VERL_USE_EXTERNAL_MODULES": "npu_kernels.auto",
    }
    built = _build("qwen3_4b_dapo", "a2", environ=environ)
    assert built.errors == []
    argv = built.argv
    assert "actor_rollout_ref.model.path='/models/sft merged'" in argv  # quoted for Hydra
    assert built.cfg.actor_rollout_ref.model.path == "/models/sft merged"  # type: ignore[union-attr]
    assert "data.train_files=/data/dapo_math_17k.parquet" in argv and "data.val_files=/data/aime_2025.parquet" in argv
    assert "trainer.default_local_dir=/ckpt/run1" in argv
    job_env = "+ray_kwargs.ray_init.runtime_env.env_vars"
    assert f"{job_env}.RETOOL_SANDBOX_URL=http://10.0.0.5:8080/run_code" in argv
    assert f"{job_env}.VERL_USE_EXTERNAL_MODULES=npu_kernels.auto" in argv
    assert f"{job_env}.TENSORBOARD_DIR=/ckpt/run1/tensorboard" in argv
    assert built.env == {"TENSORBOARD_DIR": "/ckpt/run1/tensorboard"}
    assert built.command[:2] == ["env", "TENSORBOARD_DIR=/ckpt/run1/tensorboard"]


def test_multi_node_sft_gets_torchrun_rendezvous() -> None:
    planned = _build("qwen2.5_32b_sft", "a2")
    assert "--nnodes=4" in planned.argv and "--nproc_per_node=8" in planned.argv
    assert "--node_rank=<NODE_RANK>" in planned.argv and "--master_port=29500" in planned.argv
    assert any("MASTER_ADDR (node 0's address) and NODE_RANK (0..3)" in w for w in planned.warnings)
    environ = {"HOME": FAKE_HOME, "NODE_RANK": "3", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "23456"}
    planned = _build("qwen2.5_32b_sft", "a2", environ=environ)
    assert {"--node_rank=3", "--master_addr=10.0.0.1", "--master_port=23456"} <= set(planned.argv)
    assert planned.warnings == []
    assert _build("qwen3_4b_sft", "a3").warnings == []
    rl = _build("qwen2.5_32b_dapo", "a3")
    assert any("scripts/ray_cluster.sh status --hw a3 --nodes 2" in w for w in rl.warnings), rl.warnings


def test_path_checks_name_the_input_and_the_fix(
    tmp_path: Path, make_model: Callable[..., Path], make_parquet: Callable[[Path, int], Path]
) -> None:
    environ = {"HOME": str(tmp_path), "DATA_DIR": str(tmp_path / "data")}
    built = plan.build(RECIPES["qwen3_4b_sft"], "a3", STACK, environ=environ)
    text = "\n".join(built.errors)
    assert f"model {tmp_path}/models/Qwen3-4B-Instruct-2507 (default of MODEL_PATH) does not exist" in text
    assert "hf download Qwen/Qwen3-4B-Instruct-2507" in text
    assert f"data {tmp_path}/data/retool_sft.parquet (default of TRAIN_FILE) is not an existing parquet file" in text
    assert "retool-prepare sft" in text

    environ["MODEL_PATH"] = str(make_model(tmp_path / "tiny", heads=4, kv_heads=2))
    make_parquet(tmp_path / "data" / "retool_sft.parquet", 20)
    built = plan.build(RECIPES["qwen3_4b_sft"], "cpu", STACK, ["data.train_max_samples=-1"], environ=environ)
    assert built.errors == [] and built.facts is not None and built.facts.steps.rows == 20
    # heads come from the model's own config.json (4 here, not the recipe's 32): SP 8 no longer divides them
    built = plan.build(RECIPES["qwen3_4b_sft"], "a3", STACK, ["ulysses_sequence_parallel_size=8"], environ=environ)
    assert any("8: Ulysses SP must divide the 4 attention heads" in e for e in built.errors), built.errors


def test_rl_path_check_reaches_the_sandbox(tmp_path: Path, make_model: Callable[..., Path]) -> None:
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    environ = {
        "HOME": str(tmp_path),
        "MODEL_PATH": str(make_model(tmp_path / "m")),
        "RETOOL_SANDBOX_URL": f"http://127.0.0.1:{port}/run_code",
    }
    built = plan.build(RECIPES["qwen3_4b_dapo"], "cpu", STACK, environ=environ)
    assert any(
        f"sandbox RETOOL_SANDBOX_URL=http://127.0.0.1:{port}/run_code did not run print(1)" in e for e in built.errors
    )
    assert any("retool-sandbox serve" in e for e in built.errors)


@pytest.mark.skipif(current_platform().name != "cpu", reason="checks the refusal on a machine without NPUs")
def test_launch_mode_refuses_a_profile_this_machine_cannot_run(capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli.main(["plan", "--recipe", "qwen3_4b_dapo", "--hw", "a3", "--argv", "--no-path-check"])
    captured = capsys.readouterr()
    assert rc == cli.EXIT_FAILED and captured.out == ""
    assert "profile a3 runs on npu, but this machine's platform is cpu" in captured.err


def test_launch_mode_prints_the_command_one_argument_per_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("MODEL_PATH", "DATA_DIR", "CKPT_DIR", "CKPT_ROOT", "TENSORBOARD_DIR"):
        monkeypatch.delenv(name, raising=False)
    rc = cli.main(
        ["plan", "--recipe", "qwen3_4b_sft", "--hw", "cpu", "--argv", "--no-path-check", "--", "optim.lr=2e-5"]
    )
    captured = capsys.readouterr()
    assert rc == cli.EXIT_OK, captured.err
    lines = captured.out.splitlines()
    ckpt = f"{tmp_path}/checkpoints/retool/qwen3_4b_sft_cpu"
    assert lines[:3] == ["env", f"TENSORBOARD_DIR={ckpt}/tensorboard", sys.executable]
    assert lines[3:6] == ["-m", "torch.distributed.run", "--standalone"]
    assert lines[-1] == "optim.lr=2e-5" and f"trainer.default_local_dir={ckpt}" in lines
    assert "steps/epoch:" in captured.err  # the table goes to stderr in this mode


@pytest.mark.parametrize(
    ("recipe", "override", "error"),
    [
        ("qwen3_4b_dapo", "data.train_batch_size=0", "data.train_batch_size=0 must be at least 1"),
        ("qwen3_4b_dapo", "data.train_batch_size=abc", "data.train_batch_size='abc' must be a whole number"),
        ("qwen3_4b_dapo", "trainer.total_epochs=abc", "trainer.total_epochs='abc' must be a whole number"),
        ("qwen3_4b_dapo", "actor_rollout_ref.rollout.n=0", "actor_rollout_ref.rollout.n=0 must be at least 1"),
        ("qwen3_4b_sft", "data.micro_batch_size_per_gpu=-2", "data.micro_batch_size_per_gpu=-2 must be at least 1"),
    ],
)
def test_counts_the_plan_divides_by_are_checked_before_any_arithmetic(
    recipe: str, override: str, error: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Issue 21, findings 2-3: ZeroDivisionError in budget.py and ValueError in report.py, before this check."""
    data = tmp_path / "rows.parquet"  # real rows, so the step arithmetic runs (it is skipped without data)
    import pandas as pd

    pd.DataFrame({"prompt": ["p"] * 64}).to_parquet(data)
    files = [f"data.train_files={data}", f"data.val_files={data}"]
    rc = cli.main(["plan", "--recipe", recipe, "--hw", "a3", "--dry-run", "--no-path-check", "--", *files, override])
    captured = capsys.readouterr()
    assert rc == cli.EXIT_FAILED, captured
    assert f"error: {error}" in captured.out + captured.err and "Traceback" not in captured.out + captured.err


def test_batched_tokens_below_a_sequence_are_refused_where_vllm_refuses_them() -> None:
    """The cpu platform hands vLLM its own CPU step, 2048 tokens (platforms/cpu.py): vLLM refuses a step below
    max_num_seqs on both stacks; a step below one sequence with chunked prefill off starts on both (vLLM 0.11 turns
    chunked prefill on itself, verl 0.9.1 raises the step), so the dry run refuses only the first."""
    from omegaconf import OmegaConf

    from platforms import stacks
    from recipes.launch.planning.checks import check_batched_tokens

    off = "actor_rollout_ref.rollout.enable_chunked_prefill=False"
    long = ("data.max_response_length=4096", "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=8192")
    assert _build("qwen2.5_7b_dapo", "cpu", off, *long).errors == []  # the cpu scale's prompt 768 + this response
    assert _build("qwen2.5_7b_dapo", "cpu", *long).errors == []
    assert _build("qwen2.5_7b_dapo", "a2", off).errors == []  # the recipe's own 22528: one full sequence
    many = _build("qwen3_4b_dapo", "cpu", "actor_rollout_ref.rollout.max_num_seqs=4096")  # vLLM refuses on both
    assert any("max_num_batched_tokens=2048 is below rollout.max_num_seqs=4096" in e for e in many.errors), many.errors
    # where the stacks differ: verl 0.9.1 raises a chunkless step to max_model_len before vLLM checks it
    rollout = OmegaConf.create(
        {"enable_chunked_prefill": False, "max_num_batched_tokens": 2048, "max_num_seqs": 3000, "max_model_len": None}
    )
    assert check_batched_tokens(rollout, 4096, stacks.REFERENCE) and not check_batched_tokens(
        rollout, 4096, stacks.CURRENT
    )
