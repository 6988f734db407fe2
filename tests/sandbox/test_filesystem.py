"""The filesystem allowlist (issue 14 item 11): a file planted outside it is invisible to request code.

Planted twice: in a fresh temp directory and under the project tree (where datasets, checkpoints and the kit's own
files live on a training node). bwrap mode must not even show the names; the fallback with Landlock must refuse to
read them and to list their directories (stat still answers there, as /health says).
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.filesystem import InterpreterFacts, build_allowlist, bwrap_mount_args, outermost

REPO_ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json, os, sys
paths = json.loads(sys.argv[1] if len(sys.argv) > 1 else {paths!r})
out = {{}}
for path in paths:
    entry = {{"exists": os.path.exists(path)}}
    try:
        entry["content"] = open(path).read()
    except OSError as exc:
        entry["content"] = type(exc).__name__
    try:
        entry["siblings"] = sorted(os.listdir(os.path.dirname(path)))
    except OSError as exc:
        entry["siblings"] = type(exc).__name__
    out[path] = entry
try:
    out["/"] = sorted(os.listdir("/"))
except OSError as exc:
    out["/"] = type(exc).__name__
try:
    open(os.path.join(os.path.dirname(paths[0]), "written-by-run.txt"), "w").write("x")
    out["wrote_next_to_it"] = True
except OSError:
    out["wrote_next_to_it"] = False
print(json.dumps(out))
"""


@pytest.fixture
def planted(tmp_path: Path) -> Iterator[tuple[list[Path], str]]:
    """A secret in a temp dir and one under the project tree; removed afterwards."""
    secret = f"PLANTED-{uuid.uuid4().hex}"
    in_project = REPO_ROOT / f".sandbox-planted-{uuid.uuid4().hex[:8]}"
    in_project.mkdir()
    files = [tmp_path / "elsewhere" / "secret.txt", in_project / "secret.txt"]
    try:
        for path in files:
            path.parent.mkdir(exist_ok=True)
            path.write_text(secret)
            path.parent.chmod(0o755)
            path.chmod(0o644)  # world-readable: the case a uid drop alone does not protect
        yield files, secret
    finally:
        shutil.rmtree(in_project, ignore_errors=True)


def test_planted_files_are_invisible(server, planted) -> None:
    files, secret = planted
    fs = server.health["filesystem"]
    if fs["mode"] == "host":
        pytest.skip(f"this server has no filesystem allowlist: {fs['reason']}")
    code = PROBE.format(paths=json.dumps([str(p) for p in files]))
    status, body, _ = server.run(code, run_timeout=20)
    assert status == 200 and body["status"] == "Success", body
    out = json.loads(body["run_result"]["stdout"])
    assert secret not in body["run_result"]["stdout"]
    assert out["wrote_next_to_it"] is False
    assert all(not p.with_name("written-by-run.txt").exists() for p in files)
    for path in files:
        seen = out[str(path)]
        assert seen["content"] in ("FileNotFoundError", "PermissionError"), seen
        assert path.name not in seen["siblings"], seen
    if fs["mode"] == "mounts":
        assert all(out[str(p)]["exists"] is False for p in files)
        # the root holds the allowlist's mount points and bwrap's own /dev, /proc, /tmp: nothing else of the host
        tops = {Path(p).parts[1] for p in fs["read_only"] + fs["etc"] + list(fs["links"])}
        assert set(out["/"]) <= tops | {"dev", "proc", "tmp", "etc", "opt"}, out["/"]
        assert str(REPO_ROOT) not in server.health["filesystem"]["read_only"]
    else:
        assert fs["mode"] == "landlock" and out["/"] == "PermissionError"


def test_health_names_the_filesystem_mode(server) -> None:
    """Where this kernel has Landlock the fallback must use it (a broken Landlock path may not hide as a skip)."""
    from sandbox import worker_landlock

    fs = server.health["filesystem"]
    landlock = worker_landlock.abi_version() >= 1
    expected = "mounts" if server.isolation == "bwrap" else ("landlock" if landlock else "host")
    assert fs["mode"] == expected == server.health["isolation"]["filesystem"]
    assert fs["read_only"] and "/" not in fs["read_only"]
    assert "/etc/passwd" not in fs["etc"]  # bwrap gets a synthetic one, the fallback none
    if fs["mode"] != "host":
        assert fs["writable"] == "the run's own directory only"


def test_synthetic_etc_and_system_libraries_work_inside(server) -> None:
    if server.health["filesystem"]["mode"] != "mounts":
        pytest.skip("the synthetic /etc exists only in the bwrap root")
    program = (
        "import os, pwd, subprocess\n"
        "print(sorted(os.listdir('/etc')))\n"
        "print(pwd.getpwuid(os.getuid()).pw_name)\n"
        "print(subprocess.run(['sort'], input=b'b\\na\\n', capture_output=True).stdout.decode().split())\n"
    )
    status, body, _ = server.run(program, run_timeout=20)
    assert body["status"] == "Success", body
    lines = body["run_result"]["stdout"].splitlines()
    assert "passwd" in lines[0] and "shadow" not in lines[0] and "ssh" not in lines[0]
    assert lines[1] and lines[2] == "['a', 'b']"


def _facts(tmp_path: Path) -> InterpreterFacts:
    prefix = tmp_path / "py"
    site = tmp_path / "venv" / "site-packages"
    extra = tmp_path / "project"  # a sys.path entry (a .pth, say) that holds nothing the preload imports
    for path in (prefix / "lib", site / "numpy", extra):
        path.mkdir(parents=True, exist_ok=True)
    return InterpreterFacts(
        prefixes=[str(prefix)],
        executable_dir=str(prefix / "bin"),
        sys_path=[str(prefix / "lib"), str(site), str(extra)],
        module_files=[str(prefix / "lib" / "os.py"), str(site / "numpy" / "__init__.py")],
        mapped_dirs=[str(site / "numpy"), "/usr/lib"],
        importable=["numpy"],
    )


def test_allowlist_keeps_what_the_preload_needs_and_nothing_else(tmp_path: Path) -> None:
    allow = build_allowlist(_facts(tmp_path))
    assert str(tmp_path / "py") in allow.read_only
    assert str(tmp_path / "venv" / "site-packages") in allow.read_only
    assert str(tmp_path / "venv" / "site-packages" / "numpy") not in allow.read_only  # covered by its parent
    assert str(tmp_path / "project") not in allow.read_only
    assert allow.left_out == [str(tmp_path / "project")]
    assert "/" not in allow.read_only and "/usr" in allow.read_only
    allow = build_allowlist(_facts(tmp_path), extra=[str(tmp_path / "project")])
    assert str(tmp_path / "project") in allow.read_only and allow.left_out == []


def test_outermost_drops_nested_paths() -> None:
    assert outermost(["/a/b", "/a", "/ab", "/a/b/c", "/x/"]) == ["/a", "/ab", "/x"]


def test_bwrap_root_is_built_from_the_allowlist_only(tmp_path: Path) -> None:
    allow = build_allowlist(_facts(tmp_path))
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "passwd").write_text("root:x:0:0::/:/bin/false\n")
    args = bwrap_mount_args(allow, str(etc), [Path(__file__)])
    joined = " ".join(args)
    assert "--ro-bind / /" not in joined
    for path in allow.read_only:
        assert f"--ro-bind {path} {path}" in joined
    assert f"--ro-bind {etc / 'passwd'} /etc/passwd" in joined
    # parents made 0755 before the binds (bwrap 0.8 would make them 0700: a sandbox uid could not pass)
    first_bind = args.index("--ro-bind")
    for parent in (str(tmp_path), str(tmp_path.parent)):
        i = args.index(parent)
        assert args[i - 1] == "--dir" and args[i - 3 : i - 1] == ["--perms", "0755"] and i < first_bind
    assert args[-6:] == ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]


def test_landlock_self_test_tells_a_hidden_root_from_a_visible_one(tmp_path: Path) -> None:
    from sandbox import worker_landlock

    abi = worker_landlock.abi_version()
    if abi < 1:
        pytest.skip("this kernel has no Landlock (needs Linux >= 5.13 with landlock in the LSM list)")
    assert worker_landlock.hides_root(["/usr"], [str(tmp_path)], abi)
    assert not worker_landlock.hides_root(["/"], [str(tmp_path)], abi)  # "/" allowed: the self-test must say so
