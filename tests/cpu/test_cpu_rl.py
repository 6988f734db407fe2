"""End to end on CPU: ``python -m verl.trainer.main_ppo`` GRPO, sync with the ``hf`` rollout and async through
verl's vLLM async server (vLLM's CPU build), the engine NPU and GPU runs use.

(a) sync: ``rollout.name=hf rollout.mode=sync``, 2 FSDP2 worker processes (``trainer.n_gpus_per_node=2`` counts
    processes on CPU), KL loss (so a ref model is built), 3 steps under the launcher's restart supervisor
    (``--max-restarts 2``, recipes/launch/supervision/restart.py), two faults injected (issue 20): once checkpoint 1
    is complete an FSDP worker actor is SIGKILLed, and the driver must exit non-zero within a bound naming the dead
    actor (fault (f)); once checkpoint 2 is complete the driver itself is SIGKILLed (fault (a)). Each time the
    supervisor cleans up and relaunches with ``trainer.resume_mode=auto``, which resumes from the newest checkpoint;
    the run ends at step 3. The hf rollout stays the fallback where vLLM cannot install.
(b) async: ``rollout.mode=async`` with the agent loop (``tool_agent``, hermes format, a native tool), remove-padding
    and rollout log-probs, 2 steps, the rollout engine the cpu platform picks (vLLM; 2 replicas, one per rank). A
    random tiny model never emits a tool call, so tool execution itself is not exercised here (only the
    ToolAgentLoop prompt/response path with tools in the prompt; the smoke run executes real calls).
(c) weight sync, proven: run (b) again with the sync broken by a sabotage switch (``recipes.smoke.sabotage``: only
    the first weight update reaches vLLM) and compare ``training/rollout_probs_diff_mean`` at step 2 (vLLM's log-probs
    of its samples against the actor's recomputation). The model is the tiny Qwen3 with a 0.3 init range, whose
    outputs move when its weights do; on the default near-uniform one both cases measure ~1e-6.
(b) and (c) are opt-in (``-m covered_e2e``, tests/conftest.py): the default run's main job proves the async tool
    agent loop through vLLM, rollout traces and the weight sync on a real model (tests/smoke/test_learning_run.py).
(d) from checkpoint to score: run (a)'s last checkpoint merged by scripts/rl_to_hf.sh and scored by
    scripts/eval_model.sh (validation only through the launcher, the kit's sandbox, retool-eval).

Metrics are read from the console logger's ``step:N - key:value - ...`` lines. Needs the patched verl (Ray CPU
bundles, gloo, no ref offload on CPU, the torch.cpu wrapper, the gloo-safe all-gather, CPU pad/unpad, the hf rollout).
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from kit_cpu_ppo import common_overrides, ppo_env, run_ppo
from kit_testing import REPO_ROOT, interpreter_stack, kit_env, run_kit_script, step_metrics, tiny_model_dir
from omegaconf import OmegaConf

from platforms import CPU
from recipes.launch.supervision import trace
from recipes.retool.schema import TOOL_SCHEMA
from recipes.smoke.sabotage import WEIGHT_SYNC

pytestmark = pytest.mark.slow

REWARD_PY = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """Deterministic but response-dependent, so GRPO groups get non-zero advantages and the actor really updates."""
    if ground_truth in solution_str:
        return 1.0
    return (sum(map(ord, solution_str)) % 97) / 97
'''

# Imported by the agent-loop Ray workers by its dotted name: the file lives in a directory put on PYTHONPATH.
TOOL_PY = '''
from verl.tools.base_tool import BaseTool
from verl.tools.schemas import ToolResponse


class CalcTool(BaseTool):
    """Evaluates an arithmetic expression (stands in for ReTool's sandboxed code interpreter)."""

    async def execute(self, instance_id, parameters, **kwargs):
        try:
            text = str(eval(str(parameters.get("code", "")), {"__builtins__": {}}, {}))
        except Exception as e:
            text = f"error: {e}"
        return ToolResponse(text=text), 0.0, {}
'''


@pytest.fixture(scope="module")
def assets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    import pandas as pd
    import yaml

    root = tmp_path_factory.mktemp("cpu-rl")
    rows = []
    for i in range(8):
        a, b = i + 2, 3 * i + 1
        rows.append(
            {
                "data_source": "kit_arith",
                "prompt": [{"role": "user", "content": f"What is {a} + {b}? Put the answer in \\boxed{{}}."}],
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": str(a + b)},
                "extra_info": {"index": i, "split": "train"},
                "agent_name": "tool_agent",
            }
        )
    pd.DataFrame(rows).to_parquet(root / "rl.parquet")
    (root / "reward.py").write_text(REWARD_PY)
    pkg = root / "pythonpath"
    pkg.mkdir()
    (pkg / "kit_cpu_calc_tool.py").write_text(TOOL_PY)
    tools = {
        "tools": [
            {
                "class_name": "kit_cpu_calc_tool.CalcTool",
                "config": {"type": "native"},
                "tool_schema": TOOL_SCHEMA,
            }
        ]
    }
    (root / "tools.yaml").write_text(yaml.safe_dump(tools))
    return {
        "root": root,
        "data": root / "rl.parquet",
        "reward": root / "reward.py",
        "tools": root / "tools.yaml",
        "pythonpath": pkg,
        "model": tiny_model_dir(),
    }


def _check_steps(log: Path, expected: list[int]) -> dict[int, dict[str, float]]:
    text = log.read_text()
    steps = step_metrics(text)
    assert sorted(steps) == expected, f"logged steps {sorted(steps)}, expected {expected}:\n{text[-4000:]}"
    for step, metrics in steps.items():
        bad = {k: v for k, v in metrics.items() if not math.isfinite(v)}
        assert not bad, f"step {step}: non-finite metrics {bad}"
        for key in ("actor/pg_loss", "actor/grad_norm", "critic/score/mean", "response_length/mean", "timing_s/step"):
            assert key in metrics, f"step {step}: {key} missing"
    return steps


def _timing(steps: dict[int, dict[str, float]]) -> str:
    keys = ("gen", "old_log_prob", "ref", "update_actor", "step")
    return "; ".join(
        f"step {s}: " + ", ".join(f"{k} {m[f'timing_s/{k}']:.1f}" for k in keys if f"timing_s/{k}" in m)
        for s, m in sorted(steps.items())
    )


@pytest.fixture(scope="module")
def sync_run(assets: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Run (a): {"ckpt", "log", "faults"}; its checkpoints are also the RL model the export test merges."""
    root = tmp_path_factory.mktemp("sync")
    ckpt = root / "ckpt"
    overrides = [
        *common_overrides(assets, ckpt),
        "data.max_prompt_length=64",
        "data.max_response_length=32",
        "actor_rollout_ref.rollout.name=hf",
        "actor_rollout_ref.rollout.mode=sync",
        "actor_rollout_ref.actor.use_kl_loss=True",
        "actor_rollout_ref.actor.kl_loss_coef=0.001",
        "trainer.save_freq=1",
        # validation (greedy hf generation of the 8 prompts) at step 2 and at the last step of the resumed run
        "trainer.test_freq=2",
    ]

    # one supervised run of 3 steps (--max-restarts 2): an FSDP worker is SIGKILLed once checkpoint 1 is complete,
    # then the driver once checkpoint 2 is
    log = root / "sync.log"
    faults = _supervise_ppo([*overrides, "trainer.total_training_steps=3"], log, assets["pythonpath"], ckpt)
    return {"ckpt": ckpt, "log": log, "faults": faults}


def test_sync_grpo_survives_a_killed_worker_and_a_killed_driver(sync_run: dict) -> None:
    ckpt, log, faults = sync_run["ckpt"], sync_run["log"], sync_run["faults"]
    text = log.read_text()
    worker_fault, driver_fault = faults
    # fault (f): the dead worker ends the driver with an error naming the actor, within the bound
    assert worker_fault.driver_exit_s is not None and worker_fault.driver_exit_s < WORKER_DEATH_BOUND_S, (
        f"the driver was still running {WORKER_DEATH_BOUND_S} s after its worker was killed:\n{text[-4000:]}"
    )
    assert "ActorDiedError" in text and "WorkerDict" in text, text[-4000:]
    assert "restart 1/2: trainer exited with status 1" in text and "resuming from global_step_1" in text, text[-4000:]
    # fault (a): the driver itself killed after checkpoint 2
    assert "restart 2/2: trainer exited with status -9" in text and "resuming from global_step_2" in text, text[-4000:]
    for step in (1, 2):
        assert f"Resuming from {ckpt / f'global_step_{step}'}" in text, text[-4000:]
    steps = _check_steps(log, [1, 2, 3])
    assert any(m["actor/grad_norm"] > 0 for m in steps.values()), "the actor never got a gradient"
    assert any(k.startswith("val-core/") for k in steps[3]), f"no validation at the last step: {steps[3]}"
    print(
        f"\n[cpu-rl] sync run, worker killed after step 1 (driver out in {worker_fault.driver_exit_s:.1f} s, "
        f"checkpoint 2 written {worker_fault.recovered_s:.1f} s after the kill), driver killed after step 2 "
        f"(checkpoint 3 {driver_fault.recovered_s:.1f} s after): wall {worker_fault.wall_s:.1f}s; {_timing(steps)}"
    )
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "3"
    for rank in (0, 1):
        assert (ckpt / "global_step_3" / "actor" / f"model_world_size_2_rank_{rank}.pt").is_file()
    # the supervisor cleaned up each dead attempt: nothing of its process group (driver, local Ray head) is left
    for fault in faults:
        with pytest.raises(ProcessLookupError):
            os.killpg(fault.driver, 0)


def test_rl_checkpoint_merges_and_scores(sync_run: dict, tmp_path: Path) -> None:
    """(d) From RL checkpoint to score (issue 33): run (a)'s newest checkpoint (2 ranks, FSDP2) merged into a
    Hugging Face folder by scripts/rl_to_hf.sh, then scored by scripts/eval_model.sh: the RL recipe's validation
    only, through the launcher (cpu profile, smoke sizes: 2 AIME prompts x 2 samples), with the kit's sandbox and
    the platform's rollout engine (vLLM CPU), and retool-eval's report."""
    from recipes.smoke.sandbox_service import SandboxService

    ckpt, t0 = sync_run["ckpt"], time.perf_counter()
    env = kit_env(KIT_PYTHON=sys.executable, CKPT_ROOT=str(tmp_path / "roots"))
    merged = run_kit_script("rl_to_hf.sh", ["--hw", "cpu", "--ckpt-dir", str(ckpt)], env, 300)
    target = ckpt / "hf_step_3"  # the tracker's step: the newest complete checkpoint
    assert merged.returncode == 0 and f"merged: {target}" in merged.stdout, merged.stdout[-3000:] + merged.stderr
    assert (target / "model.safetensors").is_file() and (target / "tokenizer_config.json").is_file()
    merge_s = time.perf_counter() - t0

    val = tmp_path / "aime_2025.parquet"
    prepare = [sys.executable, "-m", "recipes.retool.prepare", "val", "--output", str(val), "--input"]
    subprocess.run([*prepare, str(REPO_ROOT / "recipes" / "smoke" / "data" / "aime_2025.jsonl")], env=env, check=True)
    sandbox = SandboxService(tmp_path / "sandbox.log", tmp_path / "sandbox.pid", env)
    sandbox.start()
    try:
        # the val file doubles as the train file: main_ppo builds the train loader even for val_only
        env.update(VAL_FILE=str(val), TRAIN_FILE=str(val), RETOOL_SANDBOX_URL=f"{sandbox.url}/run_code")
        args = ["--hw", "cpu", "--model", str(target), "--name", "rl", "trainer.n_gpus_per_node=1"]  # one vLLM replica
        scored = run_kit_script("eval_model.sh", args, env, 600)
    finally:
        sandbox.stop()
    out = scored.stdout + scored.stderr
    folder = tmp_path / "roots" / "eval" / "rl"
    assert scored.returncode == 0, out[-6000:]
    if CPU.rollout_engine(interpreter_stack()).name == "vllm":
        assert "vLLMHttpServer" in out, "the platform's rollout engine is vLLM, but no vLLM server ran"
    report = json.loads((folder / "eval.json").read_text())
    assert report["samples"] == 4 and report["files"] == [str(folder / "val_generations" / "0.jsonl")], report
    summary = [line for line in scored.stdout.splitlines() if line.startswith("rl: aime_2025: mean@2 ")]
    assert summary and scored.stdout.splitlines()[-1].startswith(f"report: {folder / 'eval.md'}"), out[-3000:]
    print(f"\n[cpu-rl] export {merge_s:.1f}s, eval {time.perf_counter() - t0 - merge_s:.1f}s: {summary[0]}")


WORKER_DEATH_BOUND_S = 90  # kill of an FSDP worker -> the driver process is gone (Ray reports the actor dead at once)


@dataclass
class Fault:
    """One process killed during a supervised run: which driver ran then, and how long it outlived the kill."""

    after_step: int
    target: str  # "worker": an FSDP worker actor (WorkerDict); "driver": main_ppo itself
    driver: int = 0
    killed_at: float = 0.0
    driver_exit_s: float | None = None
    recovered_s: float | None = None  # kill -> the resumed attempt's next checkpoint named by the tracker
    wall_s: float = 0.0


def _processes_of_run(marker: str) -> list[tuple[int, list[bytes]]]:
    """(pid, argv) of every process started for this run (they inherit ``KIT_FAULT_RUN=marker``)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            environ = (proc / "environ").read_bytes().split(b"\0")
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError):
            continue
        if f"KIT_FAULT_RUN={marker}".encode() in environ:
            found.append((int(proc.name), cmdline))
    return found


def _victim(marker: str, target: str) -> tuple[int, int]:
    """(pid to kill, driver pid): the run's main_ppo driver, or one of its FSDP worker actors."""
    procs = _processes_of_run(marker)
    drivers = [pid for pid, argv in procs if b"verl.trainer.main_ppo" in argv]
    workers = [pid for pid, argv in procs if argv and argv[0].startswith(b"ray::WorkerDict")]
    assert len(drivers) == 1 and workers, f"driver {drivers}, workers {workers} in {procs}"
    return (drivers[0] if target == "driver" else workers[-1]), drivers[0]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def _step_logged(log: Path, step: int) -> bool:
    """Whether the trainer has printed step ``step``'s metrics. verl saves a step's checkpoint before it logs the
    step (build/verl/verl/trainer/ppo/ray_trainer.py:1452 save, :1491 logger.log), so a kill as soon as the tracker
    names the step may or may not fall before that line: waiting for both makes the logged steps deterministic."""
    return re.search(rf"\bstep:{step} - ", log.read_text(errors="replace")) is not None


def _supervise_ppo(overrides: list[str], log: Path, pythonpath: Path, ckpt: Path, timeout: float = 600) -> list[Fault]:
    """The trainer under the launcher's supervisor (``--max-restarts 2``); an FSDP worker is SIGKILLed once the
    tracker names step 1 and step 1 is logged, the driver once the same holds for step 2. Returns the two faults
    as they happened."""
    env = ppo_env(pythonpath, KIT_FAULT_RUN=str(ckpt))
    command = [sys.executable, "-m", "verl.trainer.main_ppo", *overrides]
    script = (
        "import sys, os; from pathlib import Path; from recipes.launch.supervision import restart; "
        f"sys.exit(restart.supervise({command!r}, os.environ, Path({str(ckpt)!r}), 2))"
    )
    faults, pending = [], [Fault(1, "worker"), Fault(2, "driver")]
    t0, tracker = time.perf_counter(), ckpt / "latest_checkpointed_iteration.txt"
    with open(log, "w") as f:
        proc = subprocess.Popen([sys.executable, "-c", script], env=env, cwd=log.parent, stdout=f, stderr=f)
        while proc.poll() is None and time.perf_counter() - t0 < timeout:
            time.sleep(0.5)
            named = tracker.read_text().strip() if tracker.exists() else ""
            for fault in faults:
                if fault.driver_exit_s is None and not _alive(fault.driver):
                    fault.driver_exit_s = time.perf_counter() - fault.killed_at
                if fault.recovered_s is None and named == str(fault.after_step + 1):
                    fault.recovered_s = time.perf_counter() - fault.killed_at
            if pending and named == str(pending[0].after_step) and _step_logged(log, pending[0].after_step):
                fault = pending.pop(0)
                victim, fault.driver = _victim(str(ckpt), fault.target)
                os.kill(victim, signal.SIGKILL)
                fault.killed_at = time.perf_counter()
                faults.append(fault)
        if proc.poll() is None:
            proc.kill()
    wall = time.perf_counter() - t0
    assert not pending, f"the run never wrote checkpoint {pending[0].after_step}:\n{log.read_text()[-8000:]}"
    assert proc.returncode == 0, f"supervised main_ppo failed (rc={proc.returncode}):\n{log.read_text()[-8000:]}"
    for fault in faults:
        fault.wall_s = wall
        if fault.recovered_s is None and tracker.read_text().strip() == str(fault.after_step + 1):
            fault.recovered_s = time.perf_counter() - fault.killed_at  # named just before the run ended
    return faults


SHARP_INIT_RANGE = 0.3  # outputs that move when weights move (near-uniform at transformers' 0.02)
SYNC_SEPARATION = 10  # the sync check's measure must separate synced from stale by at least this factor


@pytest.fixture(scope="module")
def async_runs(assets: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """Run (b) as shipped and run (c) with the weight sync broken; {name: {"steps", "dir", "wall"}}."""
    from recipes.smoke.tiny_model import build_tiny_qwen

    model = build_tiny_qwen(REPO_ROOT / "build" / "tiny-qwen3-sharp", init_range=SHARP_INIT_RANGE)
    runs = {}
    for name, env in (
        ("shipped", {}),
        ("stale", WEIGHT_SYNC.environment({})),  # recipes.smoke.sabotage: only the first weight update reaches vLLM
    ):
        run_dir = tmp_path_factory.mktemp(f"async-{name}")
        overrides = _async_overrides(assets, run_dir / "ckpt", model, traced=name == "shipped")
        wall = run_ppo(overrides, run_dir / "async.log", assets["pythonpath"], **env)
        runs[name] = {"steps": _check_steps(run_dir / "async.log", [1, 2]), "dir": run_dir, "wall": wall}
        print(f"\n[cpu-rl] async run ({name}): wall {wall:.1f}s; {_timing(runs[name]['steps'])}")
    return runs


def _async_overrides(assets: dict[str, Path], ckpt: Path, model: Path, *, traced: bool) -> list[str]:
    overrides = [
        *common_overrides(assets, ckpt),
        f"actor_rollout_ref.model.path={model}",
        "actor_rollout_ref.actor.optim.lr=1e-2",  # one update must move the sharp model's outputs measurably
        # the tool schema in the system prompt makes the prompt ~190 tokens with the Qwen tokenizer
        "data.max_prompt_length=256",
        "data.max_response_length=32",
        "data.return_raw_chat=True",
        "actor_rollout_ref.model.use_remove_padding=True",
        "actor_rollout_ref.actor.use_kl_loss=False",
        "actor_rollout_ref.rollout.mode=async",
        "actor_rollout_ref.rollout.calculate_log_probs=True",
        "actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent",
        "actor_rollout_ref.rollout.agent.num_workers=1",
        "actor_rollout_ref.rollout.multi_turn.enable=True",
        "actor_rollout_ref.rollout.multi_turn.format=hermes",
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=2",
        "actor_rollout_ref.rollout.multi_turn.max_user_turns=2",
        f"actor_rollout_ref.rollout.multi_turn.tool_config_path={assets['tools']}",
        "trainer.save_freq=-1",
        "trainer.total_training_steps=2",
    ]
    if not traced:
        return overrides
    # rollout traces to mlflow's file store, with the environment the launcher gives the Ray job
    overrides += [f"{trace.BACKEND_KEY}=mlflow", "actor_rollout_ref.rollout.trace.token2text=True"]
    traced_cfg = OmegaConf.create({"actor_rollout_ref": {"rollout": {"trace": {"backend": "mlflow"}}}})
    job_env = trace.job_env(traced_cfg, str(ckpt), {})
    return overrides + [f"++ray_kwargs.ray_init.runtime_env.env_vars.{k}='{v}'" for k, v in job_env.items()]


@pytest.mark.covered_e2e  # the main job proves both on SmolLM2 (tests/conftest.py OPT_IN_MARKERS)
def test_async_tool_agent_loop(async_runs: dict[str, dict]) -> None:
    run = async_runs["shipped"]
    text = (run["dir"] / "async.log").read_text()
    engine = CPU.rollout_engine(interpreter_stack())
    if engine.name == "vllm":  # the platform's engine is what ran: verl's vLLM async server
        assert "vLLMHttpServer" in text, "rollout.name=vllm but no vLLM server actor ran"
    traces, _ = trace.rollout_traces(run["dir"] / "ckpt" / "mlruns")
    # 2 steps x 8 trajectories (train_batch_size 2 x n 4), each one agent_loop trace written by the Ray worker
    assert traces >= 16, f"{traces} rollout traces in {run['dir'] / 'ckpt' / 'mlruns'}"
    for metrics in run["steps"].values():
        assert metrics["num_turns/min"] >= 2, metrics["num_turns/min"]


@pytest.mark.covered_e2e
def test_weight_sync_reaches_the_rollout(async_runs: dict[str, dict]) -> None:
    """The rollout samples from the actor's current weights: broken sync is >= 10x further off at step 2."""
    key = "training/rollout_probs_diff_mean"
    synced, stale = (async_runs[name]["steps"][2][key] for name in ("shipped", "stale"))
    ratio = stale / max(synced, 1e-30)
    print(f"\n[cpu-rl] {key} at step 2: synced {synced:.3g}, sync broken {stale:.3g} ({ratio:.0f}x)")
    assert stale >= SYNC_SEPARATION * synced, (
        f"{key} at step 2: {synced:.3g} with the weight sync, {stale:.3g} with it broken: the measure does not "
        f"separate them by {SYNC_SEPARATION}x, so it cannot tell whether weights reach the rollout"
    )
