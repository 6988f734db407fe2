"""The venv's torch comes from PyTorch's CPU index when it answers, from pip's own index otherwise, and says which.

``kit_install_cpu_torch`` (scripts/lib/venv.sh) runs against a stub interpreter: ``-m pip`` calls are recorded, not
run, and ``import torch`` reports a build chosen by the test, so the logic is exercised without downloading anything.
The "index" is a real HTTP server on loopback (reachable case) or a closed loopback port (unreachable case).
"""

from __future__ import annotations

import http.server
import os
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from kit_testing import REPO_ROOT, free_port

from platforms import stacks

STUB = """#!/usr/bin/env bash
# stub interpreter: record pip calls, fake `import torch`, run everything else with the real Python
if [[ $1 == -m && $2 == pip ]]; then
  shift 2
  echo "pip $*" >>"$STUB_LOG"
  [[ " $* " == *" --index-url $STUB_FAIL_INDEX "* ]] && exit 1
  exit 0
fi
if [[ $1 == -c && $2 == *"import torch"* ]]; then
  echo "$STUB_TORCH_REPORT"
  exit 0
fi
exec {python} "$@"
"""


@pytest.fixture
def index_url() -> Iterator[str]:
    """A loopback 'package index' that answers 200 on any path."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"<html></html>")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/whl/cpu"
    server.shutdown()


def _install(tmp_path: Path, index: str | None, report: str = "2.8.0+cpu (CPU build)", fail_index: str = "-"):
    stub = tmp_path / "python"
    stub.write_text(STUB.replace("{python}", sys.executable))
    stub.chmod(stub.stat().st_mode | stat.S_IXUSR)
    log = tmp_path / "pip.log"
    env = dict(os.environ, STUB_LOG=str(log), STUB_TORCH_REPORT=report, STUB_FAIL_INDEX=fail_index)
    env["KIT_INDEX_TIMEOUT_S"] = "3"
    env.pop("KIT_TORCH_INDEX_URL", None)
    if index is not None:
        env["KIT_TORCH_INDEX_URL"] = index
    script = (
        f"KIT_ROOT={REPO_ROOT}; source {REPO_ROOT}/pins.env; source {REPO_ROOT}/scripts/lib/venv.sh; "
        f"KIT_PYTHON={stub}; kit_install_cpu_torch"
    )
    proc = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60)
    calls = log.read_text().splitlines() if log.exists() else []
    return proc, calls


def test_default_index_is_pytorch_cpu() -> None:
    out = subprocess.run(
        ["bash", "-c", f"KIT_ROOT={REPO_ROOT}; source {REPO_ROOT}/scripts/lib/venv.sh; echo $KIT_TORCH_INDEX_URL"],
        env={k: v for k, v in os.environ.items() if k != "KIT_TORCH_INDEX_URL"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert out == "https://download.pytorch.org/whl/cpu"


def test_reachable_cpu_index_is_used(tmp_path: Path, index_url: str) -> None:
    proc, calls = _install(tmp_path, index_url)
    assert proc.returncode == 0, proc.stderr

    version = stacks.REFERENCE.pin("CPU_TORCH_VERSION")
    assert calls == [f"pip install --quiet --index-url {index_url} torch=={version}"]
    assert "== torch 2.8.0+cpu (CPU build)" in proc.stdout
    assert "WARNING" not in proc.stderr


def test_unreachable_index_falls_back_and_says_so(tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}/whl/cpu"  # nothing listens there
    proc, calls = _install(tmp_path, dead)
    assert proc.returncode == 0, proc.stderr
    assert len(calls) == 1 and "--index-url" not in calls[0], calls
    assert f"PyTorch's CPU index {dead} does not answer" in proc.stderr
    assert "KIT_TORCH_INDEX_URL" in proc.stderr


def test_index_without_the_wheel_falls_back(tmp_path: Path, index_url: str) -> None:
    proc, calls = _install(tmp_path, index_url, fail_index=index_url)
    assert proc.returncode == 0, proc.stderr
    assert len(calls) == 2 and "--index-url" in calls[0] and "--index-url" not in calls[1], calls
    assert "not installable from" in proc.stderr


def test_empty_index_uses_pips_own_and_reports_a_cuda_build(tmp_path: Path) -> None:
    proc, calls = _install(tmp_path, "", report="2.8.0 (CUDA 12.8 build)")
    assert proc.returncode == 0, proc.stderr
    assert len(calls) == 1 and "--index-url" not in calls[0], calls
    assert "does not answer" not in proc.stderr  # an empty value is a choice, not a failure
    assert "== torch 2.8.0 (CUDA 12.8 build)" in proc.stdout
    assert "the CUDA build of torch was installed" in proc.stderr
