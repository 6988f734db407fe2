"""The launcher's side on verl 0.9.1: ``--max-restarts``, the resume hint, ``retool-doctor --ckpt-dir``, the disk
pre-flight and the run log read 0.9.1's checkpoints as its trainers write and resume them.

The checkpoint trees are verl 0.9.1's own: the V1 trainer's ``_save_checkpoint`` (verl/trainer/ppo/v1/trainer_base.py,
``actor/`` by the real ``FSDPCheckpointManager``, ``data.pt``, the tracker, with ``max_actor_ckpt_to_keep=2``
rotating ``global_step_1``'s actor away) and the engine SFT trainer's ``CheckpointHandler.save_checkpoint``
(verl/utils/checkpoint/checkpoint_handler.py: the shards in the step folder, ``data_0.pt``, the tracker). What the
launcher predicts is held against what 0.9.1's own resume does on the same tree (``_load_checkpoint``,
``CheckpointHandler.load_checkpoint``).

Where the layouts differ (the SFT trainer's dataloader state is ``data_0.pt`` on 0.9.1, ``data.pt`` on 0.6.1; 0.9.1's
trainers follow the tracker, the reference's PPO trainer passes over an incomplete step, patch 0017) the stack's
:class:`platforms.verl_facts.CheckpointLayout` says so; each test here fails when the 0.9.1 layout is replaced by the
reference's (``test_the_reference_layout_misreads_091s_trees`` shows how).
"""

from __future__ import annotations

import dataclasses
import io
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from kit_testing import CheckpointWorkerGroup, StepDataLoader, gloo_world_of_one, needs_verl_09, tiny_checkpoint_manager

from platforms import CPU, stacks
from platforms.verl_facts import CheckpointLayout
from recipes.launch.supervision import restart, runlog

pytestmark = needs_verl_09()

CURRENT = stacks.get("0.9.1")
SAVED, KEEP = (1, 2, 3), 2  # three saves, two kept: global_step_1 is rotated away


def _v1_trainer(root: Path, **trainer: object) -> object:
    """verl 0.9.1's V1 (sync) PPO trainer with what ``_save_checkpoint``/``_load_checkpoint`` read: no Ray, the actor
    a real FSDPCheckpointManager in this process (kit_testing.CheckpointWorkerGroup). Call it in a process group."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo.checkpoint_callback import CheckpointCallback
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    t = object.__new__(PPOTrainerSync)
    settings = {"default_local_dir": str(root), "max_actor_ckpt_to_keep": KEEP, "default_hdfs_dir": None}
    settings |= {"resume_mode": "auto", "del_local_ckpt_after_load": False, **trainer}
    actor = {"strategy": "fsdp2", "checkpoint": {}}  # the engine the kit's recipes use on 0.9.1
    t.config = OmegaConf.create({"trainer": settings, "actor_rollout_ref": {"actor": actor}})
    t.actor_rollout_wg, t.use_critic, t.trainer_mode = CheckpointWorkerGroup(), False, "sync"
    t.checkpoint_callback, t.global_steps = CheckpointCallback(), 0
    t.train_dataloader = StepDataLoader(t)
    return t


class _Engine:
    """The engine calls CheckpointHandler makes, done by a real FSDPCheckpointManager (one rank)."""

    def __init__(self) -> None:
        self.manager = tiny_checkpoint_manager()

    def save_checkpoint(self, local_path: str, hdfs_path: str | None = None, global_step: int = 0,
                        max_ckpt_to_keep: int | None = None) -> None:  # fmt: skip
        self.manager.save_checkpoint(local_path, hdfs_path, global_step, max_ckpt_to_keep=max_ckpt_to_keep)

    def load_checkpoint(self, local_path: str) -> None:
        self.manager.load_checkpoint(local_path)


def _sft_handler(root: Path) -> object:
    from verl.utils.checkpoint.checkpoint_handler import CheckpointHandler, OrchestrationMode

    loader = SimpleNamespace(state_dict=lambda: {"served": 1}, load_state_dict=lambda state: None)
    return CheckpointHandler(_Engine(), loader, default_local_dir=str(root), max_ckpt_to_keep=KEEP,
                             mode=OrchestrationMode.RAY)  # fmt: skip


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """{"rl": a V1 run's checkpoint folder, "sft": an engine SFT run's}, each saved at steps 1-3 by verl 0.9.1."""
    root = tmp_path_factory.mktemp("trees091")
    with gloo_world_of_one():
        trainer, handler = _v1_trainer(root / "rl"), _sft_handler(root / "sft")
        for step in SAVED:
            trainer.global_steps = step
            trainer._save_checkpoint()
            handler.save_checkpoint(step)
    return {"rl": root / "rl", "sft": root / "sft"}


@pytest.fixture
def tree(saved: dict[str, Path], tmp_path: Path, request: pytest.FixtureRequest) -> Path:
    """A copy of the phase's tree (``request.param``) that the test may damage."""
    return Path(shutil.copytree(saved[request.param], tmp_path / request.param))


def _layout(phase: str) -> CheckpointLayout:
    return CURRENT.verl.checkpoint(phase)


def _verl_resumes(phase: str, ckpt: Path) -> int:
    """The step verl 0.9.1's own trainer of ``phase`` resumes ``ckpt`` at (0: from scratch); raises what it raises."""
    with gloo_world_of_one():
        if phase == "rl":
            trainer = _v1_trainer(ckpt)
            trainer._load_checkpoint()
            return trainer.global_steps
        return _sft_handler(ckpt).load_checkpoint()


def test_the_trees_are_the_layouts_091_writes(saved: dict[str, Path]) -> None:
    """The names the launcher reads, on verl 0.9.1's own trees: the V1 trainer's rotation leaves global_step_1 with
    its data.pt and no actor/; the engine SFT trainer keeps data_0.pt, not data.pt, and rotates whole folders."""
    rl, sft = _layout("rl"), _layout("sft")
    assert sorted(p.name for p in (saved["rl"] / "global_step_1").iterdir()) == ["data.pt"]
    assert rl.saved_steps(saved["rl"]) == [1, 2, 3] and rl.complete_steps(saved["rl"]) == [2, 3]
    assert sorted(p.name for p in (saved["sft"] / "global_step_3").iterdir()) == [
        "data_0.pt", "extra_state_world_size_1_rank_0.pt", "fsdp_config.json", "huggingface",
        "model_world_size_1_rank_0.pt", "optim_world_size_1_rank_0.pt",
    ]  # fmt: skip
    assert sft.saved_steps(saved["sft"]) == sft.complete_steps(saved["sft"]) == [2, 3]
    for phase in ("rl", "sft"):
        assert (
            _layout(phase).tracker_step(saved[phase]) == 3
            and _layout(phase).missing(saved[phase] / "global_step_3") == []
        )


#: (damage, phase) -> (the launcher's step, words of its note, verl's own step or the exception it dies with). The V1
#: trainer with the kit's series passes over a vanished or incomplete step (patches/0.9.1/0006, as 0017 on 0.6.1);
#: the engine SFT trainer follows the tracker (checkpoint_handler.py _find_latest_checkpoint).
OUTCOMES = {
    ("gone", "rl"): (2, "global_step_3, the tracker's, does not exist", 2),
    ("gone", "sft"): (None, "global_step_3, the tracker's, does not exist: the trainer starts from scratch", 0),
    ("empty tracker", "rl"): (2, "the tracker holds no step number", 2),
    ("empty tracker", "sft"): (None, "the tracker holds no step number: the trainer fails reading it", ValueError),
    ("lost shard", "rl"): (2, "global_step_3, the tracker's, is incomplete (missing actor/optim_world_size_1_", 2),
    ("lost shard", "sft"): (3, "global_step_3 is incomplete (missing optim_world_size_1_", FileNotFoundError),
}


def _damage(tree: Path, damage: str) -> None:
    layout = _layout(tree.name)
    if damage in ("gone", "empty tracker"):
        shutil.rmtree(tree / "global_step_3")
    if damage == "empty tracker":  # a kill inside 0.9.1's plain open(..., "w") of the tracker
        (tree / layout.tracker).write_text("")
    if damage == "lost shard":
        (layout.weights_dir(tree / "global_step_3") / "optim_world_size_1_rank_0.pt").unlink()


@pytest.mark.parametrize("damage", ["gone", "empty tracker", "lost shard"])
@pytest.mark.parametrize("tree", ["rl", "sft"], indirect=True)
def test_the_launcher_resumes_where_091s_trainer_does(tree: Path, damage: str) -> None:
    """Healthy, then damaged: the step the launcher names is the one verl 0.9.1's own trainer resumes, and where
    verl dies instead, the launcher's note says so."""
    phase, layout = tree.name, _layout(tree.name)
    assert restart.resume_point(tree, layout) == (3, "")
    assert _verl_resumes(phase, tree) == 3
    _damage(tree, damage)
    step, words, verl_does = OUTCOMES[damage, phase]
    found = restart.resume_point(tree, layout)
    assert found[0] == step and words in found[1], found
    if isinstance(verl_does, int):
        assert _verl_resumes(phase, tree) == verl_does
    else:
        with pytest.raises(verl_does):
            _verl_resumes(phase, tree)


def _stand_in(steps: int) -> list[str]:
    """A trainer that logs ``steps`` steps as verl's console logger does and dies."""
    code = f"import sys\nfor s in range(1, {steps + 1}): print(f'step:{{s}} - loss:0.5', flush=True)\nsys.exit(1)"
    return [sys.executable, "-c", code]


@pytest.mark.parametrize("tree", ["rl", "sft"], indirect=True)
def test_a_restart_names_the_step_091_resumes_and_the_lost_steps(tree: Path) -> None:
    """``--max-restarts``: attempt 1 logs steps 1-5 after global_step_3 was saved; the restart line names the step
    verl 0.9.1 resumes and 2 lost steps, in the terminal and in the run log beside the checkpoints."""
    log = runlog.RunLog(tree / runlog.LOG_NAME, io.StringIO())
    err, out = runlog.Tee(io.StringIO(), log), runlog.Tee(io.StringIO(), log)
    rc = restart.supervise(_stand_in(5), {}, tree, 1, err, out, layout=_layout(tree.name))
    log.close()
    assert rc == 1
    text = (tree / runlog.LOG_NAME).read_text()
    assert "restart 1/1: trainer exited with status 1 after step 5; resuming from global_step_3 (lost 2 steps" in text
    assert "attempt 2: rc 1, from global_step_3, last step 5" in text and "step:5 - loss:0.5" in text
    assert _layout(tree.name).resume_point(tree) == (3, "")  # run.log beside the steps is no step


@pytest.mark.parametrize("tree", ["rl", "sft"], indirect=True)
def test_an_incomplete_newest_step_is_named_in_the_restart_line(tree: Path) -> None:
    """A step that lost its optimizer shard: the V1 trainer resumes the step before it (1 more step lost), the SFT
    trainer loads it anyway and dies, and the restart line says which."""
    _damage(tree, "lost shard")
    lines = io.StringIO()
    restart.supervise(_stand_in(4), {}, tree, 1, lines, io.StringIO(), layout=_layout(tree.name))
    step, words, _ = OUTCOMES["lost shard", tree.name]
    assert f"resuming from global_step_{step} [{words}" in lines.getvalue()
    assert f"] (lost {4 - step} steps of work)" in lines.getvalue()


def _failed_plan(tree: Path) -> object:
    """What ``_resume_hint`` reads of a plan: its stack, phase, checkpoint folder, node count and command."""
    facts = SimpleNamespace(ckpt_dir=tree, layout=SimpleNamespace(nnodes=1))
    return SimpleNamespace(stack=CURRENT, recipe=SimpleNamespace(phase=tree.name), facts=facts, command=["x"])


@pytest.mark.parametrize("tree", ["rl", "sft"], indirect=True)
def test_the_resume_hint_names_the_step_091_resumes(tree: Path) -> None:
    from recipes.launch.cli import _resume_hint

    hint = _resume_hint(1, _failed_plan(tree))
    assert hint == f"run: the trainer ended with exit status 1; run the same command again to resume from " \
                   f"global_step_3 in {tree}"  # fmt: skip
    (tree / "global_step_3" / _layout(tree.name).loader_state).unlink()
    resume = "global_step_2 [global_step_3, the tracker's," if tree.name == "rl" else "global_step_3 [global_step_3"
    hint = _resume_hint(1, _failed_plan(tree))
    assert f"resume from {resume} is incomplete (missing {_layout(tree.name).loader_state})" in hint, hint


def _doctor(tree: Path, stack: stacks.Stack) -> dict:
    from platforms.doctor.cli import run_checks
    from platforms.doctor.probes import Options, Probes

    opts = Options(profile="cpu", only=frozenset({"disk"}), ckpt_dir=tree, stack=stack, min_free_gb=0.0)
    probes = Probes(env={}, dev_root=tree, detect_platform=lambda: CPU)
    [found] = [r for r in run_checks(opts, probes).results if r.check == "disk.checkpoints"]
    return {"status": found.status, "summary": found.summary, "fix": found.fix, **found.details}


@pytest.mark.parametrize("tree", ["rl", "sft"], indirect=True)
def test_the_doctor_tells_a_complete_091_checkpoint_from_an_incomplete_one(tree: Path) -> None:
    """``retool-doctor --stack 0.9.1 --ckpt-dir``: OK with the step a run resumes; WARN naming the lost file, with
    the complete step to resume instead, once the newest step lost its dataloader state (the last file saved
    before the tracker)."""
    found = _doctor(tree, CURRENT)
    assert found["status"] == "OK" and found["phase"] == tree.name, found
    assert "resumes from global_step_3" in found["summary"] and found["complete"] == [2, 3]
    loader = _layout(tree.name).loader_state
    (tree / "global_step_3" / loader).unlink()
    found = _doctor(tree, CURRENT)
    assert found["status"] == "WARN" and f"is incomplete (missing {loader})" in found["summary"], found
    assert f"trainer.resume_from_path={tree}/global_step_2" in found["fix"]


@pytest.mark.parametrize("tree", ["sft"], indirect=True)
def test_the_reference_layout_misreads_091s_trees(tree: Path) -> None:
    """Why the layout is the stack's: read with 0.6.1's (data.pt), 0.9.1's complete SFT steps look incomplete, and
    the reference's RL layout is 0.9.1's (the V1 trainer writes what ray_trainer.py did, and resumes by patch 0006
    the way patch 0017 makes 0.6.1's resume)."""
    reference = stacks.get("0.6.1").verl
    assert _doctor(tree, stacks.get("0.6.1"))["status"] == "WARN"
    assert reference.checkpoint("sft").complete_steps(tree) == []
    assert reference.checkpoint("rl") == _layout("rl")
    assert dataclasses.replace(reference.checkpoint("sft"), loader_state="data_0.pt") == _layout("sft")


def test_the_disk_preflight_sizes_a_091_checkpoint_as_it_lands_on_disk(tmp_path: Path) -> None:
    """12 bytes a parameter (recipes/launch/sizing/budget.py, the doctor's disk.py): verl 0.9.1's engine keeps the
    trained weights in fp32 (engine/fsdp.yaml model_dtype), saves ['model', 'optimizer', 'extra'] by default
    (actor/actor.yaml, sft_trainer_engine.yaml checkpoint.save_contents) and its optimizer is AdamW (two fp32
    moments); the shards its FSDPCheckpointManager writes for a Qwen3 after one AdamW step hold that many bytes."""
    import torch
    import verl
    from omegaconf import OmegaConf
    from transformers import AutoModelForCausalLM, Qwen3Config
    from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager

    from platforms.doctor import disk
    from recipes.launch.run_inputs import catalog
    from recipes.launch.sizing import budget, memory

    conf = Path(verl.__file__).parent / "trainer" / "config"
    assert OmegaConf.load(conf / "engine" / "fsdp.yaml").model_dtype == "fp32"
    assert OmegaConf.load(conf / "optim" / "fsdp.yaml").optimizer == "AdamW"
    for yaml, key in (("actor/actor.yaml", "checkpoint"), ("sft_trainer_engine.yaml", "checkpoint")):
        assert list(OmegaConf.load(conf / yaml)[key].save_contents) == ["model", "optimizer", "extra"], yaml
    shape = {"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32}
    config = Qwen3Config(vocab_size=4096, hidden_size=128, intermediate_size=256, tie_word_embeddings=False, **shape)
    model = AutoModelForCausalLM.from_config(config).float()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(input_ids=torch.tensor([[1, 2, 3]]), labels=torch.tensor([[1, 2, 3]])).loss.backward()
    optimizer.step()
    with gloo_world_of_one():
        FSDPCheckpointManager(model, optimizer).save_checkpoint(str(tmp_path / "global_step_1"), global_step=1)
    on_disk = sum(f.stat().st_size for f in (tmp_path / "global_step_1").glob("*_world_size_1_rank_0.pt"))
    facts = memory.facts_from_config(config.to_dict(), "tiny", catalog.get("qwen3_4b_dapo").model)
    planned = budget.checkpoint_budget("rl", 1, 1, None, facts, "test").per_checkpoint
    assert facts.parameters == sum(p.numel() for p in model.parameters())
    assert planned == pytest.approx(on_disk, rel=0.03), (planned, on_disk)
    assert disk.parameters(config.to_dict()) * disk.CKPT_BYTES_PER_PARAM == planned


def test_a_091_checkpoint_given_as_the_model_names_the_merge_that_makes_one(saved: dict[str, Path]) -> None:
    """MODEL_PATH / ``--model`` pointing into a 0.9.1 run: the line names the hand-off of that phase and its newest
    step (an RL run's ``actor/`` is merged by scripts/rl_to_hf.sh, not sft_to_rl.sh)."""
    from platforms import model_folder

    rl, sft = saved["rl"], saved["sft"]
    for where in (rl, rl / "global_step_3", rl / "global_step_3" / "actor"):
        assert model_folder.inspect(where).problems == [
            "is a verl FSDP checkpoint, not a Hugging Face model folder: merge it first "
            f"(scripts/rl_to_hf.sh --ckpt-dir {rl} --step 3)"
        ], where
    (problem,) = model_folder.inspect(sft / "global_step_2").problems
    assert problem.endswith(f"(scripts/sft_to_rl.sh --ckpt-dir {sft} --step 2)")
