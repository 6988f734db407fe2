"""docker/run_npu.sh and run_cuda.sh --dry-run against fake /dev trees, docker/entrypoint.sh's environment, and
--help on every script under docker/."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from kit_testing import REPO_ROOT, kit_env

from npu_kernels import pins

DOCKER = REPO_ROOT / "docker"
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


def _run(script: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(DOCKER / script), *args], capture_output=True, text=True, timeout=30, cwd=cwd or REPO_ROOT
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
    assert words[-1] == f"retool-npu-kit:{pins.get(f'VLLM_ASCEND_TAG_{hw.upper()}')}", "image follows the device count"
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
    image = f"retool-npu-kit:{pins.get('VLLM_ASCEND_TAG_A3')}"
    assert words[words.index(image) :] == [image, "retool-doctor", "--hw", "a3"]
    assert words[words.index(image) - 2 : words.index(image)] == ["-e", "HF_TOKEN"]
    assert {"--privileged", "--shm-size=200g", "KIT_PHASE=sft"} <= set(words)
    assert words[words.index("--name") + 1] == "kit"


@pytest.mark.parametrize(
    ("count", "control", "message"),
    [(0, True, "davinciN device nodes"), (8, False, "davinci_manager is missing")],
)
def test_run_npu_refuses_a_host_without_npus(tmp_path: Path, count: int, control: bool, message: str) -> None:
    dev = _fake_dev(tmp_path, count, control=control)
    proc = _run("run_npu.sh", "--dry-run", "--dev-root", str(dev))
    assert proc.returncode == 2
    assert message in proc.stderr and proc.stdout == ""


def test_run_cuda_dry_run(tmp_path: Path) -> None:
    proc = _run("run_cuda.sh", "--dry-run", "--workspace", str(tmp_path), "--", "python", "-V")
    assert proc.returncode == 0, proc.stderr
    words = shlex.split(proc.stdout)
    assert words[:3] == ["docker", "run", "--rm"]
    assert words[words.index("--gpus") + 1] == "all"
    assert {"--network=host", "--ipc=host", f"{tmp_path}:/workspace"} <= set(words)
    assert words[-3:] == [f"retool-npu-kit:cuda-{pins.get('VLLM_CUDA_TAG')}", "python", "-V"]


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
            [sys.executable, "-m", "npu_kernels.device", "env", "--phase", phase, "--hw", "a3"],
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
