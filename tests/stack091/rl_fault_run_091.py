"""One supervised verl 0.9.1 GRPO run on CPU with three faults injected, for tests/stack091/test_rl_faults_091.py.

The run: ``python -m verl.trainer.main_ppo`` (0.9.1's V1 trainer, ``trainer_mode: sync``), one FSDP2 trainer rank and
one vLLM CPU server (platforms/verl_selectors.py: two of each do not fit 24 GB), the kit's CPU platform overrides
and environment, 6 prompts, 2 a step (3 steps an epoch), 4 steps, a checkpoint every step, under the launcher's
restart supervisor (recipes/launch/supervision/restart.py ``supervise``, ``--max-restarts 3``: one restart a fault).
Faults, in this order because (h) hangs for ever on verl 0.9.1 without the weight-transfer timeouts:

* (f) once the tracker names checkpoint 1 (and step 1 is logged and dumped): SIGKILL of the FSDP worker actor;
* (a) once the same holds for checkpoint 2: SIGKILL of the ``main_ppo`` driver;
* (h) in the weight update that follows checkpoint 3 (the one that carries step 3's weights to the rollout): the
  vLLM worker receiving the weights SIGKILLs itself after the first bucket (tests/stack091/kit_weight_fault_091.py,
  armed through ``VERL_USE_EXTERNAL_MODULES``).

Each one must end the attempt (non-zero), the supervisor kills its leftovers and resumes with
``trainer.resume_mode=auto`` from the newest checkpoint; ``trainer.rollout_data_dir`` dumps each step's prompts
(``<step>.jsonl``, the ground truths name them) for the data-order check. Every process of the run inherits
``KIT_FAULT_RUN=<run dir>``, which is how the monitor finds (only) its own processes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from kit_testing import REPO_ROOT, interpreter_stack, kit_env

from platforms import CPU

HOOK_MODULE = "kit_weight_fault_091"
HOOK_DIR = Path(__file__).resolve().parent
#: seed 3: epoch 1's first batch (step 4) is none of epoch 0's, so a resume that replays epoch 0 shows (seed 7's
#: step 4 repeats step 1)
PROMPTS, BATCH, STEPS, SEED = 6, 2, 4, 3
MAX_RESTARTS = 3
#: a dead worker or driver -> the attempt's driver gone; Ray reports a dead actor at once (0.6.1's run: < 10 s)
DEATH_BOUND_S = 120.0
#: patch 0010's bound on each ack of a bucketed weight transfer (its default, 300 s, shortened for the test)
ACK_TIMEOUT_KEY = "actor_rollout_ref.rollout.checkpoint_engine.update_weights_ack_timeout_seconds"
ACK_TIMEOUT_S = 60
#: the vLLM worker killed mid-transfer -> the driver gone: that timeout plus the failed step's teardown; a longer
#: wait (to show an unpatched run hangs) through KIT_FAULTS_HANG_WAIT_S
WEIGHT_BOUND_S = float(os.environ.get("KIT_FAULTS_HANG_WAIT_S", ACK_TIMEOUT_S + 150))

REWARD_PY = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """Response-dependent, so GRPO groups get advantages and the actor really updates."""
    return (sum(map(ord, solution_str)) % 97) / 97
'''


@dataclass
class Fault:
    """One process killed in the supervised run, and what followed (seconds on the monitor's clock)."""

    after_step: int  # the checkpoint the tracker names when it is injected
    target: str  # "worker" (FSDP WorkerDict actor), "driver" (main_ppo), "weights" (vLLM worker, by the hook)
    victim: int = 0
    driver: int = 0
    killed_at: float = 0.0
    driver_exit_s: float | None = None  # kill -> the attempt's driver process gone
    resumed_s: float | None = None  # kill -> the restarted attempt's first step done (tracker names it)
    hung: bool = False  # the driver outlived the bound


def ground_truth(i: int) -> str:
    return str(4 * i + 3)


def write_assets(root: Path) -> dict[str, Path]:
    import pandas as pd

    from recipes.smoke.tiny_model import build_tiny_qwen

    rows = [
        {
            "data_source": "kit_arith",
            "prompt": [{"role": "user", "content": f"What is {i + 2} + {3 * i + 1}?"}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": ground_truth(i)},
            "extra_info": {"index": i, "split": "train"},
        }
        for i in range(PROMPTS)
    ]
    pd.DataFrame(rows).to_parquet(root / "prompts.parquet")
    (root / "reward.py").write_text(REWARD_PY)
    # the stack's tiny width: vLLM 0.23's CPU attention refuses head_dim 16 (tests/stack091/test_cpu_runtime_091.py)
    hidden = interpreter_stack().tiny_hidden_size
    model = build_tiny_qwen(REPO_ROOT / "build" / f"tiny-qwen3-h{hidden}", hidden_size=hidden)
    return {"data": root / "prompts.parquet", "reward": root / "reward.py", "model": model}


def overrides(assets: dict[str, Path], ckpt: Path, dump: Path) -> list[str]:
    stack = interpreter_stack()
    reward_key = stack.verl.reward_key  # 0.9.1 reads reward.custom_reward_function
    return [
        *CPU.verl_overrides("rl", stack),  # device, FSDP2, fp32, vLLM CPU, one rank (trainer.n_gpus_per_node=1)
        "algorithm.adv_estimator=grpo",
        "algorithm.use_kl_in_reward=False",
        f"data.train_files={assets['data']}",
        f"data.val_files={assets['data']}",
        f"data.train_batch_size={BATCH}",
        "data.dataloader_num_workers=0",
        "data.max_prompt_length=64",
        "data.max_response_length=8",
        f"data.seed={SEED}",
        f"actor_rollout_ref.model.path={assets['model']}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={BATCH}",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.actor.optim.lr=1e-3",
        "actor_rollout_ref.actor.use_kl_loss=False",
        "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.rollout.agent.num_workers=1",
        f"{reward_key}.path={assets['reward']}",
        f"{reward_key}.name=compute_score",
        "trainer.nnodes=1",
        "trainer.logger=['console']",
        "trainer.test_freq=-1",
        "trainer.val_before_train=False",
        "trainer.save_freq=1",
        f"trainer.total_training_steps={STEPS}",
        f"trainer.default_local_dir={ckpt}",
        f"trainer.rollout_data_dir={dump}",
        "trainer.project_name=kit-rl-faults-091",
        "trainer.experiment_name=tiny",
    ]


def weight_timeout_overrides(verl_package: Path) -> list[str]:
    """The short ack timeout where the verl that runs has patch 0010's key (an unpatched one refuses the key)."""
    rollout_yaml = verl_package / "trainer" / "config" / "rollout" / "rollout.yaml"
    patched = ACK_TIMEOUT_KEY.rsplit(".", 1)[1] in rollout_yaml.read_text()
    return [f"{ACK_TIMEOUT_KEY}={ACK_TIMEOUT_S}"] if patched else []


def run_env(run_dir: Path, ckpt: Path, weight_fault_after: int, verl_clone: Path | None) -> dict[str, str]:
    """The kit's environment for an RL trainer on the cpu platform (what the launcher gives it: platforms/cpu.py
    ``env``), the fault hook named in VERL_USE_EXTERNAL_MODULES (kept after the kit's own) and armed, and a verl
    clone first on PYTHONPATH when given (the Ray workers inherit it from the local Ray head the driver starts)."""
    env = kit_env(PYTHONUNBUFFERED="1", HYDRA_FULL_ERROR="1", KIT_FAULT_RUN=str(run_dir))
    env["VERL_USE_EXTERNAL_MODULES"] = HOOK_MODULE
    env["KIT_FAULT_WEIGHT_KILL"] = f"{ckpt}|{weight_fault_after}"
    for var in CPU.env("rl", interpreter_stack(), env):
        env[var.name] = var.value
    paths = [str(verl_clone)] if verl_clone else []
    env["PYTHONPATH"] = os.pathsep.join([*paths, env["PYTHONPATH"], str(HOOK_DIR)])
    return env


def expected_order(total: int = STEPS) -> list[list[str]]:
    """The ground truths each step of an uninterrupted run serves: verl 0.9.1's own train sampler and loader
    (``create_rl_sampler``, ``trainer/ppo/utils.py:140``; ``StatefulDataLoader``, ``trainer/ppo/v1/trainer_base.py:
    741-748``; a new pass at each epoch end, ``:1466-1476``) iterated without a stop, over the 6 row indices."""
    from omegaconf import OmegaConf
    from torchdata.stateful_dataloader import StatefulDataLoader
    from verl.trainer.ppo.utils import create_rl_sampler

    rows = list(range(PROMPTS))
    sampler = create_rl_sampler(OmegaConf.create({"shuffle": True, "seed": SEED}), rows)
    loader = StatefulDataLoader(rows, batch_size=BATCH, drop_last=True, sampler=sampler, collate_fn=list)
    order: list[list[str]] = []
    while len(order) < total:
        for batch in loader:
            order.append(sorted(ground_truth(int(i)) for i in batch))
            if len(order) == total:
                break
    return order


def served(dump: Path) -> dict[int, list[str]]:
    """{step: the ground truths it served, each once, sorted} from ``trainer.rollout_data_dir``'s dumps."""
    out = {}
    for path in dump.glob("*.jsonl"):
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        out[int(path.stem)] = sorted({str(row["gts"]) for row in rows})
    return out


def processes_of_run(marker: str) -> list[tuple[int, list[bytes]]]:
    """(pid, argv) of every live process started for this run (they inherit ``KIT_FAULT_RUN=marker``)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            environ = (proc / "environ").read_bytes().split(b"\0")
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"KIT_FAULT_RUN={marker}".encode() in environ and alive(int(proc.name)):
            found.append((int(proc.name), cmdline))
    return found


def find_driver(marker: str) -> int:
    drivers = [pid for pid, argv in processes_of_run(marker) if b"verl.trainer.main_ppo" in argv]
    assert len(drivers) == 1, f"{len(drivers)} main_ppo drivers: {processes_of_run(marker)}"
    return drivers[0]


def find_worker(marker: str) -> int:
    workers = [pid for pid, argv in processes_of_run(marker) if argv and b"WorkerDict" in argv[0]]
    assert workers, f"no FSDP WorkerDict actor among {processes_of_run(marker)}"
    return workers[-1]


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except (OSError, IndexError):
        return False


def step_logged(text: str, step: int) -> bool:
    from recipes.launch.supervision.restart import STEP_LINE

    return any(int(m.group(1)) == step for m in map(STEP_LINE.search, text.splitlines()) if m)


@dataclass
class Run:
    """The supervised run's outcome: its faults, the supervisor's exit status (None: stopped by the monitor)."""

    faults: list[Fault]
    returncode: int | None
    wall_s: float
    log: Path


def _inject(fault: Fault, run_dir: Path) -> None:
    """SIGKILL the FSDP worker actor or the driver of the running attempt (fault (f) or (a))."""
    marker = str(run_dir)
    fault.driver = find_driver(marker)
    fault.victim = fault.driver if fault.target == "driver" else find_worker(marker)
    os.kill(fault.victim, signal.SIGKILL)
    fault.killed_at = time.time()


def _weight_fault_fired(fault: Fault, ckpt: Path, run_dir: Path) -> bool:
    """Whether the hook killed the vLLM worker; records its pid, its time and the driver then running."""
    from kit_weight_fault_091 import marker

    try:
        record = json.loads(marker(ckpt).read_text())
    except (OSError, ValueError):
        return False
    fault.victim, fault.killed_at = record["pid"], record["time"]
    drivers = [pid for pid, argv in processes_of_run(str(run_dir)) if b"verl.trainer.main_ppo" in argv]
    fault.driver = drivers[0] if len(drivers) == 1 else 0  # 0: already gone (alive(0) is False)
    return True


def _observe(faults: list[Fault], named: str, now: float) -> Fault | None:
    """Update each injected fault's clocks (its driver gone; the tracker naming the restarted attempt's first step,
    which that step writes before it logs it); the fault whose driver outlived its bound, if any."""
    for fault in faults:
        if fault.driver_exit_s is None and not alive(fault.driver):
            fault.driver_exit_s = now - fault.killed_at
        if fault.resumed_s is None and named == str(fault.after_step + 1):
            fault.resumed_s = now - fault.killed_at
        bound = WEIGHT_BOUND_S if fault.target == "weights" else DEATH_BOUND_S
        if fault.driver_exit_s is None and now - fault.killed_at > bound:
            fault.hung = True
            return fault
    return None


def _stop(proc: subprocess.Popen, run_dir: Path) -> None:
    """End a run the monitor gives up on: SIGTERM to the supervisor (it forwards it to the attempt's group and
    restarts nothing), then SIGKILL of whatever of this run is left (found by its KIT_FAULT_RUN marker)."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    for pid, _ in processes_of_run(str(run_dir)):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def supervise_with_faults(run_dir: Path, command: list[str], env: dict[str, str], timeout: float = 1500) -> Run:
    """``command`` under restart.supervise (--max-restarts 3) with faults (f), (a) and (h) (see the module's
    docstring); stops early when a killed process's driver outlives its bound (fault (h) unpatched: the sender waits
    for an ack that never comes), or at ``timeout``."""
    ckpt, dump, log = run_dir / "ckpt", run_dir / "dump", run_dir / "run.log"
    script = (
        "import sys, os; from pathlib import Path; from recipes.launch.supervision import restart; "
        f"sys.exit(restart.supervise({command!r}, os.environ, Path({str(ckpt)!r}), {MAX_RESTARTS}))"
    )
    pending = [Fault(1, "worker"), Fault(2, "driver")]
    weights, faults = Fault(STEPS - 1, "weights"), []
    t0, tracker, hung = time.time(), ckpt / "latest_checkpointed_iteration.txt", None
    with open(log, "w") as f:
        proc = subprocess.Popen([sys.executable, "-c", script], env=env, cwd=REPO_ROOT, stdout=f, stderr=f)
        while proc.poll() is None and time.time() - t0 < timeout and hung is None:
            time.sleep(0.5)
            text, named = log.read_text(errors="replace"), tracker.read_text().strip() if tracker.exists() else ""
            if weights not in faults and _weight_fault_fired(weights, ckpt, run_dir):
                faults.append(weights)
            if pending and named == str(pending[0].after_step) and step_logged(text, pending[0].after_step):
                if (dump / f"{pending[0].after_step}.jsonl").is_file():  # written after the step line's metrics
                    _inject(pending[0], run_dir)
                    faults.append(pending.pop(0))
            hung = _observe(faults, named, time.time())
        if proc.poll() is None:
            _stop(proc, run_dir)
        elif hung is None:  # the last checkpoint may be named between the last tick and the exit
            _observe(faults, tracker.read_text().strip() if tracker.exists() else "", time.time())
    return Run(faults, None if hung or proc.returncode is None else proc.returncode, time.time() - t0, log)
