"""Helpers shared by the kit's tests (importable as `kit_testing`; pytest puts tests/ on sys.path).

The patch tests prove two things: the installed (patched) verl behaves, and the same check fails on
unpatched verl 0.6.1. The unpatched package is taken from the base commit of the patched git tree
that scripts/setup_verl.sh built (tag ``v0.6.1``), so no network is needed.

The ``check_*`` functions of tests/patches also run in a subprocess (``UnpatchedVerl.run``, via
``runpy``) where pytest's sys.path is absent; ``kit_env`` puts tests/ on PYTHONPATH so this module
imports there too. Keep it standard-library only at import time: torch and the kit's heavy parts are
imported lazily by the helpers that need them, so the sandbox tests do not pay for (or need) torch.
``kit_env`` and ``free_port`` are the kit's own (recipes/smoke/supervisor.py, standard library only):
one copy for the smoke run and the tests.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tarfile
import textwrap
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from platforms import stacks as stacks_t

REPO_ROOT = Path(__file__).resolve().parents[1]
TESTS_DIR = REPO_ROOT / "tests"

if str(REPO_ROOT) not in sys.path:  # under runpy or a bare interpreter the kit may not be importable yet
    sys.path.append(str(REPO_ROOT))

from recipes.smoke import supervisor  # noqa: E402 (needs the path above)
from recipes.smoke.supervisor import free_port  # noqa: E402, F401 (re-exported for the tests)

#: Everything the launcher or the run scripts read from the environment; tests start without any of it.
LAUNCH_VARS = (
    "MODEL_PATH",
    "DATA_DIR",
    "TRAIN_FILE",
    "VAL_FILE",
    "MODELS_DIR",
    "CKPT_ROOT",
    "CKPT_DIR",
    "RETOOL_SANDBOX_URL",
    "TENSORBOARD_DIR",
    "MASTER_ADDR",
    "MASTER_PORT",
    "NODE_RANK",
    "KIT_HW",
    "KIT_DEVICE",
    "KIT_PYTHON",
    "VIRTUAL_ENV",
    "VERL_USE_EXTERNAL_MODULES",
    "RAY_HEAD_ADDRESS",
    "RAY_ADDRESS",
)


def verl_tree() -> Path:
    """The patched verl git tree of this interpreter's stack (KIT_VERL_TREE, default build/verl or build/verl-0.9.1
    as the test command makes them)."""
    return Path(os.environ.get("KIT_VERL_TREE", interpreter_stack().verl_tree))


def kit_env(**extra: str) -> dict[str, str]:
    """The kit's child environment (no torch_npu autoload, the kit importable) with ``kit_testing`` importable.

    tests/ is there so test files run outside pytest (``UnpatchedVerl.run``) can import this module. It goes
    last: its sub-folders have no ``__init__.py``, and Python prefers any real package over such a folder.
    """
    return supervisor.kit_env(extra_paths=[TESTS_DIR], **extra)


def trainer_env(phase: str, **extra: str) -> dict[str, str]:
    """:func:`kit_env` plus the cpu platform's ``VERL_USE_EXTERNAL_MODULES`` for ``phase``, for the tests that launch
    verl by hand with ``CPU.verl_overrides``: those name the trainers' attention (``kit_packed_sdpa``), which only
    exists once a module in that list has registered it (platforms/cpu.py ``external_modules``)."""
    from platforms import CPU

    env = kit_env(**extra)
    modules = CPU.external_modules(phase, interpreter_stack(), env)
    env[modules.name] = modules.value
    return env


def run_kit_script(
    script: str, args: Sequence[str], env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    """``bash scripts/<script> ARGS`` from the kit's root, output captured as text, the exit status left to the
    caller (the tests of scripts/sft_to_rl.sh and scripts/ray_cluster.sh)."""
    return subprocess.run(
        ["bash", f"scripts/{script}", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def tiny_model_dir() -> Path:
    """The kit's tiny random Qwen3 + real Qwen tokenizer, built once into build/ (cached by fingerprint).

    ``KIT_TINY_MODEL_DIR`` overrides the place, so a CI cache or a read-only image can provide it.
    """
    from recipes.smoke.tiny_model import build_tiny_qwen

    return build_tiny_qwen(Path(os.environ.get("KIT_TINY_MODEL_DIR", REPO_ROOT / "build" / "tiny-qwen3")))


def ppo_config(overrides: list[str]) -> DictConfig:
    """verl's ``ppo_trainer`` config with Hydra ``overrides``, from the verl that is imported.

    Composed from the imported package's own YAML (not a copy), so a check run against unpatched verl
    sees that version's defaults and config keys.
    """
    import verl
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(Path(verl.__file__).parent / "trainer" / "config"), version_base=None):
        return compose("ppo_trainer", overrides=overrides)


@contextlib.contextmanager
def gloo_world_of_one(init_process_group: bool = True) -> Iterator[None]:
    """A torchrun-style environment for a world of one process, on a free port.

    With ``init_process_group`` (the default) a gloo group is made here, so a check that only needs *a*
    group does not depend on the kit's backend patch; without it the code under test must make the group
    itself (what the backend-patch check is about). Either way os.environ is restored and any group left
    behind is destroyed, so checks running one after another in one interpreter do not see each other's.
    """
    import torch.distributed as dist

    saved = dict(os.environ)
    os.environ.update(
        RANK="0",
        LOCAL_RANK="0",
        WORLD_SIZE="1",
        LOCAL_WORLD_SIZE="1",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(free_port()),
    )
    try:
        if init_process_group:
            dist.init_process_group("gloo", rank=0, world_size=1)
        yield
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        os.environ.clear()
        os.environ.update(saved)


def run_ranks(code: str, world_size: int = 2, timeout: float = 240) -> None:
    """Run ``code`` in ``world_size`` fresh interpreters (one per rank); fail with all their outputs.

    Each rank gets this process's environment plus ``RANK``, ``WORLD_SIZE`` and a shared free ``PORT``
    for its ``tcp://`` rendezvous. Fresh interpreters, not threads: a real multi-rank gloo group needs
    one process per rank, and a hung rank must not hang the test (all ranks are killed on timeout).
    """
    port = free_port()
    procs = []
    for rank in range(world_size):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world_size), PORT=str(port))
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
        )
    outputs, failed = [], False
    for rank, proc in enumerate(procs):
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            out, _ = proc.communicate()
            out += "\n<timed out>"
        outputs.append(f"--- rank {rank} (rc={proc.returncode}) ---\n{out}")
        failed |= proc.returncode != 0
    if failed:
        raise AssertionError("a rank failed:\n" + "\n".join(outputs))


def tiny_checkpoint_manager() -> object:
    """verl's real ``FSDPCheckpointManager`` over a one-layer model and its optimizer; call it in a process group.

    ``fsdp_version`` is 0 for a plain module, so the manager saves the module's state dict as this rank's shard and
    goes through the rest of its save (extra state, ``huggingface/`` config, fsdp_config.json) unchanged. Set
    ``manager.optimizer.fail = True`` and the next save dies midway (after the model file, at the optimizer's), as a
    crash during a save does.
    """
    import torch
    from transformers import PretrainedConfig
    from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager

    class TinyModel(torch.nn.Linear):
        config = PretrainedConfig()

        def can_generate(self) -> bool:
            return False

    class CrashingSGD(torch.optim.SGD):
        fail = False

        def state_dict(self) -> dict:
            if self.fail:
                raise RuntimeError("simulated crash during the checkpoint save")
            return super().state_dict()

    model = TinyModel(2, 2)
    return FSDPCheckpointManager(model, CrashingSGD(model.parameters(), lr=0.1))


class CheckpointWorkerGroup:
    """The checkpoint calls RayPPOTrainer makes on ``actor_rollout_wg``, done by a real ``FSDPCheckpointManager``.

    fsdp_workers' ``save_checkpoint``/``load_checkpoint`` hand their arguments to the manager on every rank; here
    one rank in this process, so a trainer's checkpoints are real files that load (or fail to) as on a cluster.
    """

    def __init__(self) -> None:
        self.manager = tiny_checkpoint_manager()
        self.loaded: list[str | None] = []

    def save_checkpoint(
        self, local_path: str, hdfs_path: str | None = None, global_step: int = 0, max_ckpt_to_keep: int | None = None
    ) -> None:
        self.manager.save_checkpoint(local_path, hdfs_path, global_step, max_ckpt_to_keep=max_ckpt_to_keep)

    def load_checkpoint(
        self, local_path: str | None, hdfs_path: str | None = None, del_local_after_load: bool = False
    ) -> None:
        self.loaded.append(local_path)
        self.manager.load_checkpoint(local_path, hdfs_path, del_local_after_load)


class StepDataLoader:
    """The dataloader state the PPO trainer (0.6.1's RayPPOTrainer, 0.9.1's V1 trainer) saves to data.pt and loads
    back: here just the step it was saved at. ``fail = True``: the next ``state_dict`` raises (a crash after the
    workers' save, before data.pt)."""

    def __init__(self, trainer: object) -> None:
        self.trainer = trainer
        self.fail = False
        self.loaded: dict | None = None

    def state_dict(self) -> dict:
        if self.fail:
            raise RuntimeError("simulated crash after the actor's save, before data.pt")
        return {"step": self.trainer.global_steps}

    def load_state_dict(self, state: dict) -> None:
        self.loaded = state


def checkpoint_trainer(root: Path, overrides: Sequence[str] = ()) -> object:
    """A ``RayPPOTrainer`` with what ``_save_checkpoint``/``_load_checkpoint`` read and nothing else.

    ``object.__new__``: no Ray, no workers. The config is verl's own ``ppo_trainer`` with checkpoints in ``root``
    (absolute, as the trainer's own load makes it) and ``overrides``; the actor is a ``CheckpointWorkerGroup``, no
    critic. Each call is a fresh trainer, as after a restart. Call it in a process group (``gloo_world_of_one``).
    """
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    trainer = object.__new__(RayPPOTrainer)
    trainer.config = ppo_config([f"trainer.default_local_dir={root}", *overrides])
    trainer.actor_rollout_wg = CheckpointWorkerGroup()
    trainer.use_critic = False
    trainer.global_steps = 0
    trainer.train_dataloader = StepDataLoader(trainer)
    return trainer


def step_metrics(text: str) -> dict[int, dict[str, float]]:
    """``step:N - key:value - ...`` lines of verl's console logger -> {N: {key: value}}.

    The trainers' logs are the only place their per-step metrics come out of a subprocess; lines of the
    same step (train and val) are merged, and values that are not numbers are dropped.
    """
    from recipes.smoke.progress import step_metrics as parse  # the kit's own parser: one copy of the format

    return parse(text)


@dataclass
class UnpatchedVerl:
    """An importable copy of the unpatched verl package (or of the series less one patch), and a way to run a check
    against it."""

    root: Path
    label: str

    def run(self, test_file: str, func: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return run_check(test_file, func, timeout=timeout, verl_root=self.root)

    def expect_failure(self, test_file: str, func: str, match: str | tuple[str, ...], timeout: float = 300) -> str:
        """Run ``func`` from ``test_file`` against unpatched verl; it must fail and print ``match`` (or one of them:
        the same bug can surface as different messages of torch's CPU and CUDA builds)."""
        proc = self.run(test_file, func, timeout=timeout)
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0, f"{func} passed on {self.label}; the test does not cover its patch:\n{out}"
        matches = (match,) if isinstance(match, str) else match
        assert any(m in out for m in matches), (
            f"{func} failed on {self.label}, but not with {matches!r}:\n{out[-4000:]}"
        )
        return out


def unpatched_tag() -> str:
    """The base commit's tag in this interpreter's stack's verl tree (``v0.6.1``, ``v0.9.1``): verl as PyPI ships it."""
    return interpreter_stack().pin("VERL_GIT_TAG")


def run_check(
    test_file: str, func: str, timeout: float = 300, verl_root: Path | None = None
) -> subprocess.CompletedProcess:
    """Run the fixture-less function ``func`` of ``test_file`` in a fresh interpreter: against the verl package under
    ``verl_root`` (first on PYTHONPATH), or the installed one.

    Why a fresh interpreter for the installed verl too: a check that forks (a ZeroMQ sender and receiver) deadlocks
    in a pytest process whose earlier tests left threads holding locks (tests/stack091/test_weight_transfer_timeout_091
    hung 10 s in every case inside the full suite, and passed alone)."""
    guard = "" if verl_root is None else f"assert verl.__file__.startswith({str(verl_root)!r}), verl.__file__"
    code = textwrap.dedent(
        f"""
        import runpy, sys, verl
        {guard}
        runpy.run_path({test_file!r})[{func!r}]()
        """
    )
    env = kit_env()
    if verl_root is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(verl_root), env["PYTHONPATH"]])
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO_ROOT
    )


def expect_success(test_file: str, func: str, timeout: float = 300) -> str:
    """:func:`run_check` against the installed (patched) verl; it must pass. Returns its output."""
    proc = run_check(test_file, func, timeout=timeout)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{func} failed on the installed verl:\n{out[-4000:]}"
    return out


def extract_verl(revision: str, dest: Path) -> Path:
    """The ``verl`` package of the patched tree at ``revision`` (``unpatched_tag()``: unpatched; ``HEAD``: the series),
    extracted into ``dest``, which goes first on PYTHONPATH to import it."""
    archive = dest / "verl.tar"
    subprocess.run(
        ["git", "-C", str(verl_tree()), "archive", "--format=tar", "-o", str(archive), revision, "verl"], check=True
    )
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
    archive.unlink()
    return dest


def verl_without_patch(dest: Path, patch_number: str) -> UnpatchedVerl:
    """The kit's patched verl (the tree's HEAD) with one patch of the series reverse-applied, extracted into ``dest``.

    For the end-to-end checks of a patch: a real trainer run on CPU needs the kit's CPU patches, which unpatched 0.6.1
    lacks (it dies for want of them before it reaches the bug), so such a check runs against the series minus the
    one patch it covers. The patch file itself (``patches/<patch_number>-*.patch``) is reverse-applied, so this fails
    loudly when the tree does not hold it.
    """
    (patch,) = sorted(interpreter_stack().patch_dir.glob(f"{patch_number}-*.patch"))
    extract_verl("HEAD", dest)
    subprocess.run(["git", "apply", "--reverse", str(patch)], cwd=dest, check=True)
    return UnpatchedVerl(dest, label=f"the kit's verl without patch {patch.name}")


#: Set by .ci/run: a machine where vLLM's CPU build cannot be imported fails the vLLM tests instead of skipping them.
REQUIRE_VLLM_ENV = "KIT_REQUIRE_VLLM"


def interpreter_stack() -> stacks_t.Stack:
    """The stack this test interpreter serves: its verl's (``KIT_STACK`` is not read: the venv the test command picked
    decides, as it decides which tests run)."""
    from platforms import stacks

    return stacks.resolve(environ={})


def require_vllm() -> None:
    """Skip (or, with KIT_REQUIRE_VLLM=1, fail) a test that needs verl's vLLM rollout on this machine's CPU."""
    import pytest

    from platforms import CPU

    engine = CPU.rollout_engine(interpreter_stack())
    if engine.name == "vllm":
        return
    if os.environ.get(REQUIRE_VLLM_ENV) == "1":
        pytest.fail(f"{REQUIRE_VLLM_ENV}=1 but this interpreter rolls out with {engine.note}")
    pytest.skip(f"needs vLLM's CPU build: this interpreter rolls out with {engine.note}")


def vllm_server_args(model: Path, overrides: list[str], replica_rank: int = 0) -> object:
    """The ``argparse.Namespace`` verl's ``vLLMHttpServerBase.launch_server`` builds for vLLM, without an engine.

    The server is made as :func:`vllm_server` makes it (standalone, on the rollout config verl composes from
    ``overrides``), at ``replica_rank``; its ``run_server`` is replaced by a recorder, so only verl's own argument
    building and vLLM's parser run (no model load). A Ray it starts is shut down; one already running is kept.
    """
    import asyncio

    import ray
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.config import HFModelConfig
    from verl.workers.rollout.replica import RolloutMode
    from verl.workers.rollout.vllm_rollout.vllm_async_server import vLLMHttpServerBase

    config = ppo_config([f"actor_rollout_ref.model.path={model}", *overrides])
    model_config = omega_conf_to_dataclass(config.actor_rollout_ref.model, dataclass_type=HFModelConfig)
    server = vLLMHttpServerBase(
        config.actor_rollout_ref.rollout, model_config, RolloutMode.STANDALONE, [], replica_rank, 0, 1, 1
    )
    recorded = []

    async def record(args: object) -> None:
        recorded.append(args)

    server.run_server = record
    started = not ray.is_initialized()  # launch_server's ray.get of the (no) workers' addresses needs a Ray
    if started:
        ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        asyncio.run(server.launch_server())
    finally:
        if started:
            ray.shutdown()
    return recorded[0]


@contextlib.contextmanager
def vllm_server(model: Path, overrides: list[str]) -> Iterator[object]:
    """verl's real ``vLLMHttpServerBase`` on vLLM's CPU build, serving ``model`` in this process, launched.

    Standalone mode (no trainer workers: vLLM loads the weights itself from ``model``), on the rollout config verl
    composes from ``overrides``. The engine's background process is shut down on exit.
    """
    import asyncio

    import ray
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.config import HFModelConfig
    from verl.workers.rollout.replica import RolloutMode
    from verl.workers.rollout.vllm_rollout.vllm_async_server import vLLMHttpServerBase

    config = ppo_config([f"actor_rollout_ref.model.path={model}", *overrides])
    model_config = omega_conf_to_dataclass(config.actor_rollout_ref.model, dataclass_type=HFModelConfig)
    server = vLLMHttpServerBase(config.actor_rollout_ref.rollout, model_config, RolloutMode.STANDALONE, [], 0, 0, 1, 1)
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(server.launch_server())
        server.loop = loop  # callers run the server's coroutines on the loop it was launched on
        yield server
    finally:
        engine = getattr(server, "engine", None)
        if engine is not None:
            engine.shutdown()
        loop.close()
        if ray.is_initialized():
            ray.shutdown()


def child_pids(pid: int) -> list[int]:
    """The live direct children of ``pid`` (from /proc), e.g. the server under a ``serve --keep-alive`` supervisor."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
                if int(stat[1]) == pid and stat[0] != "Z":
                    found.append(int(entry))
    return found


def installed_verl() -> str | None:
    """This interpreter's verl version (metadata only), or None: platforms.pins's answer, which picks the stack."""
    from platforms.pins import installed_verl as from_metadata

    return from_metadata()


def needs_verl_09() -> object:
    """The mark of tests/stack091/: they run under the current stack's python (.venv-0.9.1, ``bash scripts/test.sh
    --stack 0.9.1``) and skip, with the reason, under any other verl (the main .venv collects them harmlessly)."""
    import pytest

    version = installed_verl()
    return pytest.mark.skipif(
        not (version or "").startswith("0.9."),
        reason=f"stack 0.9.1's tests: this interpreter has verl {version} (run them with .venv-0.9.1's python)",
    )


def refused_in_one_line(argv: list[str], timeout: int = 300) -> str:
    """Run a kit command from the repo root with this interpreter as the kit's python; it must refuse before any
    work: exit 2, nothing on stdout, one line on stderr, which is returned."""
    proc = subprocess.run(
        argv, cwd=REPO_ROOT, env=kit_env(KIT_PYTHON=sys.executable), capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    return lines[0]
