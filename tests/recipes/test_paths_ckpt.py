"""Issue 14: a checkpoint dir on a container's own (overlay) root filesystem vanishes with the container, so the
launcher refuses it unless KIT_ALLOW_EPHEMERAL_CKPT=1. The mountinfo text is injected: these run on any host."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from kit_testing import interpreter_stack

from recipes.launch.planning import plan
from recipes.launch.run_inputs import mounts, paths
from recipes.launch.run_inputs.catalog import RECIPES

#: The stack this interpreter's verl serves, as an entry point resolves it without --stack or KIT_STACK.
STACK = interpreter_stack()  # the stack this venv's verl serves

#: /proc/self/mountinfo of a `docker run --rm -v /data/ckpt:/root/checkpoints/retool` container (overlay2 root),
#: trimmed; the mount point with a space shows mountinfo's octal escapes.
DOCKER = """\
812 640 0:52 / / rw,relatime master:284 - overlay overlay rw,lowerdir=/var/lib/docker/overlay2/l/A:/l/B,upperdir=/u
813 812 0:55 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw
814 812 0:56 / /dev rw,nosuid - tmpfs tmpfs rw,size=65536k,mode=755
830 812 259:2 /data/ckpt /root/checkpoints/retool rw,relatime - ext4 /dev/nvme0n1p2 rw
831 812 259:2 /data/my\\040models /root/my\\040models rw,relatime - ext4 /dev/nvme0n1p2 rw
"""
#: A machine that is not a container: its disk at /.
HOST = """\
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw
28 27 0:25 / /dev/shm rw,nosuid,nodev - tmpfs tmpfs rw
"""
#: Rootless podman: fuse-overlayfs root.
PODMAN = "1 0 0:40 / / rw,nodev,relatime - fuse.fuse-overlayfs fuse-overlayfs rw,user_id=0,group_id=0\n"

#: Paths that exist nowhere, so symlink resolution of the real filesystem plays no part.
NOWHERE = "/kit-test-nowhere"


def test_parse_mountinfo_reads_points_types_and_escapes() -> None:
    parsed = mounts.parse_mountinfo(DOCKER)
    assert [(m.mount_point, m.fstype) for m in parsed] == [
        ("/", "overlay"),
        ("/proc", "proc"),
        ("/dev", "tmpfs"),
        ("/root/checkpoints/retool", "ext4"),
        ("/root/my models", "ext4"),
    ]
    assert parsed[3].source == "/dev/nvme0n1p2"
    assert mounts.parse_mountinfo("garbage\n\n1 2 3\n") == []


@pytest.mark.parametrize(
    ("path", "ephemeral"),
    [
        (f"{NOWHERE}/ckpt", True),  # anywhere on the overlay root
        ("/root/checkpoints/retool/qwen3_4b_sft_a3", False),  # under the bind-mounted host folder
        ("/root/checkpoints/retool", False),  # the mount point itself
        ("/root/checkpoints/retool-other", True),  # a sibling that only shares the prefix
        ("/root/my models/x", False),  # escaped mount point
    ],
)
def test_container_root_of_finds_the_overlay_root(path: str, ephemeral: bool) -> None:
    root = mounts.container_root_of(path, DOCKER)
    assert (root is not None) == ephemeral
    if root is not None:
        assert (root.mount_point, root.fstype) == ("/", "overlay")


def test_a_host_root_and_podman() -> None:
    assert mounts.container_root_of(f"{NOWHERE}/ckpt", HOST) is None, "a host's disk at / is not ephemeral"
    assert mounts.container_root_of(f"{NOWHERE}/ckpt", PODMAN) is not None


def test_a_later_mount_on_the_same_point_wins() -> None:
    over = DOCKER + "900 812 0:77 / /root/checkpoints/retool rw - overlay overlay rw\n"
    assert mounts.mount_of("/root/checkpoints/retool/x", mounts.parse_mountinfo(over)).fstype == "overlay"
    # still not the root mount: only the container's own root layer is refused
    assert mounts.container_root_of("/root/checkpoints/retool/x", over) is None


def test_symlinks_resolve_to_where_the_bytes_go(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    info = HOST + f"40 27 0:99 / {tmp_path}/real rw - overlay overlay rw\n"
    assert mounts.mount_of(str(tmp_path / "link" / "ckpt"), mounts.parse_mountinfo(info)).mount_point == str(
        tmp_path / "real"
    )


def test_unreadable_mountinfo_means_no_container(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(mounts, "MOUNTINFO", tmp_path / "absent")
    assert mounts.container_root_of("/anything") is None


@pytest.fixture
def mountinfo(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[[str], None]:
    """Make this process's mountinfo read as ``text``."""
    monkeypatch.delenv(mounts.EPHEMERAL_CKPT_ENV, raising=False)

    def use(text: str) -> None:
        fake = tmp_path / "mountinfo"
        fake.write_text(text)
        monkeypatch.setattr(mounts, "MOUNTINFO", fake)

    return use


def test_check_ckpt_dir_refuses_the_container_root(tmp_path: Path, mountinfo: Callable[[str], None]) -> None:
    ckpt = str(tmp_path / "ckpt")
    mountinfo(PODMAN)
    problems = paths.check_ckpt_dir(ckpt, None)
    assert len(problems) == 1 and problems[0].error
    message = problems[0].message
    assert "own filesystem" in message and "vanish" in message
    assert (
        all(s in message for s in ("docker/run_npu.sh", "docker/run_cuda.sh", "docker/run_cpu.sh"))
        and f"{mounts.EPHEMERAL_CKPT_ENV}=1" in message
    )
    mountinfo(PODMAN + f"50 1 8:1 / {tmp_path} rw - xfs /dev/sdb1 rw\n")  # a host folder mounted over it
    assert paths.check_ckpt_dir(ckpt, None) == []
    mountinfo(HOST)
    assert paths.check_ckpt_dir(ckpt, None) == []


def test_check_ckpt_dir_can_be_forced(
    tmp_path: Path, mountinfo: Callable[[str], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    mountinfo(PODMAN)
    monkeypatch.setenv(mounts.EPHEMERAL_CKPT_ENV, "1")
    problems = paths.check_ckpt_dir(str(tmp_path / "ckpt"), None)
    assert [p.error for p in problems] == [False], "forced: a warning that says so, not an error"
    assert f"{mounts.EPHEMERAL_CKPT_ENV}=1" in problems[0].message


def test_check_ckpt_dir_still_checks_writability_first(tmp_path: Path, mountinfo: Callable[[str], None]) -> None:
    mountinfo(HOST)
    blocker = tmp_path / "file"
    blocker.write_text("")
    problems = paths.check_ckpt_dir(str(blocker / "ckpt"), None)
    assert len(problems) == 1 and "is not a writable folder" in problems[0].message


def test_the_launcher_refuses_it(
    tmp_path: Path, make_model: Callable, make_parquet: Callable, mountinfo: Callable[[str], None]
) -> None:
    """Through plan.build, as `python -m recipes.launch run ...` calls it (path checks on)."""
    environ = {
        "HOME": str(tmp_path),
        "MODEL_PATH": str(make_model(tmp_path / "model")),
        "TRAIN_FILE": str(make_parquet(tmp_path / "data.parquet", 64)),
        "VAL_FILE": str(make_parquet(tmp_path / "val.parquet", 8)),
    }

    def errors() -> list[str]:
        return plan.build(RECIPES["qwen3_4b_sft"], "cpu", STACK, [], path_check=True, environ=environ).errors

    mountinfo(DOCKER)
    found = [e for e in errors() if "own filesystem" in e]
    assert len(found) == 1 and "(default of CKPT_DIR)" in found[0], found
    mountinfo(HOST)
    assert not any("own filesystem" in e for e in errors())


def test_the_launcher_refuses_dump_dirs_that_vanish_with_the_container(
    tmp_path: Path, make_model: Callable, make_parquet: Callable, mountinfo: Callable[[str], None]
) -> None:
    """Issue 33, finding 3: the README's eval step dumped validation generations to $HOME/eval, which the run scripts
    do not mount; the launcher now checks the validation and rollout dump folders as it checks the checkpoints."""
    ckpt = tmp_path / "mounted" / "ckpt"
    environ = {
        "HOME": str(tmp_path),
        "MODEL_PATH": str(make_model(tmp_path / "model")),
        "TRAIN_FILE": str(make_parquet(tmp_path / "data.parquet", 64)),
        "VAL_FILE": str(make_parquet(tmp_path / "val.parquet", 8)),
        "CKPT_DIR": str(ckpt),
    }
    dumps = [
        f"trainer.validation_data_dir={tmp_path / 'eval' / 'qwen3_4b'}",
        f"trainer.rollout_data_dir={tmp_path / 'rollouts'}",
    ]
    mountinfo(PODMAN + f"50 1 8:1 / {tmp_path / 'mounted'} rw - xfs /dev/sdb1 rw\n")  # only the checkpoints mounted
    errors = plan.build(RECIPES["qwen3_4b_dapo"], "cpu", STACK, dumps, path_check=True, environ=environ).errors
    found = [e for e in errors if "own filesystem" in e]
    assert any(e.startswith("validation dump dir") and "eval/qwen3_4b" in e for e in found), errors
    assert any(e.startswith("rollout dump dir") for e in found) and not any("checkpoint dir" in e for e in found)
    mountinfo(HOST)
    errors = plan.build(RECIPES["qwen3_4b_dapo"], "cpu", STACK, dumps, path_check=True, environ=environ).errors
    assert not any("own filesystem" in e for e in errors), errors
