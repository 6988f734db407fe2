"""End to end on CPU (patch 0025): a PPO run stopped inside epoch 1 and resumed serves the prompts of the
uninterrupted run, in its order, also in the epoch after.

``python -m verl.trainer.main_ppo`` GRPO with the ``hf`` rollout (sync), 2 FSDP2 worker processes, 2 dataloader worker
processes, on 6 distinct prompts, 2 per step: 3 steps per epoch, 3 epochs. The reward function returns each prompt's
``extra_info.index`` as a reward extra, and ``trainer.rollout_data_dir`` dumps it per step (``<step>.jsonl``), so the
prompts each step served are read back exactly. Run 1 trains all 9 steps uninterrupted and saves a checkpoint after
step 4 (epoch 1, after its first batch). Run 2 starts from a copy of that checkpoint alone (``resume_mode=auto``,
what the kit's restart supervisor relaunches with), as a run stopped there would, and trains steps 5-9: the rest of
epoch 1 and all of epoch 2 must be the uninterrupted run's. Unpatched 0.6.1 cannot run main_ppo on CPU at all, so
the comparison runs the kit's verl less patch 0025 (``kit_verl_without``): the resumed run replays epoch 0's order
(opt-in, ``-m unpatched_e2e``: tests/conftest.py; the default run keeps 0025's own unpatched check).
Resumes from every step, at epoch ends, and data.pt of the old sampler: tests/patches/test_ppo_resume_sampler_order.py.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path

import pytest
from kit_cpu_ppo import common_overrides, run_ppo
from kit_testing import tiny_model_dir

from recipes.launch.supervision import restart

pytestmark = pytest.mark.slow

PROMPTS, BATCH, EPOCHS = 6, 2, 3
STOP_AFTER = PROMPTS // BATCH + 1  # epoch 1 (counted from 0), after its first batch

REWARD_PY = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """Response-dependent (GRPO gets advantages), and the prompt's index as a reward extra the dump records."""
    return {"score": (sum(map(ord, solution_str)) % 97) / 97, "prompt_index": extra_info["index"]}
'''


def _assets(root: Path) -> dict[str, Path]:
    import pandas as pd

    rows = [
        {
            "data_source": "kit_arith",
            "prompt": [{"role": "user", "content": f"What is {i + 2} + {3 * i + 1}?"}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(4 * i + 3)},
            "extra_info": {"index": i, "split": "train"},
        }
        for i in range(PROMPTS)
    ]
    pd.DataFrame(rows).to_parquet(root / "prompts.parquet")
    (root / "reward.py").write_text(REWARD_PY)
    return {"data": root / "prompts.parquet", "reward": root / "reward.py", "model": tiny_model_dir()}


def _overrides(assets: dict[str, Path], ckpt: Path, dump: Path) -> list[str]:
    return [
        *common_overrides(assets, ckpt),
        f"data.train_batch_size={BATCH}",
        "data.dataloader_num_workers=2",
        "data.max_prompt_length=64",
        "data.max_response_length=8",
        "actor_rollout_ref.rollout.name=hf",
        "actor_rollout_ref.rollout.mode=sync",
        "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.actor.use_kl_loss=False",
        f"trainer.total_epochs={EPOCHS}",
        f"trainer.save_freq={STOP_AFTER}",
        f"trainer.rollout_data_dir={dump}",
    ]


def _served(dump: Path) -> dict[int, list[int]]:
    """{step: the prompt indices it served (each once, sorted)} from the rollout dumps."""
    served = {}
    for path in dump.glob("*.jsonl"):
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        served[int(path.stem)] = sorted({row["prompt_index"] for row in rows})
    return served


def check_resumed_run_serves_the_uninterrupted_prompts() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        assets = _assets(root)
        walls = [run_ppo(_overrides(assets, root / "ckpt", root / "dump"), root / "full.log", root)]
        # the stopped run: only the checkpoint of step STOP_AFTER, as a run ended there leaves it
        stopped = root / "stopped"
        shutil.copytree(root / "ckpt" / f"global_step_{STOP_AFTER}", stopped / f"global_step_{STOP_AFTER}")
        (stopped / restart.TRACKER).write_text(str(STOP_AFTER))
        resumed_overrides = [*_overrides(assets, stopped, root / "dump-resumed"), "trainer.resume_mode=auto"]
        walls.append(run_ppo(resumed_overrides, root / "resumed.log", root))
        assert f"Resuming from {stopped / f'global_step_{STOP_AFTER}'}" in (root / "resumed.log").read_text()
        total = EPOCHS * PROMPTS // BATCH
        full, resumed = _served(root / "dump"), _served(root / "dump-resumed")
        assert sorted(full) == list(range(1, total + 1)), f"the uninterrupted run dumped steps {sorted(full)}"
        expected = [full[step] for step in range(STOP_AFTER + 1, total + 1)]
        got = [resumed[step] for step in sorted(resumed)]
        assert sorted(resumed) == list(range(STOP_AFTER + 1, total + 1)) and got == expected, (
            f"resumed from global_step_{STOP_AFTER} (epoch 1 after 1 of its {PROMPTS // BATCH} steps), steps "
            f"{sorted(resumed)} served other prompts than the uninterrupted run:\n  resumed run:       {got}\n"
            f"  uninterrupted run: {expected}\n  (uninterrupted, all steps: {[full[s] for s in sorted(full)]})"
        )
        print(f"\n[cpu-rl-resume] walls {walls[0]:.1f}s + {walls[1]:.1f}s; prompts per step {got}")


def test_patched_resume_serves_the_uninterrupted_prompts() -> None:
    t0 = time.perf_counter()
    check_resumed_run_serves_the_uninterrupted_prompts()
    print(f"[cpu-rl-resume] test wall {time.perf_counter() - t0:.1f}s")


@pytest.mark.unpatched_e2e  # opt-in: tests/conftest.py OPT_IN_MARKERS
def test_without_the_patch_the_resumed_run_replays_epoch_0(kit_verl_without) -> None:
    kit_verl_without("0025").expect_failure(
        __file__,
        "check_resumed_run_serves_the_uninterrupted_prompts",
        match="served other prompts than the uninterrupted run",
        timeout=900,
    )
