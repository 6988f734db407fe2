"""Issue 33, journey "Offline bare metal": with the network really off (a new network namespace, ``unshare``), the
commands ``retool-bundle install`` prints work from the bundle alone: a clean venv gets the kit's ``[sandbox]`` extra
and the packages its workers preload with ``pip install --no-index``, ``retool-sandbox serve`` answers a request
that imports them, and ``setup_verl.sh --sdist`` builds the patched verl tree from the bundled sdist.

To stay quick, the bundle is a small one: ``retool-bundle create`` with the hub replaced by local fixtures and only
its sandbox-wheel and sdist downloads run for real (the network is on for that step only; about 60 MB, scipy's
wheel 35 MB of it, numpy's 18 MB; pip's cache makes later runs faster). The whole module takes about a minute.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from kit_testing import REPO_ROOT

from platforms import stacks
from recipes.retool import bundle, bundle_offline

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "retool"
SOURCES = {"ReTool-SFT": "retool_sft_raw.jsonl", "DAPO-Math-17k": "dapo_math_17k.jsonl", "aime_2025": "aime_2025.jsonl"}
KIT_PARTS = (
    "pyproject.toml",
    "README.md",
    "pins.env",
    "platforms",
    "npu_kernels",
    "recipes",
    "sandbox",
    "scripts",
    "patches",
)
PREFIX = "bare metal, no network: "
CODE = "import numpy, scipy.special, sympy, mpmath; print(int(numpy.arange(5).sum()), sympy.factorint(360), 'ok')"


def _unshare() -> list[str]:
    """``unshare --net`` as root, ``unshare -rn`` (a user namespace) otherwise; skips when the kernel refuses."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.skip("needs unshare and ip (util-linux, iproute2) to switch the network off")
    tried = []
    for argv in (["unshare", "--net"], ["unshare", "-rn"]):
        proc = subprocess.run([*argv, "ip", "link", "set", "lo", "up"], capture_output=True, text=True)
        if proc.returncode == 0:
            return argv
        tried.append(f"{' '.join(argv)}: {proc.stderr.strip()}")
    pytest.skip(f"the kernel refuses a network namespace here ({'; '.join(tried)})")


def _fake_hub(repo_id: str, repo_type: str, dest: Path) -> None:
    dest.mkdir(parents=True)
    if repo_type == "dataset":
        shutil.copy(FIXTURES / SOURCES[repo_id.split("/")[-1]], dest / "train.jsonl")
    else:
        (dest / "config.json").write_text('{"model_type": "qwen3"}')


def _sandbox_and_sdist_only(argv: Sequence[str]) -> None:
    """Run create's sandbox-wheel and verl-sdist downloads for real; skip the GB of pinned wheels (test_bundle.py)."""
    if any(word.endswith((bundle_offline.SANDBOX_REQUIREMENT, bundle_offline.VERL_REQUIREMENT)) for word in argv):
        proc = subprocess.run([*argv, "--quiet"], capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"download (network on) failed: {' '.join(argv)}\n{proc.stderr[-2000:]}"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[str]]:
    """A copy of the kit (so nothing is written into the checkout), a small bundle made by create, and the lines
    install prints: (kit copy, bundle, bare-metal commands)."""
    root = tmp_path_factory.mktemp("offline")
    kit = root / "kit"
    for part in KIT_PARTS:
        source = REPO_ROOT / part
        if source.is_dir():
            shutil.copytree(source, kit / part, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            kit.mkdir(exist_ok=True)
            shutil.copy(source, kit / part)
    out = root / "bundle"
    started = time.monotonic()
    bundle.create(out, bundle.DEFAULT_MODEL, [], True, stacks.REFERENCE, _fake_hub, _sandbox_and_sdist_only)
    print(f"small bundle: {time.monotonic() - started:.1f} s of downloads (network on)")
    patch = pytest.MonkeyPatch()
    patch.setattr(bundle_offline, "KIT_ROOT", kit)
    try:
        lines = bundle_offline.next_steps(out, list(bundle.verify(out)["files"]), stacks.REFERENCE)
    finally:
        patch.undo()
    return kit, out, lines


def _offline_env(home: Path) -> dict[str, str]:
    """No pip configuration (this machine's points at local wheel folders) and no path to the checkout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") and k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return dict(env, HOME=str(home), PIP_CONFIG_FILE=os.devnull, GIT_CONFIG_NOSYSTEM="1")


REQUEST = f"""
import json, sys, time, urllib.request
base = "http://127.0.0.1:8080"
for _ in range(600):
    try:
        health = json.load(urllib.request.urlopen(base + "/health", timeout=2)); break
    except OSError:
        time.sleep(0.2)
body = json.dumps({{"code": {CODE!r}, "language": "python"}}).encode()
req = urllib.request.Request(base + "/run_code", body, {{"Content-Type": "application/json"}})
answer = json.load(urllib.request.urlopen(req, timeout=60))
json.dump({{"preloaded": health["preloaded"], "answer": answer}}, sys.stdout)
"""


def test_install_prints_commands_that_work_with_the_network_off(
    installed: tuple[Path, Path, list[str]], tmp_path: Path
) -> None:
    unshare = _unshare()
    kit, out, lines = installed
    setup, pip, serve = lines  # all three, in the order the user runs them
    assert setup.startswith(f"bash {kit}/scripts/setup_verl.sh --source sdist --sdist {out}/sdist/verl-"), setup
    assert "--no-index --find-links" in pip and serve.startswith("retool-sandbox serve")
    venv = tmp_path / "venv"
    tree = tmp_path / "verl"
    script = f"""set -euo pipefail
ip link set lo up
{os.path.realpath(sys.executable)} -m venv {venv}
echo "venv: $SECONDS s"
{pip.replace(sys.executable, str(venv / "bin" / "python"))} --quiet --no-compile
echo "pip install: $SECONDS s"
{setup.split("#")[0]} --dest {tree} > {tmp_path}/setup.log
echo "setup_verl.sh: $SECONDS s"
{venv}/bin/{serve.split("#")[0]} --workers 1 > {tmp_path}/serve.log 2>&1 &
trap 'kill $!' EXIT
{venv}/bin/python {tmp_path}/request.py > {tmp_path}/answer.json
echo "serve + request: $SECONDS s"
"""
    (tmp_path / "request.py").write_text(REQUEST)
    started = time.monotonic()
    proc = subprocess.run(
        [*unshare, "bash", "-c", script], env=_offline_env(tmp_path), capture_output=True, text=True, timeout=300
    )
    took = time.monotonic() - started
    serve_log = (tmp_path / "serve.log").read_text() if (tmp_path / "serve.log").exists() else ""
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}\n{serve_log[-2000:]}"
    result = json.loads((tmp_path / "answer.json").read_text())
    assert {"numpy", "sympy", "mpmath", "scipy"} <= set(result["preloaded"]), result
    assert result["answer"]["status"] == "Success", result
    assert result["answer"]["run_result"]["stdout"].split()[-1] == "ok", result
    setup_log = (tmp_path / "setup.log").read_text().splitlines()
    patches = sorted((kit / "patches").glob("*.patch"))
    assert setup_log[-1] == f"verl 0.6.1: {len(patches)} patches applied", setup_log
    applied = subprocess.run(["git", "-C", str(tree), "log", "--format=%s", "v0.6.1..HEAD"], capture_output=True)
    assert len(applied.stdout.splitlines()) == len(patches)
    print(f"offline venv + sandbox request + verl tree: {took:.1f} s ({', '.join(proc.stdout.splitlines())})")


def test_setup_verl_without_the_sdist_fails_fast_in_one_line_offline(tmp_path: Path) -> None:
    unshare = _unshare()
    script = REPO_ROOT / "scripts" / "setup_verl.sh"
    started = time.monotonic()
    proc = subprocess.run(
        [*unshare, "bash", str(script), "--source", "sdist", "--dest", str(tmp_path / "verl")],
        env=dict(_offline_env(tmp_path), PYTHON=sys.executable),
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    assert "could not download the verl==0.6.1 sdist" in lines[0] and "--sdist FILE" in lines[0], lines
    assert time.monotonic() - started < 30 and not (tmp_path / "verl").exists()
