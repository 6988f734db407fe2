"""Run checks: what a ReTool run needs besides the stack: Ray's device count, the environment, the code sandbox,
the model and data, and room for checkpoints.

Why: these fail late. Ray started before CANN was sourced counts 10 of 16 A3 dies and the job waits for devices that
never come; ``VLLM_ASCEND_ENABLE_NZ`` left on garbles rollouts after the first weight sync; a sandbox that is down
turns every tool call into "sandbox unavailable" and the reward quietly drops; a full disk kills the first
checkpoint after hours of training. The environment rules come from the hardware profile
(:mod:`platforms`); nothing here keeps a second copy.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from platforms import EnvVar, data_file, model_folder
from platforms.ascend_probe import package_mentions, vllm_ascend_env_names
from platforms.doctor.probes import (
    Context,
    Probes,
    Result,
    dist_version,
    env_fix_line,
    fail,
    find_package_dir,
    has_host_stack,
    ok,
    skip,
    warn,
)

#: Sandbox round trip (median of the pings) above which rollouts with 128 concurrent tool calls will queue on it.
SANDBOX_SLOW_MS = 250.0
SANDBOX_PINGS = 3
#: The variable the recipes' tool config reads the sandbox URL from (recipes/retool/code_interpreter.yaml).
SANDBOX_URL_ENV = "RETOOL_SANDBOX_URL"

# ------------------------------------------------------------------------------------------------ Ray

_RAY_QUERY = """
import json, sys, ray
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
ip = ray.util.get_node_ip_address()
local = [n["Resources"] for n in ray.nodes() if n.get("Alive") and n.get("NodeManagerAddress") == ip]
print(json.dumps({"local": local[0] if local else None, "cluster": ray.cluster_resources()}))
"""


def _ray_resources(probes: Probes) -> tuple[dict[str, Any] | None, str]:
    """(Ray's resources of this node, where they came from), or (None, why not) when there is no cluster to ask.
    The query runs in a child process: importing Ray here would make the doctor slow and fragile."""
    if probes.ray_resources_json is not None:
        data = json.loads(Path(probes.ray_resources_json).read_text())
        return (data["local"] if "local" in data else data), str(probes.ray_resources_json)
    address = probes.ray_address or probes.env.get("RAY_ADDRESS")
    if not address and probes.ray_state_file.exists():
        address = "auto"
    if not address:
        return None, f"no running Ray cluster (RAY_ADDRESS unset, no {probes.ray_state_file})"
    proc = subprocess.run(
        [sys.executable, "-c", _RAY_QUERY, address],
        capture_output=True,
        text=True,
        timeout=max(probes.command_timeout_s, 60),
        env=dict(probes.env),
    )
    if proc.returncode != 0:
        raise RuntimeError(f"could not query Ray at {address}: {(proc.stderr or proc.stdout).strip()[-300:]}")
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    return data.get("local") or data.get("cluster"), f"ray cluster at {address}"


def check_ray(ctx: Context) -> list[Result]:
    platform = ctx.platform
    resource = platform.ray_resource
    # Device nodes count what the host has whatever Ray or a mask saw; elsewhere torch's count is all there is.
    present = ctx.davinci if has_host_stack(platform) else (ctx.torch_devices or 0)
    try:
        resources, source = _ray_resources(ctx.probes)
    except (OSError, ValueError, RuntimeError, subprocess.TimeoutExpired) as exc:
        return [fail("ray", str(exc), "check `ray status`; restart the head with `ray start --head`")]
    sourced = "".join(f"source {ctx.probes.cann_root / script}; " for script in platform.setup_scripts)
    restart = f"ray stop; {sourced}{shlex.join(['ray', 'start', '--head', *platform.ray_start_args(present)])}"
    if resources is None:
        return [skip("ray", f"{source}; when you start it: {restart}")]
    seen = resources.get(resource, 0)
    details = {"source": source, "resource": resource, "ray": seen, "present": present}
    if seen < present:
        why = (
            f" (Ray counted {resource}s at `ray start`: without CANN's set_env.sh pyACL is missing and older Ray's "
            f"/dev/davinci? glob stops at 10; a narrower {platform.visible_devices_env} also caps it)"
            if has_host_stack(platform)
            else ""
        )
        return [fail("ray", f"Ray's {resource} total is {seen:g}, this node has {present}{why}", restart, **details)]
    if seen > present:
        summary = f"Ray's {resource} total {seen:g} exceeds the {present} devices of this node"
        return [warn("ray", summary, f"restart Ray with the real count: {restart}", **details)]
    return [ok("ray", f"Ray {resource} = {seen:g} = devices present ({source})", **details)]


# ------------------------------------------------------------------------------------------------ env

_VAR_NAME = re.compile(r"\b[A-Z][A-Z0-9_]{3,}\b")


def _env_fix(names: Iterable[str], env: Mapping[str, str], entries: Sequence[EnvVar], ctx: Context) -> str:
    """Shell commands that set ``names`` the way the kit's preset does (unset when the preset has no entry),
    skipping those already at the preset's value."""
    wanted = {e.name: e.value for e in entries}
    steps = [
        f"unset {name}" if wanted.get(name) is None else f"export {name}={wanted[name]}"
        for name in names
        if env.get(name) != wanted.get(name)
    ]
    return "; ".join(steps) + f" (or: {env_fix_line(ctx.profile, ctx.opts.phase, ctx.stack)})"


def check_env(ctx: Context) -> list[Result]:
    """Known-bad settings (the platform's ``env_problems``) FAIL; other departures from the kit's preset WARN;
    where the stack carries vllm-ascend, VLLM_ASCEND_* variables the installed vllm-ascend does not read WARN."""
    env, profile, phase = ctx.probes.env, ctx.profile, ctx.opts.phase
    entries = profile.env(phase, ctx.stack, env)
    results: list[Result] = []
    flagged: set[str] = set()
    for problem in profile.env_problems(env, phase):
        names = [n for n in dict.fromkeys(_VAR_NAME.findall(problem)) if n in env or any(e.name == n for e in entries)]
        flagged.update(names)
        check = f"env.bad.{names[0] if names else 'combination'}"
        results.append(fail(check, problem, _env_fix(names, env, entries, ctx)))

    diffs = []
    for entry in (e for e in entries if e.name not in flagged):
        current = env.get(entry.name)
        if entry.value is None and current is not None:
            diffs.append(f"{entry.name}={current!r} (kit: unset)")
        elif entry.value is not None and current != entry.value:
            diffs.append(f"{entry.name} {'unset' if current is None else repr(current)} (kit: {entry.value})")
    preset = f"the kit's {phase}/{profile.name} preset"
    if diffs:
        summary = f"{len(diffs)} of {len(entries)} variables differ from {preset}: " + "; ".join(diffs)
        results.append(warn("env.preset", summary, env_fix_line(profile, phase, ctx.stack), differences=diffs))
    else:
        results.append(ok("env.preset", f"matches {preset} ({len(entries)} variables)"))
    if any(package.dist == "vllm-ascend" for package in ctx.platform.pinned_stack):
        results.extend(_check_vllm_ascend_vars(ctx))
    return results


def _check_vllm_ascend_vars(ctx: Context) -> list[Result]:
    set_vars = sorted(name for name in ctx.probes.env if name.startswith("VLLM_ASCEND_"))
    if not set_vars:
        return []
    package = find_package_dir("vllm_ascend", ctx.probes.search_path)
    names = vllm_ascend_env_names(package) if package else None
    if package is None or names is None:
        return [skip("env.vllm_ascend", "vllm_ascend/envs.py not found: cannot tell which variables it reads")]
    version = dist_version("vllm-ascend", ctx.probes.search_path) or "installed"
    unread = [name for name in set_vars if name not in names and not package_mentions(package, name)]
    if not unread:
        return [ok("env.vllm_ascend", f"vllm-ascend {version} reads every VLLM_ASCEND_* variable set")]
    return [
        warn(
            "env.vllm_ascend",
            f"vllm-ascend {version} does not read {', '.join(unread)}: silently ignored (removed or renamed)",
            f"unset {' '.join(unread)}; their replacement, if any, is an --additional-config option of vllm-ascend",
            unread=unread,
        )
    ]


# ------------------------------------------------------------------------------------------------ sandbox


def sandbox_base(url: str) -> str:
    base = url.rstrip("/")
    for suffix in ("/run_code", "/v1/ping"):
        base = base.removesuffix(suffix)
    return base


def check_sandbox(ctx: Context) -> list[Result]:
    """The sandbox the run will call (:func:`ping_sandbox`), and whether bubblewrap can isolate code here
    (platforms/doctor/bwrap.py)."""
    from platforms.doctor.bwrap import check_bwrap

    return [*ping_sandbox(ctx), check_bwrap(ctx)]


def ping_sandbox(ctx: Context) -> list[Result]:
    """GET <base>/v1/ping of the sandbox the run will call: --sandbox-url, else RETOOL_SANDBOX_URL (the recipes'
    tool config reads that variable, so the doctor checks what the run would use)."""
    url, given_by = ctx.opts.sandbox_url, "--sandbox-url"
    if not url:
        url, given_by = ctx.probes.env.get(SANDBOX_URL_ENV, "").strip(), SANDBOX_URL_ENV
    start_it = "start it with `retool-sandbox serve --host 127.0.0.1 --port 8080` and keep it up during RL"
    if not url:
        return [
            skip(
                "sandbox",
                f"no --sandbox-url given and {SANDBOX_URL_ENV} unset "
                "(the ReTool tool config then uses http://127.0.0.1:8080/run_code)",
            )
        ]
    ping = sandbox_base(url) + "/v1/ping"
    host = urllib.parse.urlsplit(ping).hostname or ""
    # A proxy from the environment must not sit between the trainer and a sandbox on this host.
    loopback = host in ("localhost", "::1") or host.startswith("127.")
    opener = urllib.request.build_opener(*([urllib.request.ProxyHandler({})] if loopback else []))
    times = []
    for _ in range(SANDBOX_PINGS):
        t0 = time.perf_counter()
        try:
            with opener.open(ping, timeout=5) as response:
                body = response.read(256).decode(errors="replace").strip()
        except (urllib.error.URLError, OSError, ValueError) as exc:
            summary = f"{ping} unreachable: {exc} (URL from {given_by})"
            return [fail("sandbox", summary, f"{start_it}; or fix {given_by}", url=ping, given_by=given_by)]
        times.append((time.perf_counter() - t0) * 1000)
        if body.strip('"') != "pong":
            summary = f"{ping} answered {body[:60]!r}, not pong: not a SandboxFusion-compatible service"
            fix = f"point {given_by} at the sandbox; {start_it}"
            return [fail("sandbox", summary, fix, url=ping, given_by=given_by)]
    rtt = statistics.median(times)
    details = {"url": ping, "given_by": given_by, "rtt_ms": round(rtt, 2)}
    if rtt > SANDBOX_SLOW_MS:
        fix = "run the sandbox on the training host (localhost) with enough workers (--workers)"
        return [warn("sandbox", f"{ping}: pong, but slow ({rtt:.0f} ms median)", fix, **details)]
    return [ok("sandbox", f"{ping}: pong in {rtt:.1f} ms (median of {SANDBOX_PINGS})", **details)]


# ------------------------------------------------------------------------------------------------ paths and disk


def _cut_parquet(path: Path) -> bool:
    """A ``.parquet`` file without the ``PAR1`` magic at both ends: cut short or not parquet (a read of 8 bytes)."""
    if path.suffix != ".parquet" or not path.is_file() or path.stat().st_size == 0:
        return False
    with path.open("rb") as handle:
        head = handle.read(4)
        handle.seek(-4, os.SEEK_END)
        return head != b"PAR1" or handle.read(4) != b"PAR1"


def _data_file_result(
    check: str, path: Path, prepare: str, phase: str = "rl", messages: tuple[str, str] = ("messages", "messages_key")
) -> Result:
    """One data file by the dry run's own rule for ``phase`` (:func:`platforms.data_file.phase_problems`, which
    recipes/launch/run_inputs/validate_data.py:21 calls too): readable, columns of a known schema, rows, and the
    columns ``phase``'s dataset class reads. Issue 52 row 6: an RL parquet was "OK ... for an RL recipe" under
    ``--phase sft``, while the SFT dry run refused the same file. ``messages``: the recipes' column and the stack's
    key that names it (``VerlFacts.sft_key``), as the dry run names them."""
    found = data_file.inspect(path)
    problems = data_file.phase_problems(found, phase, *messages)
    if problems:
        return fail(check, f"data {path} " + "; ".join(problems), prepare)
    rows = f"{found.num_rows:,} rows, " if found.num_rows is not None else ""
    kind = data_file.describe(found)
    use = {"rl": "an RL recipe's TRAIN_FILE/VAL_FILE", "sft": "an SFT recipe's TRAIN_FILE/VAL_FILE"}.get(found.kind)
    size = f"{rows}{path.stat().st_size / 1e6:.1f} MB"
    return ok(check, f"data {path} ({size}): {kind}" + (f", for {use}" if use else ""))


def check_paths(ctx: Context) -> list[Result]:
    model, data = ctx.opts.model, ctx.opts.data
    if model is None and not data:
        return [skip("paths", "no --model / --data given")]
    results = []
    if model is not None:
        folder = model_folder.inspect(model)  # the dry run's rule too (weights, config, tokenizer): they agree
        problems = folder.problems
        if problems:
            fix = "download it, e.g. `hf download Qwen/Qwen3-4B-Instruct-2507 --local-dir DIR`, and pass that DIR"
            if folder.verl_checkpoint:
                fix = "merge it as the line says, and pass the merged folder (hf_merged)"
            elif model.is_dir() and any(p.startswith("is incomplete") for p in problems):
                lfs = f"`git lfs pull` in {model}, or " if any("Git LFS pointer" in p for p in problems) else ""
                fix = f"finish the download: {lfs}`hf download <its hub id> --local-dir {model}` (it skips what it has)"
            results.append(fail("paths.model", f"model {model} " + "; ".join(problems), fix))
        else:
            size = folder.weights_bytes
            shown = f"{size / 1e9:.1f} GB" if size >= 1e8 else f"{size / 1e6:.1f} MB"
            results.append(ok("paths.model", f"model {model} ({shown} of weights)"))
    prepare = "prepare the data (retool-prepare sft|rl|val --input ... --output F.parquet) and pass the file it wrote"
    for path in data:
        check = f"paths.data.{path.name}"
        damaged = [f for f in ([path] if path.is_file() else path.glob("*.parquet")) if _cut_parquet(f)]
        if damaged:  # issue 33: a download cut short passed as "OK ... (0.0 MB)"
            what = f"data {path}: {', '.join(f.name for f in damaged[:3])} is not a whole parquet file (no PAR1 ends)"
            results.append(fail(check, what, prepare))
        elif path.is_file() and path.stat().st_size > 0:
            messages = ("messages", ctx.stack.verl.sft_key("messages_key"))  # the recipes' sft.messages_key
            results.append(_data_file_result(check, path, prepare, ctx.opts.phase, messages))
        elif path.is_dir() and any(path.glob("*.parquet")):
            results.append(ok(check, f"data dir {path} ({len(list(path.glob('*.parquet')))} parquet files)"))
        else:
            results.append(fail(check, f"data {path} {'is empty' if path.exists() else 'does not exist'}", prepare))
    return results
