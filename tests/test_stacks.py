"""Issue 43: a stack is one notion in one place. pins.env holds both stacks (the reference's keys plain, the current
stack's as V091_ overrides); Python (platforms.stacks, platforms.pins) and shell (scripts/lib/stack.sh) read them
the same way, every entry point takes --stack and refuses an unknown one in one line, and the reward goes where the
stack's verl reads it."""

from __future__ import annotations

import os
import shlex
import subprocess

import pytest
from kit_testing import REPO_ROOT, kit_env
from omegaconf import OmegaConf

from platforms import pins, stacks
from platforms.cli_errors import EXIT_USAGE, UsageError
from recipes.launch import reward_key

CURRENT = "0.9.1"


def test_the_current_stack_overrides_only_keys_the_reference_has() -> None:
    """A V091_ key that names no plain key would be a typo nobody reads: every override replaces a reference pin."""
    raw = pins.load()
    prefix = pins.stack_prefix(CURRENT)
    overrides = {k.removeprefix(prefix) for k in raw if k.startswith(prefix)}
    assert overrides, "pins.env has no V091_ keys"
    reference = pins.for_stack(pins.default_stack())
    assert overrides <= set(reference), f"V091_ keys without a reference key: {sorted(overrides - set(reference))}"
    current = pins.for_stack(CURRENT)
    assert set(current) == set(reference)
    assert current["VERL_VERSION"] == "0.9.1" and reference["VERL_VERSION"] == "0.6.1"
    assert current["VLLM_VERSION"] == "0.23.0" and current["CANN_VERSION"] == "9.1.0"
    assert pins.python_requirements(CURRENT)["transformers"] == "5.9.0"
    assert int(pins.python_requirements(CURRENT)["numpy"].split(".")[0]) >= 2  # verl 0.9.1 requires numpy>=2


@pytest.mark.parametrize("stack", ["0.6.1", CURRENT])
def test_bash_and_python_see_the_same_stack(stack: str) -> None:
    """scripts/lib/stack.sh's kit_use_stack and platforms.pins.for_stack agree key by key, and on the stack's paths."""
    python_view = pins.for_stack(stack)
    keys = " ".join(python_view)
    script = (
        f"set -euo pipefail; KIT_ROOT={shlex.quote(str(REPO_ROOT))}; source scripts/lib/stack.sh; "
        f"kit_use_stack {stack}; for k in {keys} KIT_VENV KIT_VERL_TREE KIT_PATCH_DIR; do "
        'printf "%s=%s\\n" "$k" "${!k}"; done'
    )
    env = {k: v for k, v in os.environ.items() if k != "KIT_STACK"}
    out = subprocess.run(["bash", "-c", script], cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=True)
    bash_view = dict(line.split("=", 1) for line in out.stdout.splitlines())
    paths = {k: bash_view.pop(k) for k in ("KIT_VENV", "KIT_VERL_TREE", "KIT_PATCH_DIR")}
    assert bash_view == python_view
    chosen = stacks.get(stack)
    assert paths == {
        "KIT_VENV": str(chosen.venv),
        "KIT_VERL_TREE": str(chosen.verl_tree),
        "KIT_PATCH_DIR": str(chosen.patch_dir),
    }


def test_the_reference_series_stays_where_git_am_finds_it() -> None:
    """`git am patches/*.patch` keeps meaning the reference series; the current stack's lives beside it."""
    assert stacks.get("0.6.1").patch_dir == REPO_ROOT / "patches"
    assert stacks.get(CURRENT).patch_dir == REPO_ROOT / "patches" / CURRENT
    assert stacks.get("0.6.1").venv.name == ".venv" and stacks.get(CURRENT).venv.name == ".venv-0.9.1"


def test_an_unknown_stack_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(UsageError, match="unknown stack '0.8'"):
        stacks.get("0.8")
    monkeypatch.setenv("KIT_STACK", "0.8")
    with pytest.raises(UsageError, match="KIT_STACK"):
        pins.get("VERL_VERSION")


def test_kit_stack_picks_the_pins_every_reader_gets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KIT_STACK", CURRENT)
    assert pins.get("VERL_VERSION") == "0.9.1"
    assert stacks.active().verl.reward_key == "reward.custom_reward_function"
    monkeypatch.delenv("KIT_STACK")
    assert stacks.active().name == "0.6.1"  # this venv's verl is 0.6.1
    assert stacks.active().verl.reward_key == "custom_reward_function"


# Every entry point where the stack matters: --stack in its help, and an unknown one refused in one line, exit 2.
ENTRY_POINTS = [
    ["bash", "scripts/setup_verl.sh"],
    ["bash", "scripts/test.sh"],
    ["bash", "scripts/smoke.sh"],
    ["bash", "recipes/run_qwen3_4b_dapo_npu.sh"],
    ["bash", "docker/build.sh", "--hw", "a2"],
    ["bash", "docker/run_npu.sh", "--hw", "a2"],
    [".venv/bin/retool-doctor", "--only", "versions"],
    [".venv/bin/retool-bundle", "create", "--out", "/nonexistent/bundle"],
]


@pytest.mark.parametrize("argv", ENTRY_POINTS, ids=lambda a: " ".join(a[:2]))
def test_every_entry_point_takes_the_stack_option(argv: list[str]) -> None:
    env = {k: v for k, v in kit_env().items() if k != "KIT_STACK"}
    helped = subprocess.run([*argv, "--help"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert helped.returncode == 0, helped.stderr
    assert "--stack" in helped.stdout, f"{argv}: --help does not name --stack"
    bad_argv = [*argv, "--stack", "0.8", *(["--dry-run"] if argv[0] == "bash" else [])]
    bad = subprocess.run(bad_argv, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert bad.returncode == EXIT_USAGE, f"{argv}: exit {bad.returncode}\n{bad.stdout}\n{bad.stderr}"
    lines = [line for line in bad.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "unknown stack '0.8'" in lines[0], bad.stderr


def _cfg(top: str | None, nested: str | None) -> object:
    return OmegaConf.create(
        {"custom_reward_function": {"path": top, "name": None}, "reward": {"custom_reward_function": {"path": nested}}}
    )


def test_the_reward_must_be_where_the_stack_reads_it() -> None:
    """verl 0.9.1 ignores the top-level key (its trainer/ppo/reward.py:70), verl 0.6.1 the nested one: either way a
    reward the trainer would not read is a problem, and so is no reward where it reads."""
    current, reference = stacks.get(CURRENT), stacks.get("0.6.1")
    assert reward_key.reward_key_problems(_cfg(None, "/kit/reward.py"), current) == []
    assert reward_key.reward_key_problems(_cfg("/kit/reward.py", None), reference) == []
    old_key = reward_key.reward_key_problems(_cfg("/kit/reward.py", None), current)
    assert len(old_key) == 2 and "never reads custom_reward_function" in old_key[0]
    assert "default reward" in old_key[1]
    assert reward_key.reward_key_problems(_cfg(None, "/kit/reward.py"), reference)
    assert reward_key.user_override_problems(["custom_reward_function.path=/x"], current)
    assert reward_key.user_override_problems(["+reward.custom_reward_function.path=/x"], reference)
    assert not reward_key.user_override_problems(["reward.custom_reward_function.path=/x"], current)


def test_a_reward_override_the_reference_verl_ignores_is_refused_before_any_work() -> None:
    proc = subprocess.run(
        [
            "bash",
            "recipes/run_qwen3_4b_dapo_npu.sh",
            "--hw",
            "a2",
            "--dry-run",
            "--no-path-check",
            "+reward.custom_reward_function.path=/x/reward.py",
        ],
        cwd=REPO_ROOT,
        env=kit_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == EXIT_USAGE, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "ignores reward.custom_reward_function" in lines[0], proc.stderr
    assert "nothing was started" not in proc.stdout and "recipe:" not in proc.stdout  # refused before the plan


@pytest.mark.parametrize("recipe", ["qwen3_4b_dapo", "qwen2.5_7b_dapo", "qwen2.5_32b_dapo"])
def test_the_stack_group_places_the_recipes_reward(recipe: str) -> None:
    """The recipe's reward spec is written once (recipes/config/reward_spec/<recipe>.yaml) and the stack config group
    puts it at that stack's key (composed here on this venv's verl 0.6.1 base: the placement is the kit's)."""
    from recipes.launch import catalog, compose

    ref = compose.compose(catalog.get(recipe), [])
    cur = compose.compose(catalog.get(recipe), [f"stack={CURRENT}"])
    spec = OmegaConf.to_container(ref.custom_reward_function)
    assert spec["name"] == "compute_score" and spec["reward_kwargs"]
    assert OmegaConf.to_container(cur.reward.custom_reward_function) == spec
    assert OmegaConf.select(cur, "custom_reward_function.path") is None
    assert OmegaConf.select(ref, "reward.custom_reward_function") is None


def test_each_stack_builds_its_own_images() -> None:
    """docker/build.sh --stack: the stack's bases and pins as build args, KIT_STACK into the image (its doctor and
    setup_verl.sh read it), and tags that never collide with the other stack's."""
    from platforms import images

    tags = {}
    for stack in ("0.6.1", CURRENT):
        argv = ["--hw", "cpu", "--stack", stack]
        stacks.select_from_argv(argv)
        tags[stack] = {p.name: p.image.kit_tag for p in images.image_profiles() if p.image}
        cmd = images.build_command(images.PROFILES["a2"])
        assert f"KIT_STACK={stack}" in cmd
        assert f"VERL_VERSION={pins.get('VERL_VERSION')}" in cmd
    os.environ.pop("KIT_STACK", None)
    assert "VLLM_ASCEND_TAG=v0.23.0" in " ".join(
        images.build_command(images.PROFILES["a2"]) if stacks.select(CURRENT) else []
    )
    os.environ.pop("KIT_STACK", None)
    assert not set(tags["0.6.1"].values()) & set(tags[CURRENT].values()), tags
