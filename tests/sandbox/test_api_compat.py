"""SandboxFusion API compatibility, checked through verl 0.6.1's own client code and the PyPI client."""

from __future__ import annotations

import base64
import importlib.util
import os
from pathlib import Path
from types import ModuleType

import pytest
import requests

REPO_ROOT = Path(__file__).resolve().parents[2]
VERL_CLIENT_REL = Path("verl/utils/reward_score/sandbox_fusion/utils.py")


def _verl_client_path() -> Path | None:
    """verl's sandbox client source: $VERL_SOURCE or $KIT_VERL_TREE, the kit's build/verl, or an installed verl."""
    candidates = [os.environ.get("VERL_SOURCE"), os.environ.get("KIT_VERL_TREE"), str(REPO_ROOT / "build" / "verl")]
    for root in filter(None, candidates):
        if (Path(root) / VERL_CLIENT_REL).is_file():
            return Path(root) / VERL_CLIENT_REL
    spec = importlib.util.find_spec("verl")  # top-level lookup: does not import verl (and torch)
    if spec and spec.origin:
        path = Path(spec.origin).parent.parent / VERL_CLIENT_REL
        if path.is_file():
            return path
    return None


@pytest.fixture(scope="module")
def verl_client() -> ModuleType:
    """Load verl's ``sandbox_fusion/utils.py`` by path: it needs only ``requests``; ``import verl`` pulls torch."""
    path = _verl_client_path()
    if path is None:
        pytest.skip("verl 0.6.1 source not found: set VERL_SOURCE, or pip install verl==0.6.1 --no-deps")
    spec = importlib.util.spec_from_file_location("verl_sandbox_fusion_utils", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_ping_health_metrics(server) -> None:
    assert requests.get(f"{server.base}/v1/ping", timeout=10).json() == "pong"
    health = server.get_health()
    assert health["status"] == "ok"
    assert health["isolation"]["mode"] == server.isolation
    assert "sympy" in health["preloaded"] and "numpy" in health["preloaded"]
    server.run("print(1)")
    text = requests.get(f"{server.base}/metrics", timeout=10).text
    for series in (
        "requests_total",
        "request_duration_seconds_bucket",
        "timeouts_total",
        "in_flight",
        "queued",
        "rejected_total",
        "isolation_info",
    ):
        assert f"retool_sandbox_{series}" in text, series
    assert f'mode="{server.isolation}"' in text
    success = [ln for ln in text.splitlines() if ln.startswith('retool_sandbox_requests_total{status="Success"}')]
    assert success and int(success[0].split()[-1]) >= 1


def test_verl_call_sandbox_api(server, verl_client) -> None:
    resp, err = verl_client.call_sandbox_api(server.url, "print(6 * 7)", None, 10, 10, 1024, "python")
    assert err is None, err
    assert resp["status"] == "Success"
    assert resp["run_result"] == {**resp["run_result"], "status": "Finished", "return_code": 0, "stdout": "42\n"}
    assert set(resp) >= {"status", "message", "compile_result", "run_result", "executor_pod_name", "files"}


def test_verl_tool_path_semantics(server, verl_client) -> None:
    """What SandboxFusionTool.execute_code sees: Finished (even on errors) → stdout+stderr reach the model."""
    _, ok = verl_client._process_single_case(0, None, None, server.url, "print('hi')", 10, 1024, "python")
    assert (ok["run_status"], ok["stdout"], ok["exit_code"], ok["api_status"]) == ("Finished", "hi\n", 0, "Success")

    _, err = verl_client._process_single_case(0, None, None, server.url, "import sys\n1/0", 10, 1024, "python")
    assert err["api_status"] == "Failed" and err["run_status"] == "Finished" and err["exit_code"] == 1
    assert "ZeroDivisionError" in err["stderr"]

    _, slow = verl_client._process_single_case(0, None, None, server.url, "while True: pass", 1, 1024, "python")
    assert slow["api_status"] == "Failed" and slow["run_status"] == "TimeLimitExceeded"

    _, stdin = verl_client._process_single_case(
        0, "3 4", None, server.url, "a, b = map(int, input().split()); print(a + b)", 10, 1024, "python"
    )
    assert stdin["stdout"] == "7\n"


def test_sandbox_fusion_pypi_client(server) -> None:
    sf = pytest.importorskip("sandbox_fusion")
    resp = sf.run_code(sf.RunCodeRequest(code="print('from client')", language="python"), endpoint=server.base)
    assert resp.status == sf.RunStatus.Success
    assert resp.run_result.status == sf.CommandRunStatus.Finished
    assert resp.run_result.stdout == "from client\n"
    failed = sf.run_code(sf.RunCodeRequest(code="raise SystemExit(3)", language="python"), endpoint=server.base)
    assert failed.status == sf.RunStatus.Failed and failed.run_result.return_code == 3


@pytest.mark.asyncio
async def test_sandbox_fusion_pypi_client_async(server) -> None:
    sf = pytest.importorskip("sandbox_fusion")
    resp = await sf.run_code_async(sf.RunCodeRequest(code="print(2 ** 10)", language="python"), endpoint=server.base)
    assert resp.status == sf.RunStatus.Success and resp.run_result.stdout == "1024\n"


def test_status_semantics(server) -> None:
    code, body, _ = server.run("import sys; print('out'); print('err', file=sys.stderr); sys.exit(4)")
    assert code == 200 and body["status"] == "Failed"
    rr = body["run_result"]
    assert (rr["status"], rr["return_code"], rr["stdout"], rr["stderr"]) == ("Finished", 4, "out\n", "err\n")

    code, body, _ = server.run("print('partial', flush=True)\nwhile True: pass", run_timeout=1)
    assert body["status"] == "Failed"
    rr = body["run_result"]
    assert rr["status"] == "TimeLimitExceeded" and rr["return_code"] is None and rr["stdout"] == "partial\n"
    assert 0.9 < rr["execution_time"] < 2.0


def test_files_round_trip(server) -> None:
    code = "data = open('in/data.txt').read()\nopen('out.txt', 'w').write(data.upper())\nprint(len(data))"
    _, body, _ = server.run(
        code, files={"in/data.txt": base64.b64encode(b"abc").decode()}, fetch_files=["out.txt", "nope.txt"]
    )
    assert body["status"] == "Success", body
    assert base64.b64decode(body["files"]["out.txt"]) == b"ABC"
    assert body["files"]["nope.txt"] is None


def test_warm_child_is_fresh(server) -> None:
    """State a run leaves in the interpreter must not reach the next run; random streams must differ."""
    server.run("import math; math.pi = 3")
    _, body, _ = server.run("import math; print(math.pi > 3)")
    assert body["run_result"]["stdout"] == "True\n"
    outs = {
        server.run("import numpy as np, random; print(np.random.randint(1 << 30), random.random())")[1]["run_result"][
            "stdout"
        ]
        for _ in range(3)
    }
    assert len(outs) == 3


@pytest.mark.parametrize(
    ("payload", "http_status", "fragment"),
    [
        ({"code": "print(1)", "language": "cpp"}, 422, "not supported"),
        ({"code": "print(1)", "language": "brainfuck"}, 422, "not supported"),
        ({"code": 123, "language": "python"}, 422, "code"),
        ({"language": "python"}, 422, "code"),
        ({"code": "print(1)", "run_timeout": "soon"}, 422, "run_timeout"),
        ({"code": "print(1)", "files": {"../x": ""}}, 422, "leaves"),
        ({"code": "print(1)", "files": {"/etc/x": ""}}, 422, "relative"),
        ({"code": "print(1)", "files": {"a": "%%%"}}, 422, "base64"),
        ([1, 2], 422, "object"),
    ],
)
def test_bad_requests_are_clear_errors(server, payload, http_status, fragment) -> None:
    resp = requests.post(server.url, json=payload, timeout=10)
    assert resp.status_code == http_status
    body = resp.json()
    assert body["status"] == "SandboxError" and fragment in body["message"], body
    assert "Traceback" not in resp.text


def test_malformed_json(server) -> None:
    resp = requests.post(server.url, data=b'{"code": "print(1)",', headers={"Content-Type": "application/json"})
    assert resp.status_code == 400
    assert resp.json()["status"] == "SandboxError" and "not valid JSON" in resp.json()["message"]
    resp = requests.post(server.url, data=b"\xff\xfe", headers={"Content-Type": "application/json"})
    assert resp.status_code == 400
