"""Issue 52, rows 1, 3, 4 and 5: the dry run of the current stack (verl 0.9.1) applies the current stack's facts,
not the reference's (verl 0.6.1).

* Row 1: the reward's keyword arguments are checked where 0.9.1 reads the reward (``reward.custom_reward_function``).
* Row 3: a rule against a verl bug applies to the stacks whose verl has the bug (``VerlFacts.bugs``). 0.9.1 syncs the
  weights whatever ``free_cache_engine`` says (verl #4147 is 0.6.1's) and rolls the fused kernels' labels over the
  whole sequence before the SP split (verl #6068 is fixed in it).
* Row 4: a 0.6.1 key that 0.9.1 keeps as dead legacy config, or that ``+`` adds unread, is refused in one line (exit
  2) naming the key 0.9.1 reads (``VerlFacts.legacy_keys``); the RL table is held to verl's own migration.
* Row 5: the data error names 0.9.1's messages key, and no dry-run line credits a patch the stack's series lacks.

Runs under the current stack's interpreter (``bash scripts/test.sh --stack 0.9.1``); skips under another verl.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from dry_run_cases import Case, foreign_patches, run_case
from kit_testing import needs_verl_09, refused_in_one_line

pytestmark = needs_verl_09()

RUN = ("--hw", "a2", "--dry-run", "--no-path-check", "--stack", "0.9.1")


def _stack():  # noqa: ANN202 - a platforms.stacks.Stack
    from platforms import stacks

    return stacks.get("0.9.1")


def _verl_file(relative: str) -> Path:
    import verl

    return Path(verl.__file__).parent / relative


# -- row 1: the reward's keyword arguments, at the key 0.9.1 reads


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("reward.custom_reward_function.reward_kwargs.shaping=bogus", "reward_kwargs.shaping=bogus: one of"),
        ("++reward.custom_reward_function.reward_kwargs.verifier=nope", "reward_kwargs.verifier=nope: one of"),
        ("+reward.custom_reward_function.reward_kwargs.bogus=1", "reward_kwargs.bogus: the kit's reward takes"),
    ],
)
def test_row1_reward_kwargs_are_checked_at_the_stacks_reward_key(override: str, named: str, tmp_path: Path) -> None:
    rc, out = run_case(Case("row1", ("qwen3_4b_dapo", *RUN, override)), tmp_path)
    assert rc == 1 and "dry run OK" not in out, out
    assert f"error: reward.custom_reward_function.{named}" in out, out


# -- row 3: rules against a verl bug apply where the stack's verl has it


def test_row3_free_cache_engine_off_is_not_refused_by_0_6_1s_bug(tmp_path: Path) -> None:
    rc, out = run_case(
        Case("row3", ("qwen3_4b_dapo", *RUN, "actor_rollout_ref.rollout.free_cache_engine=False")), tmp_path
    )
    assert rc == 0 and "dry run OK" in out, out
    assert "#4147" not in out and "0.6.1" not in out


def test_row3_fused_kernels_with_ulysses_sp_is_not_refused_by_0_6_1s_bug(tmp_path: Path) -> None:
    fused = (
        "actor_rollout_ref.model.use_fused_kernels=True",
        "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2",
    )
    rc, out = run_case(Case("row3", ("qwen3_4b_dapo", *RUN, *fused)), tmp_path)
    assert rc == 0 and "dry run OK" in out, out
    assert "#3512" not in out and "fused log-probs on" in out


def test_row3_the_stacks_verl_has_neither_bug() -> None:
    """The facts say 0.9.1 has neither bug; its code says why (the lines verl_facts.py cites)."""
    from platforms import verl_facts

    assert not set(_stack().verl.bugs) & {verl_facts.WEIGHTS_UNSYNCED_WITHOUT_FREE_CACHE, verl_facts.FUSED_SP_LABELS}
    # the naive (colocated) sync pushes the weights on every call, not only when free_cache_engine wakes the rollout
    tree = ast.parse(_verl_file("workers/engine_workers.py").read_text())
    worker = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ActorRolloutRefWorker")
    sync = next(n for n in worker.body if isinstance(n, ast.AsyncFunctionDef) and n.name == "update_weights")
    unconditional = [
        s.value.value.func.attr
        for s in sync.body
        if isinstance(s, ast.Expr) and isinstance(s.value, ast.Await) and isinstance(s.value.value, ast.Call)
    ]
    assert "update_weights" in unconditional
    # the engine hands the fused forward labels rolled over the whole sequence before the SP split
    engine = _verl_file("workers/engine/fsdp/transformer_impl.py").read_text()
    assert 'extra_args["shift_labels"] = output_args["input_ids_rmpad_rolled"]' in engine
    assert "rolled_labels = shift_labels" in _verl_file("models/transformers/dense_common.py").read_text()


# -- row 4: 0.6.1 keys 0.9.1 never reads


@pytest.mark.parametrize(
    ("recipe", "override", "reads"),
    [
        ("qwen3_4b_dapo", "reward_model.reward_manager=naive", "reward.reward_manager.name"),
        ("qwen3_4b_dapo", "+sandbox_fusion.url=http://x", "reward.sandbox_fusion.url"),
        ("qwen3_4b_sft", "+model.partial_pretrain=/x", "model.path"),
        ("qwen3_4b_sft", "+data.multiturn.enable=true", "data.messages_key"),
        ("qwen3_4b_sft", "++data.multiturn.messages_key=turns", "data.messages_key"),
    ],
)
def test_row4_a_legacy_key_is_refused_in_one_line(recipe: str, override: str, reads: str) -> None:
    line = refused_in_one_line(["bash", f"recipes/run_{recipe}_npu.sh", *RUN, override])  # exit 2, stdout empty
    key = override.lstrip("+").split("=", 1)[0]
    assert f"{key}" in line and "verl 0.9.1" in line and reads in line, line


def _legacy_leaves() -> list[str]:
    """Every key of verl 0.9.1's legacy reward config (verl/trainer/config/legacy_reward_impl.yaml)."""
    from omegaconf import OmegaConf

    legacy = OmegaConf.load(_verl_file("trainer/config/legacy_reward_impl.yaml"))

    def leaves(node: object, prefix: str) -> list[str]:
        if not OmegaConf.is_dict(node):
            return [prefix]
        return [leaf for k, v in node.items() for leaf in leaves(v, f"{prefix}.{k}" if prefix else str(k))]

    return leaves(legacy, "")


def test_row4_the_rl_table_is_verls_own_migration() -> None:
    """Each legacy key, set alone to a sentinel, lands where verl 0.9.1's own migration
    (``migrate_legacy_reward_impl``, which only the fully-async entry calls, not main_ppo) puts it, and the table names
    that key; a key the migration drops has no counterpart in the table either."""
    from omegaconf import OmegaConf
    from verl.experimental.reward_loop import migrate_legacy_reward_impl

    from recipes.launch.planning import compose
    from recipes.launch.run_inputs import catalog

    stack = _stack()
    entry = catalog.get("qwen3_4b_dapo")
    base = compose.compose(entry, ["profile=a3", *compose.stack_overrides(entry, stack)])
    checked = 0
    for key in _legacy_leaves():
        if key.startswith(f"{stack.verl.ignored_reward_key}."):  # the reward key's own rule (reward_key.py)
            continue
        cfg = base.copy()
        if key.endswith(("reward_loop_module_path", "reward_loop_class_name")):  # verl moves them with the source
            OmegaConf.update(cfg, "reward_model.reward_loop_source", "register")
        sentinel = f"sentinel-{key}"
        OmegaConf.update(cfg, key, sentinel, force_add=True)
        migrated = OmegaConf.to_container(migrate_legacy_reward_impl(cfg), resolve=False)
        landed = [k for k, v in _flatten(migrated) if v == sentinel]
        assert stack.verl.legacy_replacement("rl", key) == (landed[0] if landed else ""), key
        checked += 1
    assert checked >= 20


def _flatten(node: object, prefix: str = "") -> list[tuple[str, object]]:
    if isinstance(node, dict):
        return [kv for k, v in node.items() for kv in _flatten(v, f"{prefix}.{k}" if prefix else str(k))]
    return [(prefix, node)]


def test_row4_the_sft_legacy_keys_are_absent_and_their_replacements_present() -> None:
    from omegaconf import OmegaConf

    from recipes.launch.planning import compose
    from recipes.launch.run_inputs import catalog

    stack = _stack()
    entry = catalog.get("qwen3_4b_sft")
    cfg = compose.compose(entry, ["profile=a3", *compose.stack_overrides(entry, stack)])
    legacy = stack.verl.legacy_keys["sft"]
    assert {"model.partial_pretrain", "data.multiturn"} <= set(legacy)
    added = {key.lstrip("+") for key in stack.verl.sft_keys.values() if key.startswith("++")}  # not in verl's yaml
    for old in legacy:
        assert OmegaConf.select(cfg, old, default="absent") == "absent", old
        new = stack.verl.legacy_replacement("sft", old)
        assert new in added or OmegaConf.select(cfg, new, default="absent") != "absent", new


# -- row 5: messages name the stack's keys and patches


def test_row5_the_sft_data_error_names_the_stacks_messages_key(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rl = tmp_path / "dapo.parquet"  # an RL parquet given as SFT data
    row = {"prompt": [{"role": "user", "content": "1+1?"}], "reward_model": {"ground_truth": "2"}, "data_source": "x"}
    pq.write_table(pa.Table.from_pylist([row] * 3), rl)
    args = ("qwen3_4b_sft", "--hw", "cpu", "--dry-run", "--stack", "0.9.1")
    rc, out = run_case(Case("row5", args, env={"TRAIN_FILE": str(rl)}, model=True), tmp_path)
    assert rc == 1, out
    [line] = [line for line in out.splitlines() if "has no 'messages' column" in line]
    assert "(data.messages_key)" in line and "multiturn" not in line, line


def test_row5_the_in_flight_row_credits_the_stacks_verl(tmp_path: Path) -> None:
    rc, out = run_case(Case("row5", ("qwen3_4b_dapo", *RUN)), tmp_path)
    assert rc == 0, out
    [row] = [line for line in out.splitlines() if line.startswith("in flight:")]
    assert "patch 0028" not in row and _stack().verl.server_admits_by in row, row
    assert foreign_patches(out, _stack()) == []


def test_the_learning_checks_second_try_override_is_a_key_of_the_rl_config() -> None:
    """The learning check's second try reshuffles its training prompts with ``data.seed`` (recipes/smoke/learn.py
    ``second_try_override``): a key of 0.9.1's RL config, or Hydra's struct rule would refuse it mid-run."""
    from platforms import PROFILES
    from recipes.smoke.commands import check_rl_overrides
    from recipes.smoke.learn import second_try_override

    check_rl_overrides(PROFILES["cpu"], _stack(), [second_try_override(())])
    with pytest.raises(Exception, match="no key data.sed"):
        check_rl_overrides(PROFILES["cpu"], _stack(), ["data.sed=1"])
