"""End to end on CPU: ``python -m verl.trainer.main_ppo`` GRPO, sync with the ``hf`` rollout and async through
verl's vLLM async server (vLLM's CPU build), the engine NPU and GPU runs use.

(a) sync: ``rollout.name=hf rollout.mode=sync``, 2 FSDP2 worker processes (``trainer.n_gpus_per_node=2`` counts
    processes on CPU), KL loss (so a ref model is built), 3 steps under the launcher's restart supervisor
    (``--max-restarts 1``, recipes/launch/restart.py); the driver is SIGKILLed once the step-2 checkpoint is complete,
    and the supervisor cleans up and relaunches it with ``trainer.resume_mode=auto``, which resumes from step 2 and
    does step 3 (issue 20, fault (a)). The hf rollout stays the fallback where vLLM cannot install.
(b) async: ``rollout.mode=async`` with the agent loop (``tool_agent``, hermes format, a native tool), remove-padding
    and rollout log-probs, 2 steps, the rollout engine the cpu platform picks (vLLM; 2 replicas, one per rank). A
    random tiny model never emits a tool call, so tool execution itself is not exercised here (only the
    ToolAgentLoop prompt/response path with tools in the prompt; the smoke run executes real calls).
(c) weight sync, proven: run (b) again with the sync broken by a test-only switch (``kit_sabotage``: only the
    first weight update reaches vLLM) and compare ``training/rollout_probs_diff_mean`` at step 2 (vLLM's log-probs
    of its samples against the actor's recomputation). The model is the tiny Qwen3 with a 0.3 init range, whose
    outputs move when its weights do; on the default near-uniform one both cases measure ~1e-6.

Metrics are read from the console logger's ``step:N - key:value - ...`` lines. Needs the patched verl (Ray CPU
bundles, gloo, no ref offload on CPU, the torch.cpu wrapper, the gloo-safe all-gather, CPU pad/unpad, the hf rollout).
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kit_testing import REPO_ROOT, kit_env, step_metrics, tiny_model_dir
from omegaconf import OmegaConf

from npu_kernels.platform import CPU
from recipes.launch import trace
from recipes.retool.schema import TOOL_SCHEMA

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


def _common_overrides(assets: dict[str, Path], ckpt: Path) -> list[str]:
    return [
        # the platform's own settings (device, FSDP2, sdpa, fp32 compute, no torch.compile, Ray CPUs)
        *CPU.verl_overrides("rl"),
        "algorithm.adv_estimator=grpo",
        "algorithm.use_kl_in_reward=False",
        f"data.train_files={assets['data']}",
        f"data.val_files={assets['data']}",
        "data.train_batch_size=2",
        "data.dataloader_num_workers=0",
        f"actor_rollout_ref.model.path={assets['model']}",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.actor.optim.lr=1e-3",
        "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2",
        f"custom_reward_function.path={assets['reward']}",
        "custom_reward_function.name=compute_score",
        "trainer.n_gpus_per_node=2",
        "trainer.nnodes=1",
        "trainer.logger=['console']",
        "trainer.test_freq=-1",
        "trainer.val_before_train=False",
        f"trainer.default_local_dir={ckpt}",
        "trainer.project_name=kit-cpu-rl",
        "trainer.experiment_name=tiny",
    ]


def _ppo_env(pythonpath: Path, **env_extra: str) -> dict[str, str]:
    """What main_ppo runs with here: the kit's environment, the test's tool/reward folder and the sabotage switches."""
    env = kit_env(PYTHONUNBUFFERED="1", HYDRA_FULL_ERROR="1", **env_extra)
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(pythonpath), str(SABOTAGE_DIR)])
    return env


def _run_ppo(overrides: list[str], log: Path, pythonpath: Path, timeout: float = 420, **env_extra: str) -> float:
    env = _ppo_env(pythonpath, **env_extra)
    t0 = time.perf_counter()
    with open(log, "w") as f:
        proc = subprocess.run(
            [sys.executable, "-m", "verl.trainer.main_ppo", *overrides],
            env=env,
            cwd=log.parent,
            stdout=f,
            stderr=subprocess.STDOUT,
            timeout=timeout,
        )
    wall = time.perf_counter() - t0
    assert proc.returncode == 0, f"main_ppo failed (rc={proc.returncode}):\n{log.read_text()[-8000:]}"
    return wall


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


def test_sync_grpo_killed_after_a_checkpoint_restarts_and_resumes(assets: dict[str, Path], tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    overrides = [
        *_common_overrides(assets, ckpt),
        "data.max_prompt_length=64",
        "data.max_response_length=32",
        "actor_rollout_ref.rollout.name=hf",
        "actor_rollout_ref.rollout.mode=sync",
        "actor_rollout_ref.actor.use_kl_loss=True",
        "actor_rollout_ref.actor.kl_loss_coef=0.001",
        "trainer.save_freq=2",
        # validation (greedy hf generation of the 8 prompts) at step 2 and at the last step of the resumed run
        "trainer.test_freq=2",
    ]

    # one supervised run of 3 steps (--max-restarts 1), its driver SIGKILLed once the step-2 checkpoint is complete
    log = tmp_path / "sync.log"
    wall, killed = _supervise_ppo([*overrides, "trainer.total_training_steps=3"], log, assets["pythonpath"], ckpt, 2)
    text = log.read_text()
    assert "restart 1/1: trainer exited with status -9" in text and "resuming from global_step_2" in text, text[-4000:]
    assert f"Resuming from {ckpt / 'global_step_2'}" in text, text[-4000:]
    steps = _check_steps(log, [1, 2, 3])
    assert any(m["actor/grad_norm"] > 0 for m in steps.values()), "the actor never got a gradient"
    for step in (2, 3):  # validation at step 2 (before the kill) and at the last step of the resumed attempt
        assert any(k.startswith("val-core/") for k in steps[step]), f"no validation at step {step}: {steps[step]}"
    print(f"\n[cpu-rl] sync run killed after step 2 and restarted: wall {wall:.1f}s; {_timing(steps)}")
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "3"
    for rank in (0, 1):
        assert (ckpt / "global_step_2" / "actor" / f"model_world_size_2_rank_{rank}.pt").is_file()
    # the supervisor cleaned up the killed attempt: nothing of its process group (driver, local Ray head) is left
    with pytest.raises(ProcessLookupError):
        os.killpg(killed, 0)


def _driver_pid(marker: str) -> int | None:
    """The main_ppo process whose command line names ``marker`` (this test's checkpoint folder)."""
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"verl.trainer.main_ppo" in cmdline and any(marker.encode() in word for word in cmdline):
            return int(proc.name)
    return None


def _supervise_ppo(
    overrides: list[str], log: Path, pythonpath: Path, ckpt: Path, kill_after: int, timeout: float = 600
) -> tuple[float, int]:
    """The trainer under the launcher's supervisor (``--max-restarts 1``); its driver is SIGKILLed once the
    tracker names ``kill_after``. Returns the wall time and the killed driver's pid (its process group)."""
    env = _ppo_env(pythonpath)
    command = [sys.executable, "-m", "verl.trainer.main_ppo", *overrides]
    script = (
        "import sys, os; from pathlib import Path; from recipes.launch import restart; "
        f"sys.exit(restart.supervise({command!r}, os.environ, Path({str(ckpt)!r}), 1))"
    )
    t0, killed = time.perf_counter(), None
    with open(log, "w") as f:
        proc = subprocess.Popen([sys.executable, "-c", script], env=env, cwd=log.parent, stdout=f, stderr=f)
        while proc.poll() is None and time.perf_counter() - t0 < timeout:
            time.sleep(0.5)
            tracker = ckpt / "latest_checkpointed_iteration.txt"
            if killed is None and tracker.exists() and tracker.read_text().strip() == str(kill_after):
                killed = _driver_pid(str(ckpt))
                assert killed is not None, "the trainer's driver was not found"
                os.kill(killed, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
    wall = time.perf_counter() - t0
    assert killed is not None, f"the run never wrote checkpoint {kill_after}:\n{log.read_text()[-8000:]}"
    assert proc.returncode == 0, f"supervised main_ppo failed (rc={proc.returncode}):\n{log.read_text()[-8000:]}"
    return wall, killed


SABOTAGE_DIR = REPO_ROOT / "tests" / "sabotage"  # test-only switches that break what a check guards
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
        ("stale", {"VERL_USE_EXTERNAL_MODULES": "kit_sabotage", "KIT_TEST_WEIGHT_SYNC": "first-only"}),
    ):
        run_dir = tmp_path_factory.mktemp(f"async-{name}")
        overrides = _async_overrides(assets, run_dir / "ckpt", model, traced=name == "shipped")
        wall = _run_ppo(overrides, run_dir / "async.log", assets["pythonpath"], **env)
        runs[name] = {"steps": _check_steps(run_dir / "async.log", [1, 2]), "dir": run_dir, "wall": wall}
        print(f"\n[cpu-rl] async run ({name}): wall {wall:.1f}s; {_timing(runs[name]['steps'])}")
    return runs


def _async_overrides(assets: dict[str, Path], ckpt: Path, model: Path, *, traced: bool) -> list[str]:
    overrides = [
        *_common_overrides(assets, ckpt),
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


def test_async_tool_agent_loop(async_runs: dict[str, dict]) -> None:
    run = async_runs["shipped"]
    text = (run["dir"] / "async.log").read_text()
    engine = CPU.rollout_engine()
    if engine.name == "vllm":  # the platform's engine is what ran: verl's vLLM async server
        assert "vLLMHttpServer" in text, "rollout.name=vllm but no vLLM server actor ran"
    traces, _ = trace.rollout_traces(run["dir"] / "ckpt" / "mlruns")
    # 2 steps x 8 trajectories (train_batch_size 2 x n 4), each one agent_loop trace written by the Ray worker
    assert traces >= 16, f"{traces} rollout traces in {run['dir'] / 'ckpt' / 'mlruns'}"
    for metrics in run["steps"].values():
        assert metrics["num_turns/min"] >= 2, metrics["num_turns/min"]


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
