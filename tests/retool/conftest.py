"""Fixtures for the ReTool recipe tests: sandboxes on loopback and the offline Qwen tokenizer.

Two sandboxes:

* ``stub_sandbox`` — the standard-library stub in ``sandbox_stub.py`` (always; the tool tests need its scripted
  faults: 503/504/500, bad JSON, slow answers);
* ``live_sandbox`` — what the integration test runs code in. ``RETOOL_TEST_SANDBOX`` picks it: ``kit`` (the kit's
  ``python -m sandbox serve`` on a free port; the test fails if it does not come up), ``stub``, or a URL (e.g. a
  real SandboxFusion ``http://host:8080/run_code``). Default ``auto``: the kit's sandbox if ``sandbox`` is
  importable and answers, else the stub. The choice is printed in the test summary.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kit_testing import free_port

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
FIXTURES = REPO_ROOT / "tests" / "fixtures" / "retool"


def _load_stub_module():
    name = "retool_sandbox_stub"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, HERE / "sandbox_stub.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def stub_sandbox_server():
    server = _load_stub_module().StubServer().start()
    yield server
    server.stop()


@pytest.fixture
def stub_sandbox(stub_sandbox_server):
    """The stub with no faults queued (and its request log cleared) for each test."""
    stub_sandbox_server.reset()
    yield stub_sandbox_server
    stub_sandbox_server.reset()


def _answers(url: str, timeout: float = 10.0) -> bool:
    """Whether ``url`` runs Python (direct connection, like the tool: no HTTP proxy on loopback)."""
    from recipes.retool.sandbox_client import SandboxClient

    client = SandboxClient(url, run_timeout_s=timeout, max_retries=0, request_margin_s=5)
    result = client.run("print(6 * 7)")
    client.close()
    return result.kind == "finished" and result.stdout.strip() == "42"


@dataclass
class LiveSandbox:
    kind: str
    url: str


def _start_kit_sandbox(log_path: Path) -> tuple[subprocess.Popen, str] | None:
    if importlib.util.find_spec("sandbox") is None:
        return None
    port = free_port()
    url = f"http://127.0.0.1:{port}/run_code"
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sandbox", "serve", "--host", "127.0.0.1", "--port", str(port)],
            cwd=REPO_ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if _answers(url, timeout=5):
            return proc, url
        time.sleep(0.3)
    _stop(proc)
    return None


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)  # its own session: the server and the workers it forked
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture(scope="session")
def live_sandbox(request, stub_sandbox_server, tmp_path_factory) -> Iterator[LiveSandbox]:
    choice = os.environ.get("RETOOL_TEST_SANDBOX", "auto")
    proc = None
    if choice.startswith("http"):
        if not _answers(choice):
            pytest.fail(f"RETOOL_TEST_SANDBOX={choice} does not run code")
        live = LiveSandbox("external", choice)
    elif choice in ("auto", "kit"):
        started = _start_kit_sandbox(tmp_path_factory.mktemp("kit-sandbox") / "serve.log")
        if started:
            proc, url = started
            live = LiveSandbox("kit (python -m sandbox serve)", url)
        elif choice == "kit":
            pytest.fail("RETOOL_TEST_SANDBOX=kit but the kit's sandbox did not start or did not run code")
        else:
            live = LiveSandbox("stub (tests/retool/sandbox_stub.py; the kit's sandbox is unavailable)", "")
    elif choice == "stub":
        live = LiveSandbox("stub (tests/retool/sandbox_stub.py)", "")
    else:
        pytest.fail(f"RETOOL_TEST_SANDBOX={choice!r}: expected auto, kit, stub or a URL")
    if not live.url:
        live.url = stub_sandbox_server.url
    request.config.stash[_SANDBOX_KEY] = f"{live.kind} at {live.url}"
    yield live
    if proc is not None:
        _stop(proc)


_SANDBOX_KEY = pytest.StashKey[str]()


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    used = config.stash.get(_SANDBOX_KEY, None)
    if used:
        terminalreporter.write_line(f"ReTool integration sandbox: {used}")


@pytest.fixture(scope="session")
def qwen_tokenizer_dir(tmp_path_factory) -> Path:
    """The real Qwen2.5/Qwen3 tokenizer and hermes chat template, built offline (recipes.smoke.offline_tokenizer)."""
    from recipes.smoke.offline_tokenizer import build_qwen_tokenizer

    return build_qwen_tokenizer(tmp_path_factory.mktemp("qwen-tokenizer"))


@pytest.fixture(scope="session")
def qwen_tokenizer(qwen_tokenizer_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(qwen_tokenizer_dir)
