"""``scripts/test_images.sh --two-node``: two containers of the CPU image as a two-node Ray cluster, for real.

Why: the kit's multi-node path (``scripts/ray_cluster.sh``, the launcher's cluster and sandbox pre-flight, restarts)
was tested inside one network namespace only. Here each node is a container on a user-defined docker network, with
its own address and loopback, started by the kit's own ``docker/run_cpu.sh``:

1. head: ``ray_cluster.sh head --with-sandbox --num-cpus H``; worker: ``ray_cluster.sh worker --address HEAD
   --with-sandbox --num-cpus 2``; ``ray_cluster.sh status --nodes 2`` must say the cluster is ready. H is 2 plus
   the stack's TaskRunner CPUs (:func:`node_slots`: 3 on verl 0.6.1, 2 on 0.9.1);
2. a short GRPO run on the head with ``trainer.nnodes=2`` (one trainer rank and one vLLM server per node: the slot
   counts are what this 23 GB machine holds, and with no spare slot Ray cannot place both ranks on one node), through
   the launcher's pre-flight (every node live, every node reaches its sandbox), under ``--max-restarts 1``;
3. after its second checkpoint the worker container is killed (``docker kill``): the run must end its attempt in
   bounded time and the supervisor wait for the cluster; the worker is started again, the run resumes from its
   newest checkpoint and finishes.

Host side, standard library only (the stack's facts come in as numbers); the images and logs are
test_images.py's.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

KIT_ROOT = Path(__file__).resolve().parents[1]
IMAGE_KIT = "/opt/retool-kit"
ENTRY = ["bash", f"{IMAGE_KIT}/docker/entrypoint.sh"]
CLUSTER = ["bash", f"{IMAGE_KIT}/scripts/ray_cluster.sh"]
STEPS, KILL_AFTER_CKPT = 4, 2
#: Ray CPUs one node's share of the run holds: one trainer rank's bundle and one vLLM server actor
#: (recipes/launch/sizing/ray_cpus.py).
RANK_SHARE = 2
RAY_PROCESS = re.compile(r"\((WorkerDict|vLLMHttpServer) pid=(\d+)(?:, ip=([\d.]+))?\)")

Say = Callable[[str], None]


@dataclass
class Cluster:
    """The two containers and their network, named for this run."""

    tag: str  # the CPU image the harness just built: both nodes run it
    out: Path
    roots: Path
    #: the head's and the worker's Ray CPU slots (--num-cpus): :func:`node_slots` of the image's stack
    slots: tuple[int, int]
    prefix: str = "kit-two-node"

    @property
    def network(self) -> str:
        return f"{self.prefix}-net"

    def name(self, node: str) -> str:
        return f"{self.prefix}-{node}"


def node_slots(task_runner_cpus: int) -> tuple[int, int]:
    """(head, worker) ``--num-cpus``: each node exactly one rank's share, the head also the TaskRunner's CPUs (the
    image's stack's ``VerlFacts.task_runner_cpus``). Exact, because a spare slot lets Ray place both ranks and both
    servers on one node: on verl 0.9.1, whose TaskRunnerV1 holds no CPU, the reference's 3 + 2 put all four on the
    head and its memory ran out. On 0.9.1 2 + 2 still does not force the split (measured: 3 of 6 attempts put both
    ranks on one node): there the vLLM servers hold no CPU and the transfer queue's two actors one each
    (docs/images.md), which these counts do not model yet."""
    return RANK_SHARE + task_runner_cpus, RANK_SHARE


def _docker(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)


def ip_of(container: str) -> str:
    fmt = "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}"
    return _docker("inspect", "-f", fmt, container).stdout.strip()


def start_node(c: Cluster, node: str, slots: int, head_ip: str | None, env: dict[str, str]) -> None:
    """``docker/run_cpu.sh`` detached on the cluster's network, running ``ray_cluster.sh head|worker``, then idle."""
    role = ["head"] if head_ip is None else ["worker", "--address", f"{head_ip}:6379"]
    start = [*CLUSTER, *role, "--hw", "cpu", "--with-sandbox", "--num-cpus", str(slots)]
    script = f"{shlex.join(start)} && exec sleep infinity"
    workspace = c.out / "workspace"  # not the kit checkout: the image's own kit runs
    workspace.mkdir(exist_ok=True)
    cmd = ["bash", str(KIT_ROOT / "docker/run_cpu.sh"), "--hw", "cpu", "--image", c.tag, "--name", c.name(node)]
    cmd += ["--workspace", str(workspace), f"--docker-arg=--network={c.network}", f"--docker-arg=--hostname={node}"]
    cmd += ["--docker-arg=-d", "--", "bash", "-c", script]
    # the recipes' roots mounted from the harness's folder, as test_images.run_in_image does (the run script, the
    # model and data and the checkpoints are under them, and both nodes see them at the same path)
    roots = {"CKPT_ROOT": c.roots / "ckpt", "MODELS_DIR": c.roots / "models", "DATA_DIR": c.roots / "data"}
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=120, env={**env, **{k: str(v) for k, v in roots.items()}}
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{node} did not start: {proc.stderr.strip()[-400:]}")
    wanted = "head up" if head_ip is None else "Ray runtime started"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        logs = _docker("logs", c.name(node))
        if wanted in logs.stdout + logs.stderr:
            return
        if _docker("inspect", c.name(node)).returncode != 0:
            raise RuntimeError(f"{node} exited: {(logs.stdout + logs.stderr).strip()[-400:]}")
        time.sleep(2)
    raise RuntimeError(f"{node}: no {wanted!r} in its log after 180 s")


def exec_in(c: Cluster, node: str, argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    return _docker("exec", c.name(node), *ENTRY, *argv, timeout=timeout)


def rl_script(c: Cluster, smoke: Path, run: Path, head_ip: str) -> Path:
    """The GRPO run as a script on the mounted checkpoint root (both nodes see the roots at the same path)."""
    env = {
        "MODEL_PATH": smoke / "sft" / "hf_merged",
        "TRAIN_FILE": smoke / "data" / "dapo_math.parquet",
        "VAL_FILE": smoke / "data" / "smoke_val.parquet",
        "CKPT_DIR": run / "ckpt",
        "TENSORBOARD_DIR": run / "tensorboard",
        "RETOOL_SANDBOX_URL": "http://127.0.0.1:8080/run_code",  # each node's own sandbox (--with-sandbox)
        "RAY_ADDRESS": f"{head_ip}:6379",
        "KIT_RESTART_NODE_WAIT_S": "300",
    }
    overrides = [
        "data.train_max_samples=-1",
        "data.max_response_length=96",
        "trainer.val_before_train=False",
        "trainer.logger=['console','tensorboard']",
        "trainer.nnodes=2",
        "trainer.n_gpus_per_node=1",
        f"trainer.total_training_steps={STEPS}",
        "trainer.save_freq=1",
        "trainer.test_freq=-1",
    ]
    script = run / "rl.sh"
    exports = "".join(f"export {k}={shlex.quote(str(v))}\n" for k, v in env.items())
    launch = [f"{IMAGE_KIT}/recipes/run_qwen3_4b_dapo_npu.sh", "--hw", "cpu", "--scale", "smoke", "--max-restarts"]
    script.write_text(f"{exports}exec bash {shlex.join([*launch, '1', *overrides])}\n")
    return script


def checkpoint_step(ckpt: Path) -> int:
    tracker = ckpt / "latest_checkpointed_iteration.txt"
    try:
        return int(tracker.read_text().strip())
    except (OSError, ValueError):
        return 0


def placement(log_text: str, worker_ip: str) -> dict[str, set[str]]:
    """Where Ray ran the trainer ranks and vLLM servers: Ray prefixes a remote node's lines with its ip, the
    driver's own node's without."""
    where: dict[str, set[str]] = {}
    for kind, _pid, ip in RAY_PROCESS.findall(log_text):
        where.setdefault(kind, set()).add("worker" if ip == worker_ip else "head")
    return where


def kill_and_resume(c: Cluster, run: Path, rl: subprocess.Popen, env: dict[str, str], say: Say) -> dict[str, object]:
    """Kill the worker after checkpoint KILL_AFTER_CKPT; time the attempt's end; start the worker again."""
    ckpt, log = run / "ckpt", run / "rl.log"
    while checkpoint_step(ckpt) < KILL_AFTER_CKPT and rl.poll() is None:
        time.sleep(2)
    if rl.poll() is not None:
        return {"killed": False}
    worker_ip = ip_of(c.name("worker"))
    # only what the run writes after the kill: a restart spent before it (measured: Ray's memory monitor killing a
    # rank on this 23 GB machine) already left "restart 1/1" in the log, which read as the kill's end at once
    seen = len(log.read_text())
    _docker("kill", c.name("worker"))
    killed = time.monotonic()
    say(f"two-node: killed the worker container after global_step_{checkpoint_step(ckpt)}")
    while not any(line in log.read_text()[seen:] for line in ("restart: waiting up to", "restart 1/1")):
        if rl.poll() is not None or time.monotonic() - killed > 600:
            return {"killed": True, "failed_in_s": None, "worker_ip": worker_ip}
        time.sleep(1)
    failed_in = time.monotonic() - killed
    say(f"two-node: the attempt ended {failed_in:.0f} s after the kill; starting the worker again")
    _docker("rm", "-f", c.name("worker"))  # --rm may still be removing it
    start_node(c, "worker", c.slots[1], ip_of(c.name("head")), env)
    return {"killed": True, "failed_in_s": failed_in, "worker_ip": worker_ip}


def run_two_nodes(c: Cluster, smoke: Path, env: dict[str, str], say: Say) -> dict[str, object]:
    """The whole scenario; returns its facts (the table's checks and the closing note's log lines)."""
    facts: dict[str, object] = {}
    _docker("network", "create", c.network)
    try:
        start_node(c, "head", c.slots[0], None, env)
        head_ip = ip_of(c.name("head"))
        start_node(c, "worker", c.slots[1], head_ip, env)
        status = exec_in(c, "head", [*CLUSTER, "status", "--hw", "cpu", "--nodes", "2"], 120)
        facts["status"] = (status.stdout + status.stderr).strip().splitlines()[-3:]
        facts["cluster_ready"] = status.returncode == 0 and "cluster ready: 2 node(s)" in status.stdout
        if not facts["cluster_ready"]:
            return facts
        run = c.roots / "ckpt" / "two-node"
        run.mkdir(parents=True, exist_ok=True)
        script = rl_script(c, smoke, run, head_ip)
        say(f"two-node: GRPO over both containers ({STEPS} steps); log {run / 'rl.log'}")
        t0 = time.monotonic()
        with (run / "rl.log").open("w") as sink:
            rl = subprocess.Popen(
                ["docker", "exec", c.name("head"), *ENTRY, "bash", str(script)], stdout=sink, stderr=subprocess.STDOUT
            )
            facts.update(kill_and_resume(c, run, rl, env, say))
            facts["rc"] = rl.wait(timeout=1800)
        facts["seconds"] = time.monotonic() - t0
        text = (run / "rl.log").read_text()
        facts["preflight"] = "Ray cluster: 2 live nodes, each reaches the sandbox" in text
        facts["placement"] = {k: sorted(v) for k, v in placement(text, str(facts.get("worker_ip", ""))).items()}
        facts["lines"] = [line for line in text.splitlines() if line.startswith(("restart", "run_recipe: run"))]
        facts["last_step"] = checkpoint_step(run / "ckpt")
    finally:
        _docker("rm", "-f", c.name("worker"), c.name("head"))
        _docker("network", "rm", c.network)
    return facts


def verdicts(facts: dict[str, object]) -> dict[str, str]:
    """The table's checks from :func:`run_two_nodes`'s facts."""
    out = {"cluster": "ok" if facts.get("cluster_ready") else f"FAILED ({facts.get('status')})"}
    if not facts.get("cluster_ready"):
        return out
    out["preflight"] = "ok" if facts.get("preflight") else "FAILED"
    placed = facts.get("placement") or {}
    both = all(placed.get(kind) == ["head", "worker"] for kind in ("WorkerDict", "vLLMHttpServer"))
    out["ranks on both"] = "ok" if both else f"FAILED ({placed})"
    failed_in = facts.get("failed_in_s")
    out["kill"] = f"ok (attempt ended {failed_in:.0f} s after)" if isinstance(failed_in, float) else "FAILED"
    resumed = any("resuming from global_step_" in str(line) for line in facts.get("lines") or [])
    done = facts.get("rc") == 0 and facts.get("last_step") == STEPS and resumed
    out["resume"] = f"ok (step {STEPS}, {facts.get('seconds', 0):.0f} s)" if done else f"FAILED (rc {facts.get('rc')})"
    return out
