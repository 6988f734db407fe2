"""The default test run's two phases (scripts/test.sh): quick tests on two workers, then the end-to-end runs and the
timing-bound tests alone (tests/conftest.py marks them ``serial``). A wrong mark would put a 17-minute learning run
or a kill-timing test beside another test on a 2-core machine; a stale path would drop a test's protection silently.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from kit_testing import REPO_ROOT, kit_env

TESTS = REPO_ROOT / "tests"
SAMPLE = (
    "tests/test_pins.py",  # quick: phase 1
    "tests/faults/test_sandbox_killed_mid_step.py",  # serial: phase 2
    "tests/smoke/test_learning_run.py",  # slow (the main job): phase 2
    "tests/smoke/test_smoke_run.py",  # fast_smoke: only when asked for
)


def _pytest(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m pytest ARGS`` from the kit's root, as the test command runs it, output captured."""
    command = [sys.executable, "-m", "pytest", *args]
    return subprocess.run(command, capture_output=True, text=True, env=kit_env(), cwd=REPO_ROOT, timeout=300)


def _phase_expressions() -> list[str]:
    """The ``-m`` expressions of test.sh's default run, in order."""
    script = (REPO_ROOT / "scripts" / "test.sh").read_text()
    return re.findall(r'-m pytest -m "([^"]+)"', script)


def _collected(markexpr: str) -> dict[str, int]:
    """{test file: how many of its tests the expression selects and does not skip}, over :data:`SAMPLE`."""
    proc = _pytest("--collect-only", "-q", "-m", markexpr, *SAMPLE)
    assert proc.returncode in (0, 5), proc.stdout[-3000:] + proc.stderr[-3000:]
    counts: dict[str, int] = {}
    for line in proc.stdout.splitlines():
        if "::" in line:
            path = line.split("::", 1)[0]
            counts[path] = counts.get(path, 0) + 1
    return counts


def test_every_serial_path_names_tests() -> None:
    from conftest import SERIAL_FILES  # importable: tests/ is on pythonpath

    for prefix in SERIAL_FILES:
        matches = list(TESTS.glob(f"{prefix}**/test_*.py")) if prefix.endswith("/") else [TESTS / prefix]
        assert matches and all(path.is_file() for path in matches), f"SERIAL_FILES names {prefix}: no such tests"


def test_the_two_phases_split_the_suite_as_documented() -> None:
    quick, alone = _phase_expressions()
    assert (quick, alone) == ("not slow and not serial", "slow or serial")
    phase_1, phase_2 = _collected(quick), _collected(alone)
    assert set(phase_1) == {"tests/test_pins.py"}, phase_1
    assert set(phase_2) == {
        "tests/faults/test_sandbox_killed_mid_step.py",
        "tests/smoke/test_learning_run.py",
        "tests/smoke/test_smoke_run.py",  # collected, then skipped with its reason (opt-in)
    }, phase_2


def test_the_default_run_skips_the_fast_smoke_with_its_reason() -> None:
    proc = _pytest("-q", "-rs", "-m", "slow or serial", "tests/smoke/test_smoke_run.py")
    assert proc.returncode == 0 and re.search(r"\b5 skipped\b", proc.stdout), proc.stdout[-3000:]
    assert "bash scripts/test.sh -m fast_smoke" in proc.stdout


def test_the_default_run_skips_the_unpatched_end_to_end_runs_with_their_reason() -> None:
    """Only the opt-in pair: the patched end-to-end resume checks in the same files still run by default."""
    files = ["tests/cpu/test_cpu_sft_resume.py", "tests/cpu/test_cpu_rl_resume.py"]
    proc = _pytest("-q", "-rs", "-m", "slow or serial", "-k", "without_the_patch", *files)
    assert proc.returncode == 0 and re.search(r"\b2 skipped\b", proc.stdout), proc.stdout[-3000:]
    assert "bash scripts/test.sh -m unpatched_e2e" in proc.stdout
    listed = _pytest("--collect-only", "-q", "-m", "slow or serial", *files)
    assert "test_patched_killed_at_an_epoch_end" in listed.stdout
    assert "test_patched_resume_serves_the_uninterrupted_prompts" in listed.stdout


def _fake_kit(root: Path, rc_quick: int, rc_alone: int, alone_runs: str = "", free_gb: int = 100) -> dict[str, str]:
    """A copy of the test command in ``root`` whose venv is a stand-in python: it answers the venv step's questions
    and 'runs' each pytest phase by printing its arguments and exiting with the given status (phase 2 runs the
    shell line ``alone_runs`` first). Its machine has its own disk, ``free_gb`` free (``_free_file`` to change it):
    where the other stack's venv builds follows the free space (scripts/lib/disk.sh), and the real machine's varies
    (stop 57's CI run: 8.1 GB free during phase 1 built it after phase 2 and failed a check of the order)."""
    import shutil

    for name in (
        "scripts/test.sh",
        "scripts/lib/venv.sh",
        "scripts/lib/stack.sh",
        "scripts/lib/disk.sh",
        "scripts/setup_verl.sh",
        "pins.env",
        "pyproject.toml",
    ):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO_ROOT / name, root / name)
    shutil.copytree(REPO_ROOT / "patches", root / "patches")
    # the shell's stacks come from the one resolver (scripts/lib/stack.sh runs `python -m platforms stack`), whose
    # folders are the copy's own
    shutil.copytree(REPO_ROOT / "platforms", root / "platforms", ignore=shutil.ignore_patterns("__pycache__"))
    tools = root / "tools"
    tools.mkdir()
    (tools / "bwrap").write_text("#!/bin/sh\nexit 0\n")
    (tools / "ldconfig").write_text("#!/bin/sh\necho 'libnuma.so.1 (libc6,x86-64) => /fake/libnuma.so.1'\n")
    for path in (tools / "bwrap", tools / "ldconfig"):
        path.chmod(0o755)
    for stack, venv, tree, rc_stack in (("0.6.1", ".venv", "verl", None), ("0.9.1", ".venv-0.9.1", "verl-0.9.1", 0)):
        bin_dir = root / venv / "bin"
        bin_dir.mkdir(parents=True)
        (bin_dir / "python").write_text(
            "#!/bin/bash\n"
            "if [[ $1 == -c ]]; then echo /fake/libtcmalloc_minimal.so.4; exit 0; fi\n"  # the venv's tcmalloc probe
            f'echo "fake pytest ({stack}) $*"\n'
            + (f"exit {rc_stack}\n" if rc_stack is not None else "")
            + f'[[ " $* " == *" not slow and not serial "* ]] && exit {rc_quick}\n'
            f"{alone_runs}\nexit {rc_alone}\n"
        )
        (bin_dir / "python").chmod(0o755)
        (root / "build" / tree / ".git").mkdir(parents=True)
        stamp = subprocess.run(
            ["bash", "-c", f"KIT_ROOT={root}; KIT_STACK={stack}; source {root}/scripts/lib/venv.sh; _kit_stamp"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        (root / venv / ".kit-stamp").write_text(stamp + "\n")
    _fake_df(root, free_gb)
    env = kit_env()
    env["PATH"] = f"{tools}:{env['PATH']}"
    env.pop("KIT_TEST_VENV_ROOM_GB", None)  # scripts/lib/disk.sh's default room, as CI runs it
    return env


def _free_file(root: Path) -> Path:
    """The fake machine's free space in KB, one number that its ``df`` reads on every call."""
    return root / "tools" / "free_kb"


def test_the_default_run_prints_each_phases_wall_time_and_keeps_the_worse_exit(tmp_path: Path) -> None:
    """Issue 41: the end of ``bash scripts/test.sh`` says where the minutes went (venv, phase 1, phase 2)."""
    for rc_quick, rc_alone, want in ((0, 0, 0), (1, 0, 1), (0, 2, 2)):
        root = tmp_path / f"kit-{rc_quick}-{rc_alone}"
        env = _fake_kit(root, rc_quick, rc_alone)
        proc = subprocess.run(["bash", "scripts/test.sh"], cwd=root, env=env, capture_output=True, text=True)
        assert proc.returncode == want, proc.stdout + proc.stderr
        assert "fake pytest (0.6.1) -m pytest -m not slow and not serial" in proc.stdout, proc.stdout
        assert "fake pytest (0.6.1) -m pytest -m slow or serial" in proc.stdout, proc.stdout
        assert "fake pytest (0.9.1) -m pytest tests/stack091" in proc.stdout, proc.stdout  # issue 43: phase 3
        # CI's machine once ran out of disk in phase 2: each phase's log says what was free (docs/testing.md, "Disk")
        disk = re.findall(r"^== disk \(([^)]+)\): [\d.]+ GB free for the repo, [\d.]+ GB in \S+$", proc.stdout, re.M)
        assert disk == [
            "before the venv",
            "after the venv",
            "after phase 1",
            "after phase 2",
            "before the venv",  # the other stack's venv build, beside phase 1: its log, shown in phase 3
            "before the venv",  # phase 3's own test.sh, for the other stack
            "after phase 3",
        ], proc.stdout
        # issue 51: the other stack's venv builds beside phase 1, and phase 3 runs its tests after the build's log
        out = proc.stdout
        assert (
            out.index("stack 0.9.1's venv: building beside phase 1")
            < out.index("phase 1 of 3")
            < out.index("== .venv-0.9.1 ready")
            < out.index("fake pytest (0.9.1)")
        ), out
        line = proc.stdout.strip().splitlines()[-1]
        assert re.fullmatch(
            rf"== test\.sh wall time: venv \d+ s, phase 1 \d+ s \(exit {rc_quick}\), phase 2 \d+ s \(exit "
            rf"{rc_alone}\), phase 3 \d+ s \(exit 0\), total \d+ s",
            line,
        ), proc.stdout


def _fake_df(root: Path, free_gb: int) -> None:
    """The fake machine's one filesystem (df -Pk's columns), ``free_gb`` free to start with: its ``df`` reads
    :func:`_free_file` on every call, so a test can change it mid-run."""
    _free_file(root).write_text(f"{free_gb * 2**20}\n")
    df = root / "tools" / "df"
    df.write_text(
        f'#!/bin/sh\necho "Filesystem 1024-blocks Used Available Capacity Mounted on"\n'
        f'echo "fake 99999999 0 $(cat {_free_file(root)}) 0% /"\n'
    )
    df.chmod(0o755)


#: scripts/lib/disk.sh's default room for one more venv beside a phase, in GB
ROOM_GB = int(re.search(r"KIT_TEST_VENV_ROOM_GB:-(\d+)", (REPO_ROOT / "scripts/lib/disk.sh").read_text())[1])


@pytest.mark.parametrize(("spare_gb", "drop", "where"), [(1, "1", "beside"), (-1, "0", "after"), (-1, "1", "drop")])
def test_the_other_stacks_venv_builds_beside_phase_1_only_with_room(
    tmp_path: Path, spare_gb: int, drop: str, where: str
) -> None:
    """Stop 56: CI ran out of disk building .venv-0.9.1 beside phase 1. It builds there only with room for it
    (KIT_TEST_VENV_ROOM_GB: here its default, with a GB to spare or a GB short); else after phase 2, and with
    KIT_TEST_DROP_VENV=1 (.ci/run) after removing this stack's venv, which phase 3 does not use, when the disk still
    lacks the room."""
    free_gb = ROOM_GB + spare_gb
    root = tmp_path / "kit"
    env = _fake_kit(root, 0, 0, free_gb=free_gb)
    env.update(KIT_TEST_DROP_VENV=drop, KIT_DISK_SAMPLE_S="0.2")
    proc = subprocess.run(["bash", "scripts/test.sh"], cwd=root, env=env, capture_output=True, text=True)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    building = out.index("stack 0.9.1's venv: building")
    assert (building < out.index("phase 1 of 3")) is (where == "beside"), out
    assert (building > out.index("fake pytest (0.6.1) -m pytest -m slow or serial")) is (where != "beside"), out
    if where != "beside":
        assert f"after phase 2, {free_gb}.0 GB free, 1 more venv(s) need {ROOM_GB} GB beside a phase" in out, out
    assert ("== removing .venv (KIT_TEST_DROP_VENV=1)" in out) is (where == "drop"), out
    assert (root / ".venv").exists() is (where != "drop")
    assert building < out.index("== .venv-0.9.1 ready") < out.index("fake pytest (0.9.1)"), out


def test_the_default_run_ends_with_each_phases_lowest_free_disk(tmp_path: Path) -> None:
    """Stop 56: CI ran out of disk and its log's tail showed only what was free at the end. The run samples the free
    space while each phase runs and ends with every phase's lowest, so a transient low (here: phase 2 at 1 GB for a
    second, 10 GB before and after) is in the lines CI keeps."""
    root = tmp_path / "kit"
    free = _free_file(root)
    low = f"echo {2**20} > {free}; sleep 1; echo {10 * 2**20} > {free}"
    env = _fake_kit(root, 0, 0, alone_runs=low, free_gb=10)
    env["KIT_DISK_SAMPLE_S"] = "0.2"
    env["KIT_TEST_VENV_ROOM_GB"] = "5"
    proc = subprocess.run(["bash", "scripts/test.sh"], cwd=root, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "== disk (after phase 2): 10.0 GB free for the repo" in proc.stdout, proc.stdout
    summary = proc.stdout.strip().splitlines()[-2]
    assert summary == (
        "== disk: 10.0 GB free at the start; the lowest (GB) during the venv: 10.0, phase 1: 10.0, phase 2: 1.0, "
        "phase 3: 10.0"
    ), proc.stdout


def test_the_default_run_skips_the_covered_end_to_end_runs_with_their_reason() -> None:
    """Issue 41: the tiny-model runs the main job's run proves again are opt-in; the rest of their file still runs."""
    files = ["tests/cpu/test_cpu_rl.py"]
    chosen = "async_tool_agent_loop or weight_sync_reaches"
    proc = _pytest("-q", "-rs", "-m", "slow or serial", "-k", chosen, *files)
    assert proc.returncode == 0 and re.search(r"\b2 skipped\b", proc.stdout), proc.stdout[-3000:]
    assert "bash scripts/test.sh -m covered_e2e" in proc.stdout
    listed = _pytest("--collect-only", "-q", "-m", "slow or serial", files[0])
    assert "test_sync_grpo_survives_a_killed_worker_and_a_killed_driver" in listed.stdout
    assert "test_rl_checkpoint_merges_and_scores" in listed.stdout


def test_a_passing_tests_temporary_folder_is_removed_when_it_ends(tmp_path: Path) -> None:
    """The end-to-end runs write models and checkpoints (GBs) into tmp_path: with pyproject.toml's retention policy a
    passing test's folder goes when the test ends, a failing one's stays for its post-mortem."""
    (tmp_path / "test_writes.py").write_text(
        "import pytest\n\n"
        "@pytest.mark.parametrize('outcome', ['passes', 'fails'])\n"
        "def test_writes(tmp_path, outcome):\n"
        "    (tmp_path / 'checkpoint.bin').write_bytes(bytes(4096))\n"
        "    assert outcome == 'passes'\n"
    )
    basetemp = tmp_path / "basetemp"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-c",
            str(REPO_ROOT / "pyproject.toml"),
            "--rootdir",
            str(tmp_path),
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            "--basetemp",
            str(basetemp),
            "-q",
            str(tmp_path / "test_writes.py"),
        ],
        capture_output=True,
        text=True,
        env=kit_env(),
        cwd=tmp_path,
        timeout=120,
    )
    assert "1 failed, 1 passed" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
    left = sorted(path.parent.name for path in basetemp.rglob("checkpoint.bin"))
    assert left == ["test_writes_fails_0"], left
