"""docker/run_npu.sh and run_cuda.sh --dry-run against fake /dev trees, docker/entrypoint.sh's environment, and
--help on every script under docker/."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from kit_testing import REPO_ROOT, kit_env

from platforms import PROFILES, stacks
from recipes.launch.cluster.containers import DATA_ROOTS
from recipes.launch.run_inputs import inputs
from recipes.launch.run_inputs.catalog import RECIPES
from recipes.retool import folders

DOCKER = REPO_ROOT / "docker"
#: The stack the scripts serve here, resolved as their Python does (KIT_STACK, else this venv's verl): its image tags.
STACK = stacks.resolve()
CONTROL = ("davinci_manager", "devmm_svm", "hisi_hdc")


def _fake_dev(root: Path, count: int, control: bool = True) -> Path:
    dev = root / "dev"
    dev.mkdir(parents=True)
    for i in range(count):
        (dev / f"davinci{i}").touch()
    # Look-alikes a sloppy glob would take: only davinciN counts.
    for name in ("davinci", "davinci1x", "davinci_extra"):
        (dev / name).touch()
    if control:
        for name in CONTROL:
            (dev / name).touch()
    return dev


#: What the run scripts read from the environment besides their options; tests start without any of it.
SCRIPT_VARS = ("KIT_HW", "KIT_DEVICE", "HF_HOME", *DATA_ROOTS)


def _run(
    script: str, *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in SCRIPT_VARS}
    return subprocess.run(
        ["bash", str(DOCKER / script), *args],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=cwd or REPO_ROOT,
        env={**base, **(env or {})},
    )


def _devices(words: list[str]) -> list[str]:
    return [w.split("=", 1)[1] for w in words if w.startswith("--device=")]


@pytest.mark.parametrize(("count", "hw"), [(8, "a2"), (16, "a3")])
def test_run_npu_passes_every_davinci_node(tmp_path: Path, count: int, hw: str) -> None:
    dev = _fake_dev(tmp_path, count)
    proc = _run("run_npu.sh", "--dry-run", "--dev-root", str(dev), "--workspace", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    words = shlex.split(proc.stdout)
    assert words[:3] == ["docker", "run", "--rm"]
    expected = [f"{dev}/davinci{i}:/dev/davinci{i}" for i in range(count)]
    expected += [f"{dev}/{name}:/dev/{name}" for name in CONTROL]
    assert _devices(words) == expected, "every davinciN in numeric order (davinci10 after davinci9), then control"
    assert words[-1] == f"retool-npu-kit:{STACK.pin(f'VLLM_ASCEND_TAG_{hw.upper()}')}", "image follows the device count"
    for mount in (
        "/usr/local/Ascend/driver:/usr/local/Ascend/driver:ro",
        "/usr/local/dcmi:/usr/local/dcmi:ro",
        "/usr/local/bin/npu-smi:/usr/local/bin/npu-smi:ro",
        "/etc/ascend_install.info:/etc/ascend_install.info:ro",
        f"{tmp_path}:/workspace",
    ):
        assert words[words.index(mount) - 1] == "-v", mount
    assert {"--network=host", "--shm-size=100g", "KIT_PHASE=rl"} <= set(words)
    assert words[words.index("-w") + 1] == "/workspace"


def test_run_npu_options_and_command(tmp_path: Path) -> None:
    dev = _fake_dev(tmp_path, 8)
    proc = _run(
        "run_npu.sh",
        "--dry-run",
        "--dev-root",
        str(dev),
        "--hw",
        "a3",
        "--phase",
        "sft",
        "--name",
        "kit",
        "--privileged",
        "--shm-size",
        "200g",
        "--docker-arg=-e",
        "--docker-arg=HF_TOKEN",
        "--",
        "retool-doctor",
        "--hw",
        "a3",
    )
    assert proc.returncode == 0, proc.stderr
    assert "8 davinci devices, an A3 node has 16" in proc.stderr
    words = shlex.split(proc.stdout)
    assert len(_devices(words)) == 8 + len(CONTROL)
    image = f"retool-npu-kit:{STACK.pin('VLLM_ASCEND_TAG_A3')}"
    assert words[words.index(image) :] == [image, "retool-doctor", "--hw", "a3"]
    assert words[words.index(image) - 2 : words.index(image)] == ["-e", "HF_TOKEN"]
    assert {"--privileged", "--shm-size=200g", "KIT_PHASE=sft"} <= set(words)
    assert words[words.index("--name") + 1] == "kit"


@pytest.mark.parametrize(
    ("count", "control", "args", "message"),
    [(0, True, (), "davinciN device nodes"), (8, False, ("--dry-run",), "davinci_manager is missing")],
)
def test_run_npu_refuses_a_host_without_npus(
    tmp_path: Path, count: int, control: bool, args: tuple[str, ...], message: str
) -> None:
    dev = _fake_dev(tmp_path, count, control=control)
    proc = _run("run_npu.sh", *args, "--dev-root", str(dev))
    assert proc.returncode == 2
    assert message in proc.stderr and proc.stdout == ""
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("hw_args", "env", "expected"), [((), {}, "a3"), (("--hw", "a2"), {}, "a2"), ((), {"KIT_HW": "a2"}, "a2")]
)
def test_run_npu_dry_run_on_a_login_node(
    tmp_path: Path, hw_args: tuple[str, ...], env: dict[str, str], expected: str
) -> None:
    """No /dev/davinci* (a login node): --dry-run still prints the command, for the profile's node shape, with a note
    saying so (issue 14); --hw, else KIT_HW, else the reference profile."""
    dev = _fake_dev(tmp_path, 0, control=False)
    proc = _run("run_npu.sh", "--dry-run", "--dev-root", str(dev), *hw_args, env=env)
    assert proc.returncode == 0, proc.stderr
    words = shlex.split(proc.stdout)
    per_node = PROFILES[expected].devices_per_node
    expected_devices = [f"{dev}/davinci{i}:/dev/davinci{i}" for i in range(per_node)]
    assert _devices(words) == expected_devices + [f"{dev}/{name}:/dev/{name}" for name in CONTROL]
    assert words[-1] == PROFILES[expected].image.kit_tag(STACK)
    assert "NOTE: no " in proc.stderr and f"{per_node} devices" in proc.stderr


def test_kit_hw_of_another_platform_is_refused(tmp_path: Path) -> None:
    dev = _fake_dev(tmp_path, 8)
    proc = _run("run_npu.sh", "--dry-run", "--dev-root", str(dev), env={"KIT_HW": "cuda"})
    assert proc.returncode == 2 and proc.stdout == ""
    assert (
        "KIT_HW=cuda is a cuda profile; this script runs npu images" in proc.stderr and "Traceback" not in proc.stderr
    )


def test_run_cuda_dry_run(tmp_path: Path) -> None:
    proc = _run("run_cuda.sh", "--dry-run", "--workspace", str(tmp_path), "--", "python", "-V")
    assert proc.returncode == 0, proc.stderr
    words = shlex.split(proc.stdout)
    assert words[:3] == ["docker", "run", "--rm"]
    assert words[words.index("--gpus") + 1] == "all"
    assert {"--network=host", "--ipc=host", f"{tmp_path}:/workspace"} <= set(words)
    assert words[-3:] == [f"retool-npu-kit:cuda-{STACK.pin('VLLM_CUDA_TAG')}", "python", "-V"]


def _build_tag(hw: str) -> str:
    words = shlex.split(_run("build.sh", "--hw", hw, "--dry-run").stdout)
    return words[words.index("-t") + 1]


def test_default_images_are_the_build_tags(tmp_path: Path) -> None:
    """run_*.sh default to the tags build.sh gives, so `build.sh --hw X` then `run_*.sh` needs no --image."""
    for count, hw in ((8, "a2"), (16, "a3")):
        dev = _fake_dev(tmp_path / hw, count)
        words = shlex.split(_run("run_npu.sh", "--dry-run", "--dev-root", str(dev)).stdout)
        assert words[-1] == _build_tag(hw)
    assert shlex.split(_run("run_cuda.sh", "--dry-run").stdout)[-1] == _build_tag("cuda")


@pytest.mark.parametrize("script", sorted(p.name for p in DOCKER.glob("*.sh")))
def test_help(script: str) -> None:
    proc = _run(script, "--help")
    assert proc.returncode == 0, proc.stderr
    assert "Usage:" in proc.stdout


def test_entrypoint_sources_cann_atb_and_the_kit_preset(tmp_path: Path) -> None:
    ascend = tmp_path / "Ascend"
    (ascend / "ascend-toolkit").mkdir(parents=True)
    (ascend / "nnal" / "atb").mkdir(parents=True)
    # CANN's scripts expand unset variables: the entry point must tolerate that.
    (ascend / "ascend-toolkit" / "set_env.sh").write_text(
        "export ASCEND_HOME_PATH=/fake/toolkit\nexport LD_LIBRARY_PATH=/fake/toolkit/lib64:$UNSET_BY_DESIGN\n"
    )
    (ascend / "nnal" / "atb" / "set_env.sh").write_text("export ATB_HOME_PATH=/fake/atb\n")
    env_dir = tmp_path / "etc"
    env_dir.mkdir()
    for phase in ("sft", "rl"):
        out = subprocess.run(
            [sys.executable, "-m", "platforms", "env", "--phase", phase, "--hw", "a3"],
            env=kit_env(),
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        (env_dir / f"env-{phase}.sh").write_text(out)
    env = {k: v for k, v in os.environ.items() if k != "UNSET_BY_DESIGN"}
    env.update(KIT_ASCEND_ROOT=str(ascend), KIT_ENV_DIR=str(env_dir), PYTORCH_NPU_ALLOC_CONF="expandable_segments:True")
    show = 'echo "$ASCEND_HOME_PATH|$ATB_HOME_PATH|$VLLM_ASCEND_ENABLE_NZ|${PYTORCH_NPU_ALLOC_CONF-unset}"'
    rl = subprocess.run(
        ["bash", str(DOCKER / "entrypoint.sh"), "bash", "-c", show], env=env, capture_output=True, text=True
    )
    assert rl.returncode == 0, rl.stderr
    assert rl.stdout.strip() == "/fake/toolkit|/fake/atb|0|unset"
    sft = subprocess.run(
        ["bash", str(DOCKER / "entrypoint.sh"), "bash", "-c", show],
        env={**env, "KIT_PHASE": "sft"},
        capture_output=True,
        text=True,
    )
    assert sft.stdout.strip() == "/fake/toolkit|/fake/atb||expandable_segments:True"


# --- the recipes' data roots (issue 14: checkpoints written inside the container must land on the host) ----------


def _mounts(words: list[str]) -> list[str]:
    return [words[i + 1] for i, w in enumerate(words[:-1]) if w == "-v"]


def _env_args(words: list[str]) -> dict[str, str]:
    return dict(words[i + 1].split("=", 1) for i, w in enumerate(words[:-1]) if w == "-e" and "=" in words[i + 1])


def test_data_roots_are_the_launchers_own() -> None:
    """Names and defaults come from recipes/launch/run_inputs/inputs.py (one source), and the launcher documents each
    name."""
    assert DATA_ROOTS == {
        "MODELS_DIR": folders.DEFAULT_MODELS_DIR,
        "DATA_DIR": folders.DEFAULT_DATA_DIR,
        "CKPT_ROOT": folders.DEFAULT_CKPT_ROOT,
    }
    assert set(DATA_ROOTS) <= set(inputs.ENV_DOC)


@pytest.mark.parametrize("script", ["run_npu.sh", "run_cuda.sh"])
def test_run_scripts_mount_the_recipe_roots_at_the_same_path(tmp_path: Path, script: str) -> None:
    home = tmp_path / "home"
    home.mkdir()
    dev = _fake_dev(tmp_path, 16)
    env = {"HOME": str(home), "MODELS_DIR": "rel/models", "CKPT_ROOT": "~/ck"}  # DATA_DIR: the default
    extra = ["--dev-root", str(dev)] if script == "run_npu.sh" else []
    proc = _run(script, "--dry-run", *extra, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    words = shlex.split(proc.stdout)
    expected = {
        "MODELS_DIR": str(tmp_path / "rel" / "models"),  # relative to where the script runs, as the launcher does
        "DATA_DIR": str(home / "data" / "retool"),
        "CKPT_ROOT": str(inputs.ckpt_root({"HOME": str(home), "CKPT_ROOT": "~/ck"})),
    }
    assert expected["CKPT_ROOT"] == str(home / "ck")
    mounts, passed = _mounts(words), _env_args(words)
    for name, path in expected.items():
        assert f"{path}:{path}" in mounts, f"{name} mounted at the same path"
        assert passed[name] == path, f"{name} passed by name: the recipe inside reads the same path"
        assert f"NOTE: {name} {path} does not exist; a real run creates it" in proc.stderr
        assert not Path(path).exists(), "a dry run creates nothing"
    # the RL recipes' default model (the merged SFT checkpoint) lies under the mounted CKPT_ROOT
    rl_model = inputs.default_model_path(RECIPES["qwen3_4b_dapo"], "a3", {"HOME": str(home), "CKPT_ROOT": "~/ck"})
    assert rl_model.startswith(expected["CKPT_ROOT"] + "/")
    assert words.index(f"{tmp_path}:/workspace") < words.index(f"{expected['CKPT_ROOT']}:{expected['CKPT_ROOT']}")


def test_two_roots_on_one_folder_are_mounted_once(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    env = {"HOME": str(tmp_path), "MODELS_DIR": str(shared), "DATA_DIR": str(shared)}
    words = shlex.split(_run("run_cuda.sh", "--dry-run", env=env).stdout)
    assert _mounts(words).count(f"{shared}:{shared}") == 1, "docker refuses a duplicate mount point"
    assert _env_args(words)["MODELS_DIR"] == _env_args(words)["DATA_DIR"] == str(shared)


def _fake_docker(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """A `docker` on PATH that records its arguments, so the real (not --dry-run) path runs to its exec."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "docker-args"
    docker = bin_dir / "docker"
    docker.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {shlex.quote(str(record))}\n')
    docker.chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}, record


def test_a_real_run_creates_missing_roots_then_execs_docker(tmp_path: Path) -> None:
    env, record = _fake_docker(tmp_path)
    env |= {"HOME": str(tmp_path / "home"), "CKPT_ROOT": str(tmp_path / "deep" / "ckpt")}
    proc = _run("run_cuda.sh", "--", "python", "-V", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    args = record.read_text().splitlines()
    assert args[:2] == ["run", "--rm"] and args[-3:] == [
        f"retool-npu-kit:cuda-{STACK.pin('VLLM_CUDA_TAG')}",
        "python",
        "-V",
    ]
    for name, path in _env_args(args).items():
        if name in DATA_ROOTS:
            assert Path(path).is_dir(), f"{name} {path} created before docker run"
            assert f"NOTE: created {name} {path}" in proc.stderr
    assert (tmp_path / "deep" / "ckpt").is_dir()


@pytest.mark.parametrize(("make", "message"), [("file", "is not a folder"), ("under-file", "cannot create CKPT_ROOT")])
def test_a_root_that_cannot_be_a_folder_is_refused(tmp_path: Path, make: str, message: str) -> None:
    env, record = _fake_docker(tmp_path)
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    env |= {"HOME": str(tmp_path), "CKPT_ROOT": str(blocker if make == "file" else blocker / "ckpt")}
    proc = _run("run_cuda.sh", env=env)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr
    assert not record.exists(), "docker never started"


def test_no_docker_is_one_line_and_creates_nothing(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"  # what the scripts need, and no docker (a host may well have one in /usr/bin)
    bin_dir.mkdir()
    for tool in ("bash", "dirname"):
        (bin_dir / tool).symlink_to(shutil.which(tool) or f"/usr/bin/{tool}")
    env = {"HOME": str(tmp_path / "home"), "PATH": str(bin_dir), "KIT_PYTHON": sys.executable}
    proc = _run("run_cuda.sh", env=env)
    assert proc.returncode == 2 and "docker not found" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "home").exists()


def test_command_words_and_docker_args_pass_through(tmp_path: Path) -> None:
    proc = _run(
        "run_cuda.sh",
        "--dry-run",
        "--docker-arg",
        "-e",
        "--docker-arg",
        "X=1",
        "--hw",
        "h200",
        "bash",
        "-c",
        "echo a b",
    )
    assert proc.returncode == 0, proc.stderr
    words = shlex.split(proc.stdout)
    assert words[-6:] == ["-e", "X=1", PROFILES["h200"].image.kit_tag(STACK), "bash", "-c", "echo a b"]


def _python_wrapper(tmp_path: Path, body: str) -> str:
    wrapper = tmp_path / "python-wrapper"
    wrapper.write_text(f"#!/bin/sh\n{body}\n")
    wrapper.chmod(0o755)
    return str(wrapper)


def test_the_scripts_need_only_the_standard_library(tmp_path: Path) -> None:
    """On the host only a system python3 is guaranteed: `python -S` (no site-packages) must do."""
    py = _python_wrapper(tmp_path, f'exec {shlex.quote(sys.executable)} -S "$@"')
    dev = _fake_dev(tmp_path, 8)
    for script, args in (("build.sh", ["--hw", "a3"]), ("run_npu.sh", ["--dev-root", str(dev)]), ("run_cuda.sh", [])):
        proc = _run(script, "--dry-run", *args, env={"KIT_PYTHON": py})
        assert proc.returncode == 0, f"{script}: {proc.stderr}"
        assert "docker" in proc.stdout


def test_an_old_or_missing_python_is_one_clear_line(tmp_path: Path) -> None:
    py = _python_wrapper(tmp_path, "exit 1")  # what `python3.8 -c 'sys.exit(version < (3, 9))'` answers
    for script in ("build.sh", "run_npu.sh"):
        proc = _run(script, "--help", env={"KIT_PYTHON": py})
        assert proc.returncode == 2 and "needs Python >= 3.9" in proc.stderr and "KIT_PYTHON" in proc.stderr


def test_help_names_the_mounted_roots() -> None:
    out = " ".join(_run("run_npu.sh", "--help").stdout.split())
    for name, default in DATA_ROOTS.items():
        assert f"{name} (default {default})" in out
    assert "KIT_ALLOW_EPHEMERAL_CKPT=1" in out


@pytest.mark.parametrize("script", ["run_cpu.sh", "run_cuda.sh"])
def test_the_sandbox_can_make_its_namespaces_unless_told_not_to(script: str) -> None:
    """Measured (docker 20.10): with docker's default seccomp profile and masked /proc, bubblewrap inside the
    container cannot create its namespaces and the sandbox falls back; the run scripts lift both by default."""
    from platforms.images import SANDBOX_NAMESPACE_ARGS

    words = shlex.split(_run(script, "--dry-run").stdout)
    joined = " ".join(words)
    assert " ".join(SANDBOX_NAMESPACE_ARGS) in joined, joined
    assert "systempaths=unconfined" in joined and "seccomp=unconfined" in joined
    plain = " ".join(shlex.split(_run(script, "--dry-run", "--no-bwrap").stdout))
    assert "seccomp=unconfined" not in plain and "systempaths" not in plain and plain.startswith("docker run")


def test_the_cpu_image_runs_with_a_large_shm_and_no_devices() -> None:
    proc = _run("run_cpu.sh", "--dry-run", "--", "bash", "scripts/smoke.sh", "--fast")
    assert proc.returncode == 0, proc.stderr
    words = shlex.split(proc.stdout)
    assert "--shm-size=8g" in words and not [w for w in words if w.startswith(("--device", "--gpus"))]
    assert words[-3:] == ["bash", "scripts/smoke.sh", "--fast"] and words[-4].startswith("retool-npu-kit:cpu-")


@pytest.mark.parametrize("script", ["run_npu.sh", "run_cuda.sh"])
def test_no_devices_starts_the_image_without_them_and_says_so(tmp_path: Path, script: str) -> None:
    """A host without NPUs or GPUs (scripts/test_images.sh runs every image here): --no-devices drops the device
    nodes, driver mounts and --gpus, with a printed note; without it a real run on such a host is refused."""
    dev = _fake_dev(tmp_path, 0, control=False)
    dev_args = ("--dev-root", str(dev)) if script == "run_npu.sh" else ()
    proc = _run(script, "--dry-run", "--no-devices", *dev_args, "--", "true")
    assert proc.returncode == 0, proc.stderr
    words = shlex.split(proc.stdout)
    assert not [w for w in words if w.startswith(("--device", "--gpus")) or "/usr/local/Ascend/driver" in w], words
    assert "NOTE: --no-devices: no " in proc.stderr and words[-1] == "true"
    if script == "run_npu.sh":
        refused = _run(script, *dev_args, "--", "true")
        assert refused.returncode == 2 and "davinciN device nodes" in refused.stderr
    assert "--no-devices" not in _run("run_cpu.sh", "--help").stdout  # nothing to drop there


@pytest.mark.parametrize("script", ["run_cpu.sh", "run_cuda.sh", "run_npu.sh"])
def test_the_container_has_an_init_that_reaps(tmp_path: Path, script: str) -> None:
    dev_args = ("--dev-root", str(_fake_dev(tmp_path, 8))) if script == "run_npu.sh" else ()
    words = shlex.split(_run(script, "--dry-run", *dev_args).stdout)
    assert words[:4] == ["docker", "run", "--rm", "--init"], words
