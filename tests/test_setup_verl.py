"""scripts/setup_verl.sh: idempotent, all-or-nothing application of the patch series."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from kit_testing import REPO_ROOT, verl_tree

SCRIPT = REPO_ROOT / "scripts" / "setup_verl.sh"
PATCHES = sorted((REPO_ROOT / "patches").glob("*.patch"))
FINAL_LINE = f"verl 0.6.1: {len(PATCHES)} patches applied"


def run_setup(*args: str, home: Path) -> subprocess.CompletedProcess:
    # A bare HOME and no system config: no git identity, as on CI.
    env = dict(os.environ, HOME=str(home), GIT_CONFIG_NOSYSTEM="1")
    env.pop("GIT_AUTHOR_NAME", None)
    env.pop("GIT_COMMITTER_NAME", None)
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=300)


def git(tree: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(tree), *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def base_clone(tmp_path: Path) -> Path:
    """A clone of the patched tree, reset to the unpatched base tag."""
    dest = tmp_path / "verl"
    subprocess.run(["git", "clone", "--quiet", str(verl_tree()), str(dest)], check=True)
    git(dest, "checkout", "--quiet", "-B", "work", "v0.6.1")
    return dest


def test_series_is_well_formed() -> None:
    assert PATCHES, "patches/ is empty"
    for i, patch in enumerate(PATCHES, start=1):
        assert patch.name.startswith(f"{i:04d}-"), f"{patch.name}: patches must be numbered 0001.. without gaps"
        text = patch.read_text()
        assert text.startswith("From "), f"{patch.name} is not git format-patch output"
        body = text.split("\n\n", 1)[1].split("\n---\n", 1)[0]
        for section in ("Problem:", "Fix:", "Tested:"):
            assert section in body, f"{patch.name}: commit message lacks {section!r}"
        for line in text.splitlines():
            if line.startswith("diff --git "):
                path = line.split()[2][2:]
                assert path.startswith("verl/"), f"{patch.name} touches {path}: patches may only change verl/"


def test_help() -> None:
    proc = subprocess.run(["bash", str(SCRIPT), "--help"], capture_output=True, text=True)
    assert proc.returncode == 0
    for flag in ("--source", "--repo", "--dest", "--install", "--check"):
        assert flag in proc.stdout


def test_unknown_argument_fails(tmp_path: Path) -> None:
    proc = run_setup("--frobnicate", home=tmp_path)
    assert proc.returncode != 0 and "unknown argument" in proc.stderr


@pytest.mark.parametrize(
    ("args", "shows"),
    [
        (["--source", "svn"], "--source must be git or sdist, not 'svn'"),
        (["--source"], "--source needs git or sdist"),
        (["--repo", "/nonexistent", "--check"], "--repo /nonexistent: no such folder"),
        (["--source", "git", "--repo", "{tmp}/notes.txt", "--check"], "--repo {tmp}/notes.txt is not a git repository"),
        (["--sdist", "{tmp}/nosuch.tar.gz", "--check"], "--sdist {tmp}/nosuch.tar.gz: no such file"),
        (["--source", "git", "--sdist", "{tmp}/notes.txt"], "--sdist goes with --source sdist, not --source git"),
    ],
)
def test_wrong_input_is_one_line_and_exit_2(args: list[str], shows: str, tmp_path: Path) -> None:
    """Issue 33: a --repo that does not exist was ignored by --check (it checked build/verl and passed); --source svn
    and a missing value ended in exit 1 (or bash's own message), where the kit's usage code is 2."""
    (tmp_path / "notes.txt").write_text("not a repository")
    proc = run_setup(*(a.replace("{tmp}", str(tmp_path)) for a in args), home=tmp_path / "home")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(lines) == 1 and lines[0].startswith(f"setup_verl: error: {shows.replace('{tmp}', str(tmp_path))}"), lines


def test_check_examines_the_repo_given_not_build_verl(tmp_path: Path) -> None:
    """--check with --repo (no --dest) checks that repository: one that is not verl fails naming it (exit 2), where
    the check used to run on build/verl and pass."""
    plain = tmp_path / "notverl"
    subprocess.run(["git", "init", "--quiet", str(plain)], check=True)
    git(plain, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "--quiet", "--allow-empty", "-m", "x")
    bare = tmp_path / "bare.git"
    subprocess.run(["git", "clone", "--quiet", "--bare", str(plain), str(bare)], check=True)
    for repo in (plain, bare):
        proc = run_setup("--source", "git", "--repo", str(repo), "--check", home=tmp_path / "home")
        assert proc.returncode == 2, proc.stdout + proc.stderr
        error = f"setup_verl: error: {repo} has no tag v0.6.1 (is it a verl checkout?)"
        assert proc.stderr.strip().splitlines()[-1] == error, proc.stderr
        assert git(plain, "log", "--format=%s") == "x"  # nothing changed in the repository


def test_tree_built_by_the_test_command_is_patched() -> None:
    tree = verl_tree()
    subjects = git(tree, "log", "--format=%s", "v0.6.1..HEAD").splitlines()
    assert len(subjects) == len(PATCHES)


def test_rerun_on_patched_tree_is_a_no_op(tmp_path: Path) -> None:
    tree = verl_tree()
    head = git(tree, "rev-parse", "HEAD")
    proc = run_setup("--source", "sdist", "--dest", str(tree), home=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "already patched" in proc.stdout
    assert proc.stdout.strip().splitlines()[-1] == FINAL_LINE
    assert git(tree, "rev-parse", "HEAD") == head


def test_git_source_applies_series_with_no_git_identity(base_clone: Path, tmp_path: Path) -> None:
    proc = run_setup("--source", "git", "--dest", str(base_clone), home=tmp_path / "home")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == FINAL_LINE
    assert len(git(base_clone, "log", "--format=%s", "v0.6.1..HEAD").splitlines()) == len(PATCHES)
    # The result is content-identical to the tree the test command built.
    assert git(base_clone, "rev-parse", "HEAD^{tree}") == git(verl_tree(), "rev-parse", "HEAD^{tree}")


def test_partially_patched_tree_gets_the_rest(base_clone: Path, tmp_path: Path) -> None:
    git(base_clone, "-c", "user.name=t", "-c", "user.email=t@t", "am", "--quiet", str(PATCHES[0]))
    proc = run_setup("--source", "git", "--dest", str(base_clone), home=tmp_path / "home")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"applying {len(PATCHES) - 1} of {len(PATCHES)} patches" in proc.stdout
    assert proc.stdout.strip().splitlines()[-1] == FINAL_LINE


def test_check_leaves_dest_untouched(base_clone: Path, tmp_path: Path) -> None:
    head = git(base_clone, "rev-parse", "HEAD")
    proc = run_setup("--source", "git", "--dest", str(base_clone), "--check", home=tmp_path / "home")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == FINAL_LINE
    assert git(base_clone, "rev-parse", "HEAD") == head


def test_conflicting_tree_fails_names_patch_and_file_and_is_left_as_it_was(base_clone: Path, tmp_path: Path) -> None:
    target = base_clone / "verl/experimental/reward/reward_loop/naive.py"
    text = target.read_text()
    anchor = 'extra_info = data_item.non_tensor_batch.get("extra_info", {})'
    assert anchor in text
    target.write_text(text.replace(anchor, 'extra_info = data_item.non_tensor_batch.get("extra_info") or {}'))
    git(base_clone, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "--quiet", "-am", "local change")
    head = git(base_clone, "rev-parse", "HEAD")

    proc = run_setup("--source", "git", "--dest", str(base_clone), home=tmp_path / "home")
    assert proc.returncode == 1
    assert PATCHES[0].name in proc.stderr
    assert "verl/experimental/reward/reward_loop/naive.py" in proc.stderr
    assert git(base_clone, "rev-parse", "HEAD") == head
    assert git(base_clone, "status", "--porcelain") == ""
    assert not (base_clone / ".git" / "rebase-apply").exists()


def test_sdist_checksum_mismatch_is_refused(tmp_path: Path) -> None:
    fake = tmp_path / "verl-0.6.1.tar.gz"
    subprocess.run(["tar", "-czf", str(fake), "-C", str(REPO_ROOT), "pins.env"], check=True)
    dest = tmp_path / "tree"
    proc = run_setup("--source", "sdist", "--sdist", str(fake), "--dest", str(dest), home=tmp_path / "home")
    assert proc.returncode == 1
    assert "sha256 mismatch" in proc.stderr
    assert not dest.exists()


def test_installed_verl_is_the_patched_tree_without_tests_or_scripts() -> None:
    import importlib.metadata as md
    import importlib.util

    import verl

    assert verl.__version__ == "0.6.1"
    assert md.distribution("verl").read_text("top_level.txt").split() == ["verl"]
    for name in ("tests", "scripts"):
        spec = importlib.util.find_spec(name)
        assert spec is None or "site-packages" not in str(spec.origin or spec.submodule_search_locations), name
    recorded = (Path(verl.__file__).parent / "version" / "kit_patches").read_text().splitlines()
    assert [line.split()[1] for line in recorded] == [p.name for p in PATCHES]
