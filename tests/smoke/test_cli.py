"""The smoke's command line: scripts/smoke.sh parses nothing, Python checks the options (and answers --help) before
the venv is built, and says which interpreter runs the smoke on which platform."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kit_testing import REPO_ROOT, kit_env

from platforms import PROFILES
from platforms.cli_errors import UsageError
from platforms.stacks import REFERENCE
from recipes.smoke import cli
from recipes.smoke.commands import check_rl_overrides, check_sft_overrides

STUBS = REPO_ROOT / "tests" / "kernels" / "stubs"


def _smoke(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(REPO_ROOT / "scripts" / "smoke.sh"), *args],
        capture_output=True,
        text=True,
        env=kit_env(**env),
        cwd=REPO_ROOT,
        timeout=60,
    )


def _check_args(*args: str, python: str = sys.executable, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [python, "-m", "recipes.smoke", "check-args", *args],
        capture_output=True,
        text=True,
        env=kit_env(**env),
        cwd=REPO_ROOT,
        timeout=120,
    )


def test_smoke_help_and_bad_arguments_stop_before_the_venv() -> None:
    proc = _smoke("--help")
    assert proc.returncode == 0, proc.stderr
    assert "--fast" in proc.stdout and "summary.json" in proc.stdout and "--device" in proc.stdout
    assert "stage 0" not in proc.stdout  # nothing was built
    for args, message in [
        (["--bogus"], "unrecognized arguments: --bogus"),
        (["--out"], "argument --out: expected one argument"),
        (["--device"], "expected one argument"),
        (["--platform", "tpu"], "invalid choice: 'tpu'"),
    ]:
        t0 = time.monotonic()
        proc = _smoke(*args)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert message in proc.stderr, (args, proc.stderr)
        assert "stage 0" not in proc.stdout and "Traceback" not in proc.stderr
        assert time.monotonic() - t0 < 30


def test_smoke_refuses_a_non_empty_out_before_the_venv(tmp_path: Path) -> None:
    (tmp_path / "old.txt").write_text("keep me")
    proc = _smoke("--out", str(tmp_path), "--fast")
    assert proc.returncode == 2 and "is not empty" in proc.stderr and "--force" in proc.stderr, proc.stderr
    assert "stage 0" not in proc.stdout
    assert (tmp_path / "old.txt").read_text() == "keep me"


def test_check_args_imports_only_the_standard_library() -> None:
    """scripts/smoke.sh runs it with any python3, before the venv exists: the standard library and the kit's own
    standard-library-only modules (the recipes package and the platform package with its error boundary)."""
    code = (
        "import sys; before = set(sys.modules); import recipes.smoke.cli; "
        "new = {m.split('.')[0] for m in set(sys.modules) - before}; "
        "print(sorted(new - set(sys.stdlib_module_names) - {'recipes', 'platforms'}))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=kit_env(), timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stdout + proc.stderr


def test_check_args_runs_the_cpu_smoke_in_the_venv() -> None:
    for args in (["--platform", "cpu"], ["--device", "cpu"], ["--fast"]):
        proc = _check_args(*args, KIT_DEVICE="cpu")
        assert proc.returncode == 0 and proc.stdout.strip() == cli.VENV, (args, proc.stdout, proc.stderr)


def test_check_args_in_the_cpu_image_runs_the_images_python() -> None:
    """docker/Dockerfile.cpu sets KIT_IMAGE=cpu: its Python carries the CPU stack, so no .venv is built inside."""
    proc = _check_args("--fast", KIT_DEVICE="cpu", KIT_IMAGE="cpu")
    assert proc.returncode == 0 and proc.stdout.strip() == sys.executable, proc.stdout + proc.stderr
    proc = _check_args("--fast", KIT_DEVICE="cpu", KIT_IMAGE="a3")  # another profile's image: the CPU stack is not it
    assert proc.returncode == 0 and proc.stdout.strip() == cli.VENV, proc.stdout + proc.stderr


def test_check_args_writes_the_answer_to_the_given_fd() -> None:
    code = (
        "import os, subprocess, sys; r, w = os.pipe(); "
        "p = subprocess.run([sys.executable, '-m', 'recipes.smoke', 'check-args', '--runner-fd', str(w), "
        "'--platform', 'cpu'], pass_fds=(w,), capture_output=True, text=True); os.close(w); "
        "print(repr(p.stdout), os.read(r, 100).decode().strip(), p.returncode)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=kit_env(), timeout=60)
    assert proc.stdout.split() == ["''", cli.VENV, "0"], proc.stdout + proc.stderr


def test_check_args_on_an_npu_host_runs_this_interpreter() -> None:
    """KIT_DEVICE=npu with the stub torch_npu stands for an NPU image: no venv, this interpreter runs the smoke."""
    proc = _check_args(KIT_DEVICE="npu", PYTHONPATH=f"{STUBS}{os.pathsep}{REPO_ROOT}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == sys.executable


def test_check_args_refuses_an_accelerator_this_interpreter_lacks() -> None:
    proc = _check_args("--platform", "cuda")  # the venv's torch is the CPU build
    assert proc.returncode == 2
    assert proc.stderr.startswith("smoke: error: platform cuda is not available to") and "KIT_PYTHON" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and proc.stdout == ""
    proc = _check_args(KIT_DEVICE="gpu")
    assert proc.returncode == 2 and "KIT_DEVICE='gpu' is not a platform" in proc.stderr


@pytest.mark.parametrize("platform", ["npu", "cuda"])
def test_accelerator_target_does_not_need_the_venv(monkeypatch: pytest.MonkeyPatch, platform: str) -> None:
    monkeypatch.delenv("KIT_HW", raising=False)
    target = cli.resolve_target(platform)
    assert target.platform.name == platform and target.profile.platform is target.platform
    assert not target.needs_venv
    assert cli.resolve_target("cpu").needs_venv


def test_kit_hw_of_another_platform_does_not_leak_into_the_smoke(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KIT_HW", "a3")
    assert cli.resolve_target("cpu").profile.name == "cpu"
    monkeypatch.setenv("KIT_HW", "cuda")
    target = cli.resolve_target("cuda")
    assert target.profile.name == "cuda"


def _dry_run(out: Path, *words: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "recipes.smoke", "run", "--dry-run", "--out", str(out), *words],
        capture_output=True,
        text=True,
        env=kit_env(),
        cwd=REPO_ROOT,
        timeout=120,
    )


def test_the_main_job_is_the_learning_check(tmp_path: Path) -> None:
    """No flag: SmolLM2 on the product task, judged; --fast and --tiny: the random tiny model's pipeline check."""
    default = _dry_run(tmp_path / "a", "--platform", "cpu")
    assert default.returncode == 0, default.stderr
    assert "SmolLM2-135M-Instruct" in default.stdout and "learn_val.parquet" in default.stdout
    assert default.stdout.replace(str(tmp_path / "a"), "") == _dry_run(
        tmp_path / "a", "--platform", "cpu", "--learn"
    ).stdout.replace(str(tmp_path / "a"), "")
    for flag in ("--fast", "--tiny"):
        proc = _dry_run(tmp_path / "b", "--platform", "cpu", flag)
        assert proc.returncode == 0 and "tiny Qwen3" in proc.stdout and "learn_" not in proc.stdout, proc.stderr


@pytest.mark.parametrize(
    ("words", "message"),
    [
        (["--learn", "--fast"], "--learn and --fast exclude each other"),
        (["--fast", "--tiny"], "--fast and --tiny exclude each other"),
        (["--fast", "--model", "."], "--model is the learning check's model"),
        (["--model", "/nonexistent"], "--model /nonexistent: no such folder"),  # issue 52: as the parser reads it
        (["--model", str(REPO_ROOT / "recipes")], "no config.json there"),
    ],
)
def test_run_modes_refuse_contradictions(tmp_path: Path, words: list[str], message: str) -> None:
    proc = _dry_run(tmp_path / "run", "--platform", "cpu", *words)
    assert proc.returncode == 2 and message in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr


@pytest.mark.parametrize("platform", ["npu", "cuda"])
def test_dry_run_in_a_python_without_the_kit_says_where_to_run_it(tmp_path: Path, platform: str) -> None:
    """Issue 33: on a host's bare python3 (no omegaconf) the NPU or GPU dry run, which runs in that interpreter, ended
    in ModuleNotFoundError: one line now, exit 2, naming the kit's image and KIT_PYTHON."""
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True, timeout=60)
    python = bare / "bin" / "python"
    proc = _smoke("--dry-run", "--platform", platform, "--out", str(tmp_path / "out"), KIT_PYTHON=str(python))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stdout + proc.stderr
    assert lines[0].startswith(f"smoke: error: {python} lacks omegaconf"), lines
    assert "kit's image" in lines[0] and "KIT_PYTHON" in lines[0] and ".venv" in lines[0]


def test_rl_override_without_a_key_stops_before_the_venv() -> None:
    """Issue 33: ``--rl-override notakv`` was taken, and the RL stage failed on it after SFT."""
    proc = _check_args("--fast", "--rl-override", "notakv", KIT_DEVICE="cpu")
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout + proc.stderr
    assert "argument --rl-override: 'notakv' is not a Hydra override KEY=VALUE" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "trainer.totl_epochs=3",
            "--rl-override trainer.totl_epochs=3: the RL config (qwen3_4b_dapo) has no key trainer.totl_epochs",
        ),
        ("~trainer.no_such_key=", "has no key trainer.no_such_key"),
        ("trainer.total_epochs=[1,", "--rl-override trainer.total_epochs=[1,: no viable alternative"),
        ("profile=a3", "not a profile= override"),
    ],
)
def test_rl_override_the_rl_config_lacks_is_refused(override: str, message: str) -> None:
    """Issue 33: a misspelt key is refused before the first stage (Hydra's struct rule on the composed RL config)."""
    with pytest.raises(UsageError, match=re.escape(message)):
        check_rl_overrides(PROFILES["cpu"], REFERENCE, [override])


def test_rl_overrides_hydra_takes_pass() -> None:
    """New keys with + or ++, a config group's choice, and a plain key of the config."""
    words = [
        "+trainer.new_key=3",
        "++trainer.other=1",
        "trainer.total_epochs=2",
        "actor@actor_rollout_ref.actor=dp_actor",
    ]
    check_rl_overrides(PROFILES["cpu"], REFERENCE, words)


def test_sft_overrides_are_checked_against_the_sft_config_and_reach_its_command(tmp_path: Path) -> None:
    """--sft-override (issue 42: the speed bench's baseline trains with sdpa): the SFT config's keys, not the RL's."""
    check_sft_overrides(PROFILES["cpu"], REFERENCE, ["model.attn_implementation=sdpa", "+trainer.new_key=1"])
    with pytest.raises(UsageError, match=re.escape("--sft-override actor_rollout_ref.rollout.n=2: the SFT config")):
        check_sft_overrides(PROFILES["cpu"], REFERENCE, ["actor_rollout_ref.rollout.n=2"])
    proc = _dry_run(tmp_path / "run", "--platform", "cpu", "--fast", "--sft-override", "model.attn_implementation=sdpa")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    sft = next(line for line in proc.stdout.splitlines() if "run_qwen3_4b_sft_npu.sh" in line)
    assert sft.rstrip().endswith("model.attn_implementation=sdpa"), sft  # last: the user's wins


def test_misspelt_rl_override_fails_the_dry_run(tmp_path: Path) -> None:
    proc = _dry_run(tmp_path / "run", "--platform", "cpu", "--fast", "--rl-override", "trainer.totl_epochs=3")
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout + proc.stderr
    assert proc.stderr.startswith("smoke: error: --rl-override trainer.totl_epochs=3: the RL config")
    assert proc.stderr.count("\n") == 1 and "+trainer.totl_epochs=3" in proc.stderr


@pytest.mark.parametrize("platform", ["cuda", "npu"])
def test_learning_check_on_a_device_with_the_users_model(tmp_path: Path, platform: str) -> None:
    """The Atlas owner's "does my stack learn": --platform npu|cuda --model DIR, dry-run here."""
    model = tmp_path / "qwen3"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "qwen3"}')
    proc = _dry_run(tmp_path / "run", "--platform", platform, "--model", str(model))
    assert proc.returncode == 0, proc.stderr
    assert f"yours, used as it is: {model}" in proc.stdout and f"MODEL_PATH={model}" in proc.stdout
    hw = "a2" if platform == "npu" else "cuda"
    assert f"run_qwen3_4b_dapo_npu.sh --hw {hw} --scale smoke" in proc.stdout
    assert "learn_train.parquet" in proc.stdout


def test_dry_run_prints_commands_and_starts_nothing(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "recipes.smoke", "run", "--dry-run", "--platform", "cpu", "--out", str(out), "--tiny"],
        capture_output=True,
        text=True,
        env=kit_env(),
        cwd=REPO_ROOT,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert not out.exists(), "a dry run must not create the artifacts folder"
    text = proc.stdout
    assert "platform cpu, hardware profile cpu, scale smoke" in text
    stages = [line.removeprefix("== ") for line in text.splitlines() if line.startswith("== ")]
    assert stages == ["data"] * 4 + ["sft", "merge", "sandbox", "rl", "eval", "plots"]
    assert "run_qwen3_4b_sft_npu.sh --hw cpu --scale smoke" in text
    assert "run_qwen3_4b_dapo_npu.sh --hw cpu --scale smoke" in text


def test_tool_call_rate_help() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "recipes.smoke", "tool-call-rate", "--help"],
        capture_output=True,
        text=True,
        env=kit_env(),
        timeout=60,
    )
    assert proc.returncode == 0 and "--samples" in proc.stdout
    # the old entry point is an alias
    proc = subprocess.run(
        [sys.executable, "-m", "recipes.smoke.pipeline", "run", "--help"],
        capture_output=True,
        text=True,
        env=kit_env(),
        timeout=60,
    )
    assert proc.returncode == 0 and "--platform" in proc.stdout


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, at any level (function-level imports count as much as top-level ones)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
    return found


def test_the_stages_never_import_the_command_line() -> None:
    """Imports run downward (issue 22): cli imports the stages, so no other smoke module may import cli back, not
    even the ``python -m recipes.smoke.pipeline`` alias above (it runs the package's entry point by name)."""
    smoke = REPO_ROOT / "recipes" / "smoke"
    upward = {
        path.name: sorted(m for m in _imports(path) if m == "recipes.smoke.cli")
        for path in sorted(smoke.glob("*.py"))
        if path.name not in ("cli.py", "__main__.py")
    }
    assert not {name: found for name, found in upward.items() if found}
