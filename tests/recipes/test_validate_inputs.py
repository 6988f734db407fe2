"""Issue 44: inputs the trainer rejects minutes in are refused by the plan (dry run and launch), each by the one rule
the doctor shares where the doctor checks it too.

What would fail: a model folder without a tokenizer passing the dry run; an RL parquet as SFT data (verl's
``KeyError: 'messages'``) or SFT / plain question-answer data as RL data (``SchemaError`` in ``ReToolRLDataset``)
passing it, with the doctor's ``--data`` saying OK; ``KIT_FUSED_KERNELS=npuu`` reaching every worker; 16 devices per
node planned on an 8-device profile; an SFT checkpoint as an RL resume path; ``lr=-1`` planned as "lr -1".
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from kit_testing import interpreter_stack
from omegaconf import OmegaConf

from platforms import PROFILES, data_file, model_folder
from recipes.launch.planning import validate_resume, validate_values
from recipes.launch.run_inputs import paths

#: The stack this interpreter's verl serves, as an entry point resolves it without --stack or KIT_STACK.
STACK = interpreter_stack()  # the stack this venv's verl serves

MESSAGES = [{"role": "user", "content": "1+1?"}, {"role": "assistant", "content": "\\boxed{2}"}]
DAPO_ROW = {
    "prompt": [{"role": "user", "content": "What is 1+1?"}],
    "reward_model": {"style": "rule", "ground_truth": "2"},
    "data_source": "math_dapo",
}


def _parquet(path: Path, rows: list[dict]) -> Path:
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def test_a_model_folder_without_a_tokenizer_is_refused_by_the_shared_rule(tmp_path: Path) -> None:
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "qwen3"}))
    (model / "model.safetensors").write_bytes(bytes(1000))
    (problem,) = model_folder.inspect(model).problems
    assert problem.startswith("has no tokenizer (tokenizer.json / tokenizer.model / vocab.json)")
    (line,) = [p.message for p in paths.check_model(str(model), None)]
    assert line == f"model {model} {problem}"
    (model / "tokenizer.json").write_text("")  # an empty file loads no tokenizer either
    assert model_folder.inspect(model).problems == ["has no loadable tokenizer: tokenizer.json is empty"]
    (model / "tokenizer.json").write_text("{}")
    assert model_folder.inspect(model).complete


def test_rl_data_given_to_sft_is_refused(tmp_path: Path) -> None:
    dapo = _parquet(tmp_path / "dapo.parquet", [DAPO_ROW] * 3)
    setting = STACK.verl.sft_key("messages_key")  # the stack's key naming the column (issue 52 row 5)
    (line,) = [p.message for p in paths.check_data(str(dapo), None, "sft", ("messages", setting))]
    assert f"data {dapo} has no 'messages' column ({setting})" in line
    assert "RL data (dapo columns)" in line
    assert paths.check_data(str(dapo), None, "rl") == []


def test_the_sft_messages_key_is_the_recipes(tmp_path: Path) -> None:
    sft = _parquet(tmp_path / "sft.parquet", [{"conversation": MESSAGES, "messages": MESSAGES}])
    assert paths.check_data(str(sft), None, "sft") == []
    (line,) = [p.message for p in paths.check_data(str(sft), None, "sft", ("turns", "data.messages_key"))]
    assert "has no 'turns' column" in line


def test_sft_rows_that_are_not_messages_are_refused(tmp_path: Path) -> None:
    bad = _parquet(tmp_path / "bad.parquet", [{"messages": ["just text"]}])
    (line,) = [p.message for p in paths.check_data(str(bad), None, "sft")]
    assert "row 1: field 'messages' holds 'just text', not a message with a role" in line


def test_sft_or_plain_question_answer_data_given_to_rl_is_refused(tmp_path: Path) -> None:
    sft = _parquet(tmp_path / "sft.parquet", [{"messages": MESSAGES, "tools": "[]"}] * 2)
    (line,) = [p.message for p in paths.check_data(str(sft), None, "rl")]
    assert "holds SFT data (sft_multiturn columns), not RL data: the kit's ReToolRLDataset takes" in line
    qa = _parquet(tmp_path / "qa.parquet", [{"question": "1+1?", "answer": "2"}])
    (line,) = [p.message for p in paths.check_data(str(qa), None, "rl")]
    assert "has unrecognised columns ['answer', 'question']" in line


def test_an_rl_row_the_dataset_class_refuses_is_refused(tmp_path: Path) -> None:
    """The first rows go through ReToolRLDataset's own converter (recipes.retool.rows.to_rl_row)."""
    bad = _parquet(tmp_path / "dapo.parquet", [DAPO_ROW, {**DAPO_ROW, "reward_model": {"style": "rule"}}])
    (line,) = [p.message for p in paths.check_data(str(bad), None, "rl")]
    assert "row 2: field 'reward_model.ground_truth'" in line and "ReToolRLDataset refuses it" in line


def test_the_doctor_reads_data_with_the_same_rule(tmp_path: Path) -> None:
    from platforms.doctor.run import _data_file_result

    dapo = _parquet(tmp_path / "dapo.parquet", [DAPO_ROW])
    result = _data_file_result("paths.data.dapo.parquet", dapo, "prepare it")
    assert result.status == "OK" and "RL data (dapo columns), for an RL recipe's TRAIN_FILE/VAL_FILE" in result.summary
    qa = _parquet(tmp_path / "qa.parquet", [{"question": "1+1?", "answer": "2"}])
    result = _data_file_result("paths.data.qa.parquet", qa, "prepare it")
    assert result.status == "FAIL" and data_file.inspect(qa).problems[0] in result.summary


def test_a_kit_variable_its_reader_refuses_is_refused() -> None:
    cfg = OmegaConf.create({})
    (line,) = validate_values.env_problems(cfg, {"KIT_FUSED_KERNELS": "npuu"})
    assert line.startswith("KIT_FUSED_KERNELS=npuu: is not one of auto, ")
    for good in ("auto", "off", "NPU", "reference", "0"):
        assert validate_values.env_problems(cfg, {"KIT_FUSED_KERNELS": good}) == [], good
    assert validate_values.env_problems(cfg, {"KIT_FUSED_OPS": "rms_norm,ropee"})
    assert validate_values.env_problems(cfg, {"KIT_FUSED_OPS": "rms_norm,rope"}) == []
    assert validate_values.env_problems(cfg, {"KIT_ALLOW_EPHEMERAL_CKPT": "yes"})
    assert validate_values.env_problems(cfg, {"KIT_CPU_TCMALLOC": "off"})
    assert validate_values.env_problems(cfg, {"RETOOL_MATH_VERIFY_WORKERS": "two"})
    job = OmegaConf.create({"ray_kwargs": {"ray_init": {"runtime_env": {"env_vars": {"KIT_FUSED_OPS": "x"}}}}})
    (line,) = validate_values.env_problems(job, {})
    assert line.startswith("ray_kwargs.ray_init.runtime_env.env_vars.KIT_FUSED_OPS=x: names x")


def test_more_devices_per_node_than_the_profile_has_are_refused() -> None:
    cfg = OmegaConf.create({"trainer": {"n_gpus_per_node": 16}})
    (line,) = validate_values.device_problems(cfg, PROFILES["a2"])
    assert line.startswith("trainer.n_gpus_per_node=16: a node of the a2 profile has 8 devices")
    assert validate_values.device_problems(cfg, PROFILES["a3"]) == []
    assert validate_values.device_problems(OmegaConf.create({"trainer": {"n_gpus_per_node": 4}}), PROFILES["a2"]) == []


def test_values_outside_their_domains_are_refused() -> None:
    rl = OmegaConf.create(
        {
            "actor_rollout_ref": {
                "actor": {"optim": {"lr": -1}, "clip_ratio_low": -0.2, "clip_ratio_c": 1.0},
                "rollout": {"temperature": -0.5, "top_p": 0, "val_kwargs": {"n": 0, "top_p": 1.5}},
            }
        }
    )
    assert validate_values.domain_problems(rl, "rl") == [
        "actor_rollout_ref.actor.optim.lr=-1 must be > 0",
        "actor_rollout_ref.actor.clip_ratio_low=-0.2 must be >= 0",
        "actor_rollout_ref.actor.clip_ratio_c=1.0 must be > 1 (verl's dual-clip bound asserts it in the policy loss)",
        "actor_rollout_ref.rollout.temperature=-0.5 must be >= 0",
        "actor_rollout_ref.rollout.top_p=0 must be in (0, 1]",
        "actor_rollout_ref.rollout.val_kwargs.top_p=1.5 must be in (0, 1]",
        "actor_rollout_ref.rollout.val_kwargs.n=0 must be a whole number >= 1",
    ]
    sft = OmegaConf.create({"optim": {"lr": 0, "weight_decay": "abc"}})
    assert validate_values.domain_problems(sft, "sft") == [
        "optim.lr=0 must be > 0",
        "optim.weight_decay='abc' must be >= 0",
    ]


def _complete_step(step_dir: Path, phase: str, world: int = 1) -> Path:
    """Every file the stack's trainer of ``phase`` reads from a checkpoint step (its layout's names)."""
    layout = interpreter_stack().verl.checkpoint(phase)
    weights = layout.weights_dir(step_dir)
    (weights / "huggingface").mkdir(parents=True)
    (weights / layout.fsdp_config).write_text(json.dumps({"world_size": world}))
    for kind in layout.shard_kinds:
        for rank in range(world):
            (weights / layout.shard(kind, world, rank)).write_bytes(b"x")
    (step_dir / layout.loader_state).write_bytes(b"x")
    return step_dir


def test_a_checkpoint_of_the_other_phase_is_no_resume_path(tmp_path: Path) -> None:
    verl = interpreter_stack().verl
    sft_step = _complete_step(tmp_path / "sft" / "global_step_10", "sft", world=8)
    rl_step = _complete_step(tmp_path / "rl" / "global_step_5", "rl")

    def cfg(where: Path):
        return OmegaConf.create({"trainer": {"resume_mode": "resume_path", "resume_from_path": str(where)}})

    (line,) = validate_resume.problems(cfg(sft_step), "rl", verl)
    assert line.startswith(f"trainer.resume_from_path={sft_step} is an SFT checkpoint, and this is an RL run")
    assert "scripts/sft_to_rl.sh" in line
    (line,) = validate_resume.problems(cfg(rl_step), "sft", verl)
    assert "is an RL checkpoint, and this is an SFT run" in line
    assert validate_resume.problems(cfg(sft_step), "sft", verl) == validate_resume.problems(cfg(rl_step), "rl", verl)
    assert validate_resume.problems(cfg(rl_step), "rl", verl) == []


def test_an_incomplete_resume_path_is_refused_before_the_trainer_loads_it(tmp_path: Path) -> None:
    """A step folder that lost a shard passed the dry run and failed inside the workers after the job started."""
    verl = interpreter_stack().verl
    step = _complete_step(tmp_path / "rl" / "global_step_5", "rl")
    (step / "actor" / "optim_world_size_1_rank_0.pt").unlink()
    cfg = OmegaConf.create({"trainer": {"resume_mode": "resume_path", "resume_from_path": str(step)}})
    (line,) = validate_resume.problems(cfg, "rl", verl)
    assert line.startswith(f"trainer.resume_from_path={step} is incomplete (missing actor/optim_world_size_1_rank_0.pt")


def test_the_plan_refuses_each_case_before_any_work(tmp_path: Path, make_model, make_parquet) -> None:
    """The dry run and the launch build the same plan: each issue-44 input ends in its error line there."""
    from recipes.launch.planning import plan
    from recipes.launch.run_inputs.catalog import RECIPES

    model, bare = make_model(tmp_path / "model"), make_model(tmp_path / "bare")
    (bare / "tokenizer.json").unlink()
    dapo = _parquet(tmp_path / "dapo.parquet", [DAPO_ROW] * 64)
    sft_step = tmp_path / "sft_ckpt" / "global_step_10"
    sft_step.mkdir(parents=True)
    (sft_step / "fsdp_config.json").write_text('{"world_size": 8}')
    base = {"HOME": str(tmp_path), "CKPT_DIR": str(tmp_path / "ckpt"), "MODEL_PATH": str(model)}
    sft, rl = RECIPES["qwen3_4b_sft"], RECIPES["qwen3_4b_dapo"]
    good = {**base, "TRAIN_FILE": str(make_parquet(tmp_path / "d.parquet", 64))}
    resume = ["trainer.resume_mode=resume_path", f"trainer.resume_from_path={sft_step}"]
    runs = [
        (sft, {**good, "MODEL_PATH": str(bare)}, [], f"model MODEL_PATH={bare} has no tokenizer"),
        (sft, {**good, "TRAIN_FILE": str(dapo)}, [], f"data TRAIN_FILE={dapo} has no 'messages' column"),
        (rl, {**good, "KIT_FUSED_KERNELS": "npuu"}, [], "KIT_FUSED_KERNELS=npuu: is not one of"),
        (rl, good, ["trainer.n_gpus_per_node=16"], "trainer.n_gpus_per_node=16: a node of the a2 profile has 8"),
        (rl, good, resume, f"trainer.resume_from_path={sft_step} is an SFT checkpoint"),
        (rl, good, ["actor_rollout_ref.actor.optim.lr=-1"], "actor_rollout_ref.actor.optim.lr=-1 must be > 0"),
    ]
    for recipe, environ, overrides, line in runs:
        built = plan.build(recipe, "a2", STACK, overrides, path_check=True, environ=environ)
        assert any(e.startswith(line) for e in built.errors), (line, built.errors)
    rl_sft_data = {**good, "TRAIN_FILE": str(_parquet(tmp_path / "s.parquet", [{"messages": MESSAGES}] * 64))}
    built = plan.build(rl, "a2", STACK, [], path_check=True, environ=rl_sft_data)
    assert any("not RL data: the kit's ReToolRLDataset takes" in e for e in built.errors), built.errors
