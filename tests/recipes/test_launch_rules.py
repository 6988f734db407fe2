"""A failing case for every launcher rule that had none, and the budget checks: steps, the reference step,
checkpoint disk, resume path, and the weight-sync trap of free_cache_engine=False.

Each case builds a plan that breaks exactly one rule and asserts the rule's own message, so disabling the rule in
recipes/launch/planning/checks.py or plan.py fails here (the mutation these tests exist for).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from kit_testing import interpreter_stack

from platforms.verl_facts import FUSED_SP_LABELS, WEIGHTS_UNSYNCED_WITHOUT_FREE_CACHE
from recipes.launch.planning import plan
from recipes.launch.run_inputs.catalog import QWEN3_4B, QWEN25_32B, RECIPES
from recipes.launch.sizing import budget, memory

#: The stack this interpreter's verl serves, as an entry point resolves it without --stack or KIT_STACK.
STACK = interpreter_stack()  # the stack this venv's verl serves

FAKE_HOME = "/nonexistent/kit-home"


def _build(name: str, hw: str, *overrides: str, environ: dict[str, str] | None = None, **kwargs) -> plan.Plan:
    return plan.build(
        RECIPES[name],
        hw,
        STACK,
        overrides,
        path_check=kwargs.pop("path_check", False),
        environ=environ or {"HOME": FAKE_HOME},
    )


def _has(built: plan.Plan, text: str) -> bool:
    return any(text in e for e in built.errors)


# --- layout rules without a failing case before ---------------------------------------------------------------


def test_mini_batch_times_n_must_divide_the_data_parallel_size() -> None:
    # 64 x 1 trajectories fill 16 workers and 16 agent workers, but a mini-batch of 2 x 1 cannot split over dp 4
    built = _build(
        "qwen3_4b_dapo", "a3", "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.rollout.n=1"
    )
    assert _has(built, "actor.ppo_mini_batch_size x rollout.n = 2 must be divisible by the data-parallel size 4")
    assert not _has(_build("qwen3_4b_dapo", "a3"), "must be divisible by the data-parallel size")


def test_parallelism_must_divide_the_kv_heads(tmp_path: Path, make_model: Callable[..., Path]) -> None:
    environ = {"HOME": FAKE_HOME, "MODEL_PATH": str(make_model(tmp_path / "m", heads=12, kv_heads=3))}
    built = _build("qwen3_4b_sft", "cpu", "ulysses_sequence_parallel_size=2", environ=environ)
    assert _has(built, "Ulysses SP must divide the 3 KV heads or be a multiple of them")
    assert not _has(built, "attention heads")  # 12 is divisible by 2: only the KV rule fires
    # 4 KV heads and SP 2 divide: no error
    environ["MODEL_PATH"] = str(make_model(tmp_path / "ok", heads=12, kv_heads=4))
    assert not _has(_build("qwen3_4b_sft", "cpu", "ulysses_sequence_parallel_size=2", environ=environ), "KV heads")


def test_tensor_parallelism_must_fit_in_a_node() -> None:
    built = _build("qwen3_4b_dapo", "a3", "actor_rollout_ref.rollout.tensor_model_parallel_size=32")
    assert _has(built, "rollout.tensor_model_parallel_size=32 must divide the 16 devices of a node")
    assert not _has(_build("qwen3_4b_dapo", "a3"), "devices of a node")


def test_vllm_graphs_need_a_task_queue_below_2_on_npu() -> None:
    """The NPU environment's TASK_QUEUE_ENABLE=2 needs eager vLLM (npu.py _queue_needs_eager, the doctor's rule too):
    graphs fail on a2 and a3; level 1 for the job (the fix the message gives) or another platform passes."""
    graphs = "actor_rollout_ref.rollout.enforce_eager=False"
    rule = "with TASK_QUEUE_ENABLE=2, which needs eager vLLM"
    for hw in ("a2", "a3"):
        assert _has(_build("qwen2.5_7b_dapo", hw, graphs), rule), hw
    assert not _has(_build("qwen2.5_7b_dapo", "a2"), rule)  # the recipes keep eager
    level_1 = '+ray_kwargs.ray_init.runtime_env.env_vars.TASK_QUEUE_ENABLE="1"'
    assert not _has(_build("qwen2.5_7b_dapo", "a2", graphs, level_1), rule)
    assert not _has(_build("qwen2.5_7b_dapo", "cuda", graphs), rule)


def test_job_env_values_must_be_strings() -> None:
    """Ray's runtime_env takes Dict[str, str] only: an unquoted number would fail inside ray.init, after start-up."""
    key = "+ray_kwargs.ray_init.runtime_env.env_vars"
    unquoted = _build("qwen3_4b_dapo", "a3", f"{key}.HCCL_BUFFSIZE=1024")
    assert _has(unquoted, "env_vars.HCCL_BUFFSIZE=1024 is not a string")
    assert not _has(_build("qwen3_4b_dapo", "a3", f"{key}.HCCL_BUFFSIZE='1024'"), "is not a string")
    # the launcher's own values (parity's tool memory limit is a number) are quoted
    built = plan.build(
        RECIPES["qwen3_4b_dapo"], "a3", STACK, (), parity=True, path_check=False, environ={"HOME": FAKE_HOME}
    )
    assert not _has(built, "is not a string")


def test_free_cache_engine_off_is_refused_where_the_stacks_verl_then_never_syncs() -> None:
    """A rule against a verl bug holds on the stacks whose verl has it (VerlFacts.bugs; issue 52 row 3)."""
    built = _build("qwen3_4b_dapo", "a3", "actor_rollout_ref.rollout.free_cache_engine=False")
    if WEIGHTS_UNSYNCED_WITHOUT_FREE_CACHE in STACK.verl.bugs:  # verl 0.6.1 (issue #4147)
        assert _has(built, "free_cache_engine=False") and _has(built, "PR #4248")
        assert _has(built, f"verl {STACK.pin('VERL_VERSION')}'s agent loop")
    else:
        assert not _has(built, "free_cache_engine")
    assert not _has(_build("qwen3_4b_dapo", "a3"), "free_cache_engine")


def test_fused_kernels_with_ulysses_sp_are_refused_where_the_stacks_verl_mislabels() -> None:
    fused = (
        "actor_rollout_ref.model.use_fused_kernels=True",
        "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2",
    )
    built = _build("qwen3_4b_dapo", "a3", *fused)
    assert _has(built, "#3512/#6068") == (FUSED_SP_LABELS in STACK.verl.bugs), built.errors
    assert not _has(_build("qwen3_4b_dapo", "a3", fused[0], fused[1][:-1] + "1"), "use_fused_kernels")


# --- steps and the reference step -----------------------------------------------------------------------------


def test_zero_steps_is_an_error(tmp_path: Path, make_parquet: Callable[[Path, int], Path]) -> None:
    environ = {"HOME": FAKE_HOME, "TRAIN_FILE": str(make_parquet(tmp_path / "tiny.parquet", 4))}
    built = _build("qwen2.5_32b_dapo", "a3", environ=environ)
    assert built.facts.steps.planned == 0
    assert _has(built, "the run would train 0 steps (4 rows / batch 512")


@pytest.mark.parametrize(("name", "reference_step"), [("qwen3_4b_dapo", 130), ("qwen2.5_32b_dapo", 150)])
def test_rl_recipes_reach_the_reference_step(
    name: str, reference_step: int, tmp_path: Path, make_parquet: Callable[[Path, int], Path]
) -> None:
    """With the deduplicated DAPO-Math-17k (~17.9k prompts) each RL recipe runs at least to its reference step."""
    environ = {"HOME": FAKE_HOME, "TRAIN_FILE": str(make_parquet(tmp_path / "dapo.parquet", 17_917))}
    built = _build(name, "a3", environ=environ)
    assert RECIPES[name].reference_result is not None and RECIPES[name].reference_result.step == reference_step
    assert built.facts.steps.planned is not None and built.facts.steps.planned >= reference_step, (
        built.facts.steps.planned
    )
    assert not any("fall short" in w for w in built.warnings), built.warnings
    row = dict(_rows(built))["reference result"]
    assert f"at step {reference_step}" in row and f"{built.facts.steps.planned} planned" in row


def test_short_runs_warn_against_the_reference_step(tmp_path: Path, make_parquet: Callable) -> None:
    built = _build("qwen2.5_32b_dapo", "a3", "trainer.total_training_steps=100")
    assert built.facts.steps.planned == 100
    assert any("100 planned steps fall short of step 150" in w for w in built.warnings), built.warnings
    # one epoch of the 32B recipe over the deduplicated data (the reference's total_epochs) stops at step 34
    environ = {"HOME": FAKE_HOME, "TRAIN_FILE": str(make_parquet(tmp_path / "dapo.parquet", 17_917))}
    built = _build("qwen2.5_32b_dapo", "a3", "trainer.total_epochs=1", environ=environ)
    assert built.facts.steps.planned == 34 and any(
        "34 planned steps fall short of step 150" in w for w in built.warnings
    )


def _rows(built: plan.Plan) -> list[tuple[str, str]]:
    from recipes.launch.planning import report

    return report.rows(built)


# --- checkpoint disk and resume -------------------------------------------------------------------------------


def test_parameter_counts_from_the_checkpoints_configs() -> None:
    assert QWEN3_4B.parameters == 4_022_468_096  # Qwen3-4B(-Instruct-2507): 4.0B
    assert round(QWEN25_32B.parameters / 1e9, 2) == 32.76  # Qwen2.5-32B: "32.8B params"


def test_checkpoint_budget_counts_saves_and_keeps(tmp_path: Path, make_parquet: Callable) -> None:
    # 4B RL, 17,917 rows: 279 steps, a save every 10 steps and at the last: 28 checkpoints of 12 B/parameter
    environ = {"HOME": FAKE_HOME, "TRAIN_FILE": str(make_parquet(tmp_path / "dapo.parquet", 17_917))}
    built = _build("qwen3_4b_dapo", "a3", environ=environ)
    assert built.facts.steps.planned == 279
    assert built.facts.checkpoints.count == 28 and built.facts.checkpoints.keep is None
    assert built.facts.checkpoints.per_checkpoint == QWEN3_4B.parameters * budget.CKPT_BYTES_PER_PARAM
    assert 1.3e12 < built.facts.checkpoints.total < 1.4e12  # ~1.35 TB
    # the 32B recipe keeps 2
    assert _build("qwen2.5_32b_dapo", "a3").facts.checkpoints.count == 2
    # SFT saves its last step even without save_freq; RL does not
    assert (
        _build("qwen3_4b_sft", "a3", "trainer.save_freq=-1", "trainer.total_training_steps=5").facts.checkpoints.count
        == 1
    )
    assert (
        _build("qwen3_4b_dapo", "a3", "trainer.save_freq=-1", "trainer.total_training_steps=5").facts.checkpoints.count
        == 0
    )


def test_checkpoint_disk_short_is_an_error(
    tmp_path: Path, make_model: Callable, make_parquet: Callable, monkeypatch: pytest.MonkeyPatch
) -> None:
    environ = {
        "HOME": str(tmp_path),
        "MODEL_PATH": str(make_model(tmp_path / "model")),
        "TRAIN_FILE": str(make_parquet(tmp_path / "data.parquet", 17_917)),
        "VAL_FILE": str(make_parquet(tmp_path / "val.parquet", 30)),
        "CKPT_DIR": str(tmp_path / "ckpt"),
    }
    # the fake model's shape (its config.json): ~0.1M parameters, ~1.3 MB per checkpoint at 12 B/parameter
    params = memory.facts_for(environ["MODEL_PATH"], RECIPES["qwen3_4b_sft"].model).parameters
    monkeypatch.setattr(budget, "free_bytes", lambda path: (params * 12 + 10**5, Path(path).parent))  # 1 ckpt fits
    built = plan.build(RECIPES["qwen3_4b_sft"], "a3", STACK, [], path_check=True, environ=environ)
    assert built.facts.checkpoints.per_checkpoint == params * 12
    free = budget.human(params * 12 + 10**5)
    assert _has(built, "checkpoints need ~") and _has(built, f"{free} free"), built.errors
    assert _has(built, "trainer.max_ckpt_to_keep=N")
    built = plan.build(
        RECIPES["qwen3_4b_sft"], "a3", STACK, ["trainer.max_ckpt_to_keep=1"], path_check=True, environ=environ
    )
    assert not _has(built, "checkpoints need"), built.errors
    assert "free at" in dict(_rows(built))["checkpoint disk"]


def test_resume_path_must_exist(tmp_path: Path, make_model: Callable, make_parquet: Callable) -> None:
    environ = {
        "HOME": str(tmp_path),
        "MODEL_PATH": str(make_model(tmp_path / "model")),
        "TRAIN_FILE": str(make_parquet(tmp_path / "data.parquet", 64)),
        "VAL_FILE": str(make_parquet(tmp_path / "val.parquet", 8)),
    }

    def errors(*overrides: str) -> list[str]:
        return plan.build(
            RECIPES["qwen3_4b_sft"], "cpu", STACK, list(overrides), path_check=True, environ=environ
        ).errors

    assert any("needs trainer.resume_from_path" in e for e in errors("trainer.resume_mode=resume_path"))
    missing = tmp_path / "ckpt" / "global_step_10"
    assert any("does not exist" in e for e in errors(f"trainer.resume_from_path={missing}"))
    missing.mkdir(parents=True)
    assert not any("resume_from_path" in e for e in errors(f"trainer.resume_from_path={missing}"))
    assert any("global_step_N folder" in e for e in errors(f"trainer.resume_from_path={missing.parent}"))
    # disabled resumption ignores the path, as verl does
    assert not any(
        "resume_from_path" in e for e in errors("trainer.resume_mode=disable", "trainer.resume_from_path=/x")
    )


# --- memory per device ----------------------------------------------------------------------------------------


def test_the_h200_profile_holds_the_32b_recipe_on_one_node() -> None:
    for name in ("qwen2.5_32b_sft", "qwen2.5_32b_dapo"):
        built = _build(name, "h200")
        assert built.errors == [], built.errors
        assert (built.cfg.trainer.nnodes, built.cfg.trainer.n_gpus_per_node) == (1, 8)
        assert built.facts.memory is not None and built.facts.memory.train_gb < 0.95 * 141
    rl = _build("qwen2.5_32b_dapo", "h200").cfg.actor_rollout_ref
    assert (rl.actor.ulysses_sequence_parallel_size, rl.rollout.tensor_model_parallel_size) == (8, 4)
    assert rl.actor.fsdp_config.param_offload and rl.actor.fsdp_config.optimizer_offload
    assert rl.rollout.gpu_memory_utilization == 0.9


def test_layouts_that_cannot_fit_are_refused() -> None:
    # the same single-node layout on 80 GB devices: 66 GB of states + activations do not fit
    built = _build("qwen2.5_32b_dapo", "cuda", "trainer.nnodes=1")
    assert _has(built, "training needs ~") and _has(built, "of 80 GB"), built.errors
    # the 32B model's bf16 weights on one 64 GB device (TP 1) exceed vLLM's 0.8 share
    assert _has(_build("qwen2.5_32b_dapo", "a3", "actor_rollout_ref.rollout.tensor_model_parallel_size=1"), "raise")
    # without offload the actor's states stay next to vLLM's 0.9 share of an 80 GB device
    no_offload = (
        "actor_rollout_ref.actor.fsdp_config.param_offload=false",
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload=false",
    )
    assert _has(_build("qwen2.5_32b_dapo", "cuda", *no_offload), "during rollout the actor keeps")
    # a KV cache that cannot hold one trajectory
    tiny_share = _build("qwen3_4b_dapo", "a3", "actor_rollout_ref.rollout.gpu_memory_utilization=0.04")
    assert _has(tiny_share, "KV cache holds"), tiny_share.errors


def test_memory_row_in_the_table() -> None:
    row = dict(_rows(_build("qwen3_4b_dapo", "a3")))["memory"]
    assert row.startswith("training ~") and "of 64 GB per device" in row and "vLLM weights" in row
    assert "memory" not in dict(_rows(_build("qwen3_4b_dapo", "cpu")))  # no memory per device on a CPU
