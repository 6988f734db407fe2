"""The doctor's ``image`` check (platforms/doctor/image.py): which kit image, and a stand-in base said plainly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from platforms import CPU, stacks
from platforms.doctor.cli import run_checks
from platforms.doctor.probes import INFO, OK, WARN, Options, Probes


def _image_results(tmp_path: Path, env: dict[str, str], marker: str | None) -> dict[str, tuple[str, str]]:
    path = tmp_path / "retool-kit-standin.json"
    if marker is not None:
        path.write_text(marker)
    probes = Probes(env=env, dev_root=tmp_path, detect_platform=lambda: CPU, standin_marker=path)
    report = run_checks(Options(profile="cpu", only=frozenset({"image"})), probes)
    return {r.check: (r.status, r.summary) for r in report.results}


def test_outside_an_image_it_only_informs(tmp_path: Path) -> None:
    assert _image_results(tmp_path, {}, None) == {"image.profile": (INFO, "not inside a kit image (KIT_IMAGE unset)")}


def test_the_real_base(tmp_path: Path) -> None:
    results = _image_results(tmp_path, {"KIT_IMAGE": "cpu"}, None)
    assert results["image.profile"][0] == OK and results["image.base"][0] == OK


def test_a_stand_in_base_is_said_on_every_run(tmp_path: Path) -> None:
    marker = {
        "stand_in_for": "python:3.11-slim-bookworm",
        "made_by": "scripts/test_images.sh (docker/standin/python_slim.sh)",
        "reproduces": "Debian 12",
        "differs": "Debian's Python",
    }
    status, summary = _image_results(tmp_path, {"KIT_IMAGE": "cpu"}, json.dumps(marker))["image.base"]
    assert status == WARN and summary.startswith("STAND-IN base: not python:3.11-slim-bookworm")
    assert "scripts/test_images.sh" in summary
    status, summary = _image_results(tmp_path, {"KIT_IMAGE": "cpu"}, "{not json")["image.base"]
    assert status == WARN and "STAND-IN base" in summary


def test_an_image_of_another_profile_warns(tmp_path: Path) -> None:
    status, summary = _image_results(tmp_path, {"KIT_IMAGE": "a3"}, None)["image.profile"]
    assert status == WARN and "built for --hw a3" in summary


def test_the_bwrap_warning_names_the_run_script_inside_an_image(tmp_path: Path) -> None:
    probes = Probes(
        env={"KIT_IMAGE": "cpu"},
        dev_root=tmp_path,
        detect_platform=lambda: CPU,
        bwrap_probe=lambda: "bwrap: Can't mount proc on /newroot/proc: Operation not permitted",
    )
    (_ping, bwrap) = run_checks(Options(profile="cpu", only=frozenset({"sandbox"})), probes).results
    assert bwrap.status == WARN and "Can't mount proc" in bwrap.summary
    assert "docker/run_cpu.sh without --no-bwrap" in bwrap.fix and "systempaths=unconfined" in bwrap.fix


def test_patch_ids_do_not_depend_on_the_working_directory(tmp_path: Path, monkeypatch) -> None:
    """In a container the kit's checkout is mounted at /workspace, where git may refuse the repository (seen: a
    worktree's .git link to a host path); the patch ids must still come out."""
    from kit_testing import REPO_ROOT

    from platforms.doctor.stack import _patch_id

    broken = tmp_path / "checkout"
    broken.mkdir()
    (broken / ".git").write_text("gitdir: /nonexistent/host/path/.git/worktrees/x\n")
    monkeypatch.chdir(broken)
    patch = sorted((REPO_ROOT / "patches").glob("*.patch"))[0]
    assert _patch_id(patch) is not None


def test_vllm_kernels_missing_a_system_library_fail_with_the_package(tmp_path: Path) -> None:
    """The first CPU image lacked libnuma.so.1: vLLM's _C could not load and the RL stage died minutes in. The
    doctor runs ldd on vLLM's shared objects (here a stand-in ldd that reports what that image's did)."""
    if CPU.rollout_engine(stacks.REFERENCE).name != "vllm":
        pytest.skip("this venv rolls out with hf: the check only runs where vLLM is the engine")
    site, fake_bin = tmp_path / "site", tmp_path / "bin"
    (site / "vllm").mkdir(parents=True)
    (site / "vllm" / "__init__.py").write_text("")
    (site / "vllm" / "_C.abi3.so").write_bytes(b"")
    fake_bin.mkdir()
    (fake_bin / "ldd").write_text(
        "#!/bin/sh\nprintf '\\tlibnuma.so.1 => not found\\n\\tlibc.so.6 => /lib/libc.so.6\\n'\n"
    )
    (fake_bin / "ldd").chmod(0o755)
    probes = Probes(
        env={"PATH": str(fake_bin)}, dev_root=tmp_path, detect_platform=lambda: CPU, search_path=[str(site)]
    )
    results = {r.check: r for r in run_checks(Options(profile="cpu", only=frozenset({"platform"})), probes).results}
    libs = results["platform.vllm_libs"]
    assert libs.status == "FAIL" and "libnuma.so.1 not found" in libs.summary
    assert "apt-get install libnuma1" in libs.fix
    (fake_bin / "ldd").write_text("#!/bin/sh\nprintf '\\tlibc.so.6 => /lib/libc.so.6\\n'\n")
    results = {r.check: r for r in run_checks(Options(profile="cpu", only=frozenset({"platform"})), probes).results}
    assert results["platform.vllm_libs"].status == OK
