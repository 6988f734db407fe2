"""Issue 43: a stack is one notion in one place. pins.env holds both stacks (the reference's keys plain, the current
stack's as V091_ overrides); Python (platforms.stacks, platforms.pins) reads them and the shell (scripts/lib/stack.sh)
evaluates Python's view, every entry point takes --stack and refuses an unknown one in one line, and the reward goes
where the stack's verl reads it."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from kit_testing import REPO_ROOT, kit_env
from omegaconf import OmegaConf

from platforms import pins, stacks
from platforms.cli_errors import EXIT_USAGE, UsageError
from recipes.launch.planning import reward_key

CURRENT = "0.9.1"


def test_the_current_stack_overrides_only_keys_the_reference_has() -> None:
    """A V091_ key that names no plain key would be a typo nobody reads: every override replaces a reference pin."""
    raw = pins.load()
    prefix = stacks.get(CURRENT).pins_prefix
    overrides = {k.removeprefix(prefix) for k in raw if k.startswith(prefix)}
    assert overrides, "pins.env has no V091_ keys"
    reference = stacks.REFERENCE.pins
    assert overrides <= set(reference), f"V091_ keys without a reference key: {sorted(overrides - set(reference))}"
    current = stacks.get(CURRENT).pins
    assert set(current) == set(reference)
    assert current["VERL_VERSION"] == "0.9.1" and reference["VERL_VERSION"] == "0.6.1"
    assert current["VLLM_VERSION"] == "0.23.0" and current["CANN_VERSION"] == "9.1.0"
    assert stacks.get(CURRENT).python_requirements()["transformers"] == "5.9.0"
    assert int(stacks.get(CURRENT).python_requirements()["numpy"].split(".")[0]) >= 2  # verl 0.9.1 requires numpy>=2


def test_every_stack_object_owns_its_pins_and_nothing_else_does() -> None:
    """Adding a stack is adding one object and its pins: every V<digits>_ prefix in pins.env is one stack object's,
    every object's prefix has keys (the reference's is the plain keys), the default names an object, and a pin no
    stack overrides reads the same from pins.common as from every stack."""
    import re

    prefixes = {m.group(0) for k in pins.load() if (m := re.match(r"V\d+_", k))}
    assert prefixes == {s.pins_prefix for s in stacks.STACKS.values() if s.pins_prefix}
    assert stacks.default_name() in stacks.STACKS
    assert len({s.venv_name for s in stacks.STACKS.values()}) == len(stacks.STACKS)  # no two share a venv
    assert len({s.image_tag_suffix for s in stacks.STACKS.values()}) == len(stacks.STACKS)  # nor an image tag
    assert {s.pin("SMOLLM2_WHEEL_SHA256") for s in stacks.STACKS.values()} == {pins.common("SMOLLM2_WHEEL_SHA256")}
    with pytest.raises(KeyError, match="differs between stacks"):
        pins.common("VERL_VERSION")


def _shell_stack(args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """What scripts/lib/stack.sh's kit_use_stack sets for an entry point given ``args``: ``KEY=value`` lines of
    every key the Python resolver's view names (the view of the stack it chose)."""
    keys = " ".join(stacks.REFERENCE.shell_view())
    script = (
        f"set -euo pipefail; KIT_ROOT={shlex.quote(str(REPO_ROOT))}; source scripts/lib/stack.sh; "
        f'kit_use_stack "$(kit_stack_option {args})" || exit 2; for k in {keys}; do printf "%s=%s\\n" "$k" "${{!k}}"; '
        "done"
    )
    return subprocess.run(["bash", "-c", script], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60)


def _bare_env(**extra: str) -> dict[str, str]:
    """This environment without a chosen stack or interpreter: what a user's fresh shell has."""
    env = {k: v for k, v in kit_env().items() if k not in ("KIT_STACK", "KIT_PYTHON", "VIRTUAL_ENV")}
    return {**env, **extra}


@pytest.mark.parametrize("stack", ["0.6.1", CURRENT])
def test_the_shell_takes_its_stack_from_the_python_resolver(stack: str) -> None:
    """Issue 49: the shell keeps no reader of pins.env of its own; kit_use_stack evaluates ``python -m platforms
    stack``, so its pins, folders and tests are the stack object's, key by key (nothing to keep equal by hand)."""
    proc = _shell_stack(f"--stack {stack}", _bare_env())
    assert proc.returncode == 0, proc.stderr
    assert dict(line.split("=", 1) for line in proc.stdout.splitlines()) == stacks.get(stack).shell_view()
    text = (REPO_ROOT / "scripts" / "lib" / "stack.sh").read_text()
    assert "-m platforms stack" in text and 'source "$KIT_ROOT/pins.env"' not in text


def _fake_venv(root: Path, verl: str) -> Path:
    """A venv whose python is this one with package metadata saying verl ``verl``: the resolver reads metadata."""
    site = root / "site"
    (site / f"verl-{verl}.dist-info").mkdir(parents=True)
    (site / f"verl-{verl}.dist-info" / "METADATA").write_text(f"Metadata-Version: 2.1\nName: verl\nVersion: {verl}\n")
    (root / "bin").mkdir()
    python = root / "bin" / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH="{site}:$PYTHONPATH" exec {shlex.quote(sys.executable)} "$@"\n')
    python.chmod(0o755)
    return root


def test_the_shell_serves_the_active_venvs_stack_by_the_documented_order(tmp_path: Path) -> None:
    """With another stack's venv activated, a shell entry point serves that stack (it used to fall back to the
    default and refuse the venv): the flag, else KIT_STACK, else the interpreter's verl, else the default."""
    venv = str(_fake_venv(tmp_path / "venv", CURRENT))

    def chosen(args: str, **env: str) -> str:
        proc = _shell_stack(args, _bare_env(**env))
        assert proc.returncode == 0, proc.stderr
        return dict(line.split("=", 1) for line in proc.stdout.splitlines())["KIT_STACK"]

    assert chosen("", VIRTUAL_ENV=venv) == CURRENT
    assert chosen("", KIT_PYTHON=f"{venv}/bin/python") == CURRENT
    assert chosen("", VIRTUAL_ENV=venv, KIT_STACK="0.6.1") == "0.6.1"
    assert chosen("--stack 0.6.1", VIRTUAL_ENV=venv, KIT_STACK=CURRENT) == "0.6.1"
    assert chosen("", KIT_PYTHON="python3") == stacks.default_name()  # the system python3: no verl, stdlib only


# Every shell entry point reads the stack: a bad KIT_STACK is one line naming the variable, exit 2, before anything.
SHELL_ENTRY_POINTS = [
    ["scripts/setup_verl.sh", "--help"],
    ["scripts/test.sh", "--help"],
    ["scripts/smoke.sh", "--help"],
    ["scripts/bench_learn.sh", "--help"],
    ["scripts/sft_to_rl.sh", "--help"],
    ["scripts/rl_to_hf.sh", "--help"],
    ["scripts/eval_model.sh", "--help"],
    ["scripts/ray_cluster.sh", "--help"],
    ["recipes/run_qwen3_4b_dapo_npu.sh", "--hw", "a3", "--dry-run"],
    ["docker/build.sh", "--hw", "a3", "--dry-run"],
]


@pytest.mark.parametrize("argv", SHELL_ENTRY_POINTS, ids=lambda a: a[0])
def test_a_bad_kit_stack_is_one_line_from_every_shell_entry_point(argv: list[str]) -> None:
    proc = subprocess.run(
        ["bash", *argv], cwd=REPO_ROOT, env=_bare_env(KIT_STACK="0.8"), capture_output=True, text=True, timeout=60
    )
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == EXIT_USAGE, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert len(lines) == 1 and "unknown stack '0.8' (KIT_STACK)" in lines[0], proc.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ["scripts/sft_to_rl.sh", "--dry-run"],
        ["scripts/rl_to_hf.sh", "--dry-run"],
        ["scripts/eval_model.sh", "--dry-run"],
        ["scripts/ray_cluster.sh", "status", "--dry-run"],
        ["recipes/run_qwen3_4b_dapo_npu.sh", "--dry-run", "--no-path-check"],
    ],
    ids=lambda a: a[0],
)
def test_another_stacks_interpreter_is_refused_in_one_line(argv: list[str]) -> None:
    """``--stack`` names a stack whose verl this interpreter lacks: one line naming both versions and the stack's
    venv, exit 2, before the command runs another stack's verl (the hand-offs used to run .venv's under 0.9.1)."""
    installed = pins.installed_verl()
    other = next(s for s in stacks.STACKS.values() if s.pin("VERL_VERSION") != installed)
    env = _bare_env(KIT_PYTHON=sys.executable)
    proc = subprocess.run(
        ["bash", *argv, "--stack", other.name], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == EXIT_USAGE, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    want = f"stack {other.name} needs verl {other.pin('VERL_VERSION')}, but this Python ({sys.executable}) has verl"
    assert len(lines) == 1 and want in lines[0] and other.venv_name in lines[0], proc.stderr


def test_the_reference_series_stays_where_git_am_finds_it() -> None:
    """`git am patches/*.patch` keeps meaning the reference series; the current stack's lives beside it."""
    assert stacks.get("0.6.1").patch_dir == REPO_ROOT / "patches"
    assert stacks.get(CURRENT).patch_dir == REPO_ROOT / "patches" / CURRENT
    assert stacks.get("0.6.1").venv.name == ".venv" and stacks.get(CURRENT).venv.name == ".venv-0.9.1"


def test_an_unknown_stack_is_a_usage_error_naming_where_it_came_from() -> None:
    with pytest.raises(UsageError, match="unknown stack '0.8' \\(--stack\\)"):
        stacks.resolve("0.8", {})
    with pytest.raises(UsageError, match="unknown stack '0.8' \\(KIT_STACK\\)"):
        stacks.resolve(None, {"KIT_STACK": "0.8"})


def test_the_stack_is_resolved_by_the_documented_order_without_touching_the_environment() -> None:
    """--stack, else KIT_STACK, else this interpreter's verl (0.6.1 in this venv), else the default; resolving reads
    only the mapping it is given, and both stacks' objects live side by side in one process."""
    before = dict(os.environ)
    assert stacks.resolve(CURRENT, {"KIT_STACK": "0.6.1"}).name == CURRENT
    assert stacks.resolve(None, {"KIT_STACK": CURRENT}).name == CURRENT
    assert stacks.resolve(None, {}).name == (stacks.installed_name() or stacks.default_name())
    assert stacks.flag_in(["--hw", "a3", "--stack", "0.6.1", "--stack=0.9.1"]) == CURRENT  # the last, as argparse
    assert stacks.get(CURRENT).verl.reward_key == "reward.custom_reward_function"
    assert stacks.get("0.6.1").verl.reward_key == "custom_reward_function"
    assert dict(os.environ) == before


# Every entry point where the stack matters: --stack in its help, and an unknown one refused in one line, exit 2.
ENTRY_POINTS = [
    ["bash", "scripts/setup_verl.sh"],
    ["bash", "scripts/test.sh"],
    ["bash", "scripts/smoke.sh"],
    ["bash", "recipes/run_qwen3_4b_dapo_npu.sh"],
    ["bash", "scripts/sft_to_rl.sh"],
    ["bash", "scripts/rl_to_hf.sh"],
    ["bash", "scripts/eval_model.sh"],
    ["bash", "scripts/ray_cluster.sh"],
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
    """The recipe's reward spec is written once (recipes/config/reward_spec/<recipe>.yaml) and the stack's overrides
    put it at that stack's key (composed here on this venv's verl 0.6.1 base: the placement is the kit's)."""
    from recipes.launch.planning import compose
    from recipes.launch.run_inputs import catalog

    ref = compose.compose(catalog.get(recipe), [])
    cur = compose.compose(catalog.get(recipe), compose.stack_overrides(catalog.get(recipe), stacks.get(CURRENT)))
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
    for stack in stacks.STACKS.values():
        tags[stack.name] = {p.name: p.image.kit_tag(stack) for p in images.image_profiles() if p.image}
        cmd = images.build_command(images.PROFILES["a2"], stack)
        assert f"KIT_STACK={stack.name}" in cmd
        assert f"VERL_VERSION={stack.pin('VERL_VERSION')}" in cmd
    assert "VLLM_ASCEND_TAG=v0.23.0" in " ".join(images.build_command(images.PROFILES["a2"], stacks.get(CURRENT)))
    assert not set(tags["0.6.1"].values()) & set(tags[CURRENT].values()), tags
