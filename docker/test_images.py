"""``bash scripts/test_images.sh``: build the kit's images and run them, on a machine without a registry.

Why: the Dockerfiles and docker/run_*.sh had never executed; an Atlas owner would have been the first. This starts a
docker daemon if none answers (Debian's docker.io; ``dockerd --iptables=false --bridge=none``), makes stand-in bases
for the pinned bases it cannot pull (docker/standin/: labelled, with /etc/retool-kit-standin.json, which
retool-doctor reports), builds each image with the unchanged ``docker/build.sh --hw P``, runs the checks inside it
through the kit's own ``docker/run_<platform>.sh``, prints a table (image, build s, size, checks) and removes what it
made. Host side, standard library only.

    python3 docker/test_images.py [--hw cpu] [--keep] [--skip-smoke] [--out DIR]

KIT_DOCKER_STORAGE picks the storage driver of a daemon it starts (default overlay2; vfs where overlay cannot mount:
the launcher's refusal of a checkpoint dir on the container's own filesystem looks for an overlay root, so under vfs
the ckpt check reports that refusal missing).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

KIT_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(KIT_ROOT))

from platforms import stacks  # noqa: E402
from platforms.cli import add_stack_option  # noqa: E402
from platforms.images import device_nodes  # noqa: E402
from platforms.profiles import PROFILES  # noqa: E402
from platforms.stacks import Stack  # noqa: E402

#: Stand-in builders by pinned base repository (pins.env key of the repo -> script under docker/standin/).
STANDINS = {
    "CPU_BASE_IMAGE": "docker/standin/python_slim.sh",
    "VLLM_ASCEND_IMAGE": "docker/standin/vllm_ascend.sh",
    "VLLM_CUDA_IMAGE": "docker/standin/vllm_openai.sh",
}
#: The Debian root the accelerator stand-ins share (docker/standin/lib.sh standin_shared_root).
SHARED_STANDIN_ROOT = "retool-kit-standin/bookworm-python:3.11-git"
#: Doctor FAIL lines a stand-in causes by what it documents as different, by pinned base: the NPU stand-in sets
#: TORCH_DEVICE_BACKEND_AUTOLOAD=0 (torch_npu cannot load without CANN's libraries), which the doctor rightly
#: refuses on an NPU host. Any other FAIL fails the check.
STANDIN_DOCTOR_FAILS = {"VLLM_ASCEND_IMAGE": ("env.bad.TORCH_DEVICE_BACKEND_AUTOLOAD",)}
#: What the doctor checks inside every image; ``platform`` too where this host has the image's devices.
DOCTOR_GROUPS = "image,versions,patches,env,sandbox"
DOCKERD_ARGS = ("--iptables=false", "--bridge=none")


@dataclass
class Row:
    """One image's line of the table."""

    image: str
    base: str
    build_s: float | None = None
    size_gb: float | None = None
    checks: dict[str, str] = field(default_factory=dict)

    def line(self) -> str:
        build = f"{self.build_s:.0f}" if self.build_s is not None else "-"
        size = f"{self.size_gb:.2f} GB" if self.size_gb is not None else "-"
        checks = ", ".join(f"{name} {verdict}" for name, verdict in self.checks.items()) or "-"
        return f"| {self.image} | {self.base} | {build} | {size} | {checks} |"


def say(message: str) -> None:
    print(f"[images] {message}", flush=True)


def run(cmd: list[str], log: Path, timeout: float, env: dict[str, str] | None = None) -> tuple[int, str]:
    """``cmd`` with its output streamed into ``log`` as it comes (``tail -f`` shows a long build's progress);
    (exit code, what it printed)."""
    with log.open("a") as sink:
        sink.write(f"\n$ {' '.join(cmd)}\n")
        sink.flush()
        start = sink.tell()
        try:
            rc = subprocess.run(cmd, stdout=sink, stderr=subprocess.STDOUT, timeout=timeout, env=env).returncode
        except subprocess.TimeoutExpired:
            rc = 124
    with log.open() as written:
        written.seek(start)
        return rc, written.read()


def docker_answers() -> bool:
    return (
        shutil.which("docker") is not None
        and subprocess.run(["docker", "info"], capture_output=True, timeout=60).returncode == 0
    )


def ensure_dockerd(out: Path) -> None:
    """A daemon that answers: the running one, else Debian's dockerd started here (installed with apt if missing)."""
    if docker_answers():
        return
    if shutil.which("dockerd") is None:
        if os.geteuid() != 0 or shutil.which("apt-get") is None:
            sys.exit("test_images: no docker daemon answers, and dockerd cannot be installed here (needs root + apt)")
        say("installing docker.io (apt)")
        apt = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], check=True, capture_output=True, env=apt)
        subprocess.run(["apt-get", "install", "-y", "-q", "docker.io"], check=True, capture_output=True, env=apt)
    storage = os.environ.get("KIT_DOCKER_STORAGE", "overlay2")
    say(f"starting dockerd (--storage-driver={storage} {' '.join(DOCKERD_ARGS)}); log {out / 'dockerd.log'}")
    with (out / "dockerd.log").open("a") as log:
        subprocess.Popen(
            ["dockerd", f"--storage-driver={storage}", *DOCKERD_ARGS], stdout=log, stderr=log, start_new_session=True
        )
    for _ in range(60):
        if docker_answers():
            return
        time.sleep(1)
    sys.exit(f"test_images: dockerd did not answer in 60 s (see {out / 'dockerd.log'})")


def daemon_client_path() -> dict[str, str]:
    """The environment for docker/build.sh: its ``DOCKER_BUILDKIT=1`` needs a client with BuildKit (Docker's own CLI
    needs the buildx plugin for that; Debian's 20.10 client talks to its daemon's built-in BuildKit)."""
    env = os.environ.copy()
    if subprocess.run(["docker", "buildx", "version"], capture_output=True).returncode == 0:
        return env
    debian = Path("/usr/bin/docker")
    if debian.is_file() and shutil.which("docker") != str(debian):
        shim = Path(tempfile.mkdtemp(prefix="kit-docker-"))
        (shim / "docker").symlink_to(debian)
        env["PATH"] = f"{shim}:{env['PATH']}"
        say(f"the docker on PATH has no buildx: building with {debian} (the daemon's own client)")
    return env


def image_present(tag: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode == 0


def ensure_base(profile_name: str, out: Path, made: list[str], env: dict[str, str], stack: Stack) -> str:
    """The profile's pinned base on ``stack``, made as a stand-in when it is not here; its description for the table."""
    image = PROFILES[profile_name].image
    assert image is not None
    base = image.base(stack)
    if image_present(base):
        labels = json.loads(
            subprocess.run(
                ["docker", "image", "inspect", "-f", "{{json .Config.Labels}}", base],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            or "null"
        )
        return f"{base} ({'stand-in' if labels and 'retool-kit.stand-in' in labels else 'real'})"
    builder = STANDINS.get(image.base_repo_key)
    if builder is None:
        raise SystemExit(f"test_images: {base} is not here and the kit has no stand-in for it yet")
    say(f"{base} cannot be pulled here: building its stand-in ({builder})")
    t0 = time.monotonic()
    # the builder reads the stack's pins (torch, CANN, vLLM ... of the base it stands in for) through kit_use_stack
    # (docker/standin/vllm_ascend.sh): it gets the stack as every child of an entry point does, KIT_STACK
    standin_env = {**env, stacks.ENV_VAR: stack.name}
    rc, _ = run(["bash", str(KIT_ROOT / builder), base], out / "standin.log", timeout=3600, env=standin_env)
    if rc != 0:
        raise SystemExit(f"test_images: the stand-in for {base} failed (see {out / 'standin.log'})")
    made.append(base)
    say(f"stand-in {base} built in {time.monotonic() - t0:.0f} s")
    return f"{base} (stand-in)"


def build(profile_name: str, row: Row, out: Path, env: dict[str, str], made: list[str], stack: Stack) -> bool:
    image = PROFILES[profile_name].image
    assert image is not None
    tag, log = image.kit_tag(stack), out / f"build-{profile_name}.log"
    say(f"building {tag} (docker/build.sh --hw {profile_name}{stack.cli_option}); log {log}")
    t0 = time.monotonic()
    build_sh = ["bash", str(KIT_ROOT / "docker/build.sh"), "--hw", profile_name, "--stack", stack.name]
    rc, _ = run([*build_sh, "--", "--network", "host"], log, timeout=5400, env=env)
    row.build_s = time.monotonic() - t0
    if rc != 0:
        row.checks["build"] = "FAILED"
        return False
    made.append(tag)
    size = subprocess.run(["docker", "image", "inspect", "-f", "{{.Size}}", tag], capture_output=True, text=True)
    row.size_gb = int(size.stdout.strip() or 0) / 1e9
    row.checks["build"] = "ok"
    return True


# ------------------------------------------------------------------------------------------------ checks inside
def run_in_image(profile_name: str, ckpt_root: Path, command: list[str], log: Path, timeout: float) -> tuple[int, str]:
    """``docker/run_<platform>.sh`` as a user runs it, with CKPT_ROOT (and the other roots) under ``ckpt_root`` and
    host networking (this daemon has no bridge); returns (exit code, output)."""
    platform = PROFILES[profile_name].platform
    assert platform.run_script is not None
    env = os.environ.copy()
    env.update(
        CKPT_ROOT=str(ckpt_root / "ckpt"), MODELS_DIR=str(ckpt_root / "models"), DATA_DIR=str(ckpt_root / "data")
    )
    cmd = ["bash", str(KIT_ROOT / platform.run_script), "--hw", profile_name]
    assert platform.device_access is not None
    if not any(arg.startswith("--network") for arg in platform.device_access.run_args):
        cmd.append("--docker-arg=--network=host")  # docker refuses a second --network (run_npu/run_cuda have one)
    if not has_devices(profile_name):
        cmd.append("--no-devices")  # the run script prints its note
    return run([*cmd, "--", *command], log, timeout=timeout, env=env)


def has_devices(profile_name: str) -> bool:
    """Whether this host can give the image its platform's devices (always, for a platform that has none)."""
    access = PROFILES[profile_name].platform.device_access
    assert access is not None
    if access.node_prefix:
        return bool(device_nodes(access, "/dev"))
    return access.gpus is None or Path("/dev/nvidiactl").exists()  # the NVIDIA driver's control node


def check_doctor(profile_name: str, row: Row, roots: Path, out: Path) -> None:
    rc, text = run_in_image(
        profile_name,
        roots,
        ["retool-doctor", "--only", ("platform," if has_devices(profile_name) else "") + DOCTOR_GROUPS],
        out / "doctor.log",
        600,
    )
    standin = "stand-in" in row.base
    said = "STAND-IN base" in text
    fails = set(re.findall(r"^FAIL\s+(\S+)", text, re.MULTILINE))
    caused = fails & set(STANDIN_DOCTOR_FAILS.get(PROFILES[profile_name].image.base_repo_key, ())) if standin else set()
    clean = rc == 0 or (fails and fails == caused)
    verdict = "ok" if clean and said == standin else f"FAILED (exit {rc}, stand-in said: {said}, FAIL: {sorted(fails)})"
    row.checks["doctor"] = (
        verdict
        + (" (says stand-in)" if said else "")
        + (f" (FAIL the stand-in causes: {', '.join(sorted(caused))})" if caused else "")
    )


def check_probe(profile_name: str, row: Row, roots: Path, out: Path) -> None:
    rc, text = run_in_image(
        profile_name, roots, ["python3", "/opt/retool-kit/docker/lib/image_probe.py"], out / "probe.log", 600
    )
    facts = next((json.loads(line) for line in text.splitlines() if line.startswith('{"sandbox"')), None)
    if rc != 0 or facts is None:
        row.checks["sandbox"] = row.checks["ckpt"] = f"FAILED (exit {rc}, see {out / 'probe.log'})"
        return
    sandbox = facts["sandbox"]
    ran = sandbox.get("stdout", "").strip() == "42"
    row.checks["sandbox"] = f"{'ok' if ran else 'FAILED'} (isolation {sandbox.get('isolation', '?')})"
    ckpt = facts["checkpoints"]
    survived = (roots / "ckpt" / "probe-run" / "written-inside.txt").is_file()
    rule = not ckpt["mounted_problems"] and any("vanish" in p for p in ckpt["ephemeral_problems"])
    row.checks["ckpt"] = "ok" if survived and rule else f"FAILED (survived --rm: {survived}, refusal: {rule})"
    (out / "probe.json").write_text(json.dumps(facts, indent=1))


def check_smoke(profile_name: str, row: Row, roots: Path, out: Path) -> None:
    outputs = "/".join([str(roots / "ckpt"), "smoke"])
    t0 = time.monotonic()
    rc, text = run_in_image(
        profile_name,
        roots,
        ["bash", "/opt/retool-kit/scripts/smoke.sh", "--fast", "--out", outputs],
        out / "smoke.log",
        3600,
    )
    summary = Path(outputs) / "summary.json"
    ok = rc == 0 and summary.is_file() and json.loads(summary.read_text()).get("ok") is True
    row.checks["smoke --fast"] = f"{'ok' if ok else 'FAILED'} ({time.monotonic() - t0:.0f} s)"


def check_two_nodes(
    cpu_row: Row, roots: Path, out: Path, env: dict[str, str], stack: Stack, slots: tuple[int, int] | None = None
) -> Row:
    """docker/two_node.py on the CPU image just built and the smoke's model and data; ``slots``: the head's and the
    worker's Ray CPUs (default: two_node.node_slots of the stack's TaskRunner CPUs)."""
    import two_node

    row = Row("two nodes of " + cpu_row.image, "2 containers on a user-defined docker network")
    smoke = roots / "ckpt" / "smoke"
    if "FAILED" in cpu_row.checks.get("smoke --fast", "FAILED") or not (smoke / "sft" / "hf_merged").is_dir():
        row.checks["two nodes"] = "FAILED (no smoke model and data to train on)"
        return row
    cluster = two_node.Cluster(cpu_row.image, out, roots, slots or two_node.node_slots(stack.verl.task_runner_cpus))
    facts = two_node.run_two_nodes(cluster, smoke, env, say)
    (out / "two-node.json").write_text(json.dumps(facts, indent=1, default=str))
    row.checks = two_node.verdicts(facts)
    return row


def _slots(text: str) -> tuple[int, int]:
    head, _, worker = text.partition(",")
    if not (head.isdigit() and worker.isdigit() and int(head) >= 1 and int(worker) >= 1):
        raise argparse.ArgumentTypeError(f"expected HEAD,WORKER (two counts >= 1), got {text!r}")
    return int(head), int(worker)


def parse_args(argv: list[str]) -> argparse.Namespace:
    with_images = [name for name, profile in PROFILES.items() if profile.image is not None]
    parser = argparse.ArgumentParser(
        prog="scripts/test_images.sh",
        description="Build the kit's images (on stand-in bases where the pinned base cannot be pulled) and run "
        "their checks inside: retool-doctor, the sandbox's isolation, checkpoints under the mounts, the CPU smoke.",
    )
    parser.add_argument("--hw", action="append", choices=with_images, help="profile(s) to build (default: cpu)")
    parser.add_argument("--keep", action="store_true", help="keep the images and stand-ins it made")
    parser.add_argument("--skip-smoke", action="store_true", help="skip `smoke.sh --fast` in the CPU image (~6 min)")
    parser.add_argument(
        "--two-node",
        action="store_true",
        help="also run two containers of the CPU image as a Ray cluster: GRPO with ranks on both, the worker killed "
        "mid-run, restarted, the run resumed (docker/two_node.py, ~15 min; implies --hw cpu)",
    )
    parser.add_argument(
        "--two-node-slots",
        type=_slots,
        metavar="HEAD,WORKER",
        help="override the two nodes' Ray CPU slots (default: 2 each, plus on the head the stack's TaskRunner CPUs: "
        "3,2 on verl 0.6.1, 2,2 on 0.9.1, whose TaskRunner holds none; docs/images.md)",
    )
    parser.add_argument("--out", type=Path, help="logs and outputs (default: a new folder under /var/tmp)")
    add_stack_option(parser)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    stack = stacks.export(stacks.resolve(args.stack))  # the images' stack; the checks inside run on it too
    out = args.out or Path(tempfile.mkdtemp(prefix="kit-images-", dir="/var/tmp"))
    out.mkdir(parents=True, exist_ok=True)
    say(f"logs under {out}")
    ensure_dockerd(out)
    env = daemon_client_path()
    made: list[str] = []
    rows = []
    try:
        wanted = args.hw or ["cpu"]
        for name in wanted + (["cpu"] if args.two_node and "cpu" not in wanted else []):
            row = Row(PROFILES[name].image.kit_tag(stack), ensure_base(name, out, made, env, stack))
            rows.append(row)
            if not build(name, row, out, env, made, stack):
                continue
            roots = Path(tempfile.mkdtemp(prefix=f"roots-{name}-", dir=out))
            check_doctor(name, row, roots, out)
            check_probe(name, row, roots, out)
            if PROFILES[name].platform.name == "cpu" and (not args.skip_smoke or args.two_node):
                check_smoke(name, row, roots, out)
            if name == "cpu" and args.two_node:
                rows.append(check_two_nodes(row, roots, out, env, stack, args.two_node_slots))
    finally:
        print("\n| image | base | build s | size | checks |\n|---|---|---|---|---|")
        print("\n".join(row.line() for row in rows))
        if made and not args.keep:
            shared = [SHARED_STANDIN_ROOT] if image_present(SHARED_STANDIN_ROOT) else []
            subprocess.run(["docker", "rmi", "-f", *reversed(made), *shared], capture_output=True)
            say(f"removed {', '.join(made)}")
    failed = [row.image for row in rows if any("FAILED" in verdict for verdict in row.checks.values())]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
