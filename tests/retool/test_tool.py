"""The code-interpreter tool (recipes.retool.tool) against the SandboxFusion-compatible stub on loopback."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest
import yaml

from recipes.retool import TOOL_CONFIG_PATH
from recipes.retool.sandbox_client import SandboxClient, parse_response, run_code_url
from recipes.retool.schema import TOOL_SCHEMA
from recipes.retool.tool import CodeInterpreterTool
from recipes.retool.tool_output import truncate_middle

VERL_OPAQUE = "no stdout here"


def make_tool(url: str, **config) -> CodeInterpreterTool:
    base = {"type": "native", "sandbox_fusion_url": url, "default_timeout": 10, "retry_backoff_s": 0.01}
    return CodeInterpreterTool({**base, **config})


def call(tool: CodeInterpreterTool, code, **kwargs) -> tuple[str, dict]:
    async def go():
        instance_id, _ = await tool.create()
        response, reward, metrics = await tool.execute(instance_id, {"code": code, **kwargs})
        await tool.release(instance_id)
        assert reward is None
        return response.text, metrics

    text, metrics = asyncio.run(go())
    assert VERL_OPAQUE not in text
    return text, metrics


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/run_code"


def test_shipped_yaml_builds_the_tool_through_verl(monkeypatch, stub_sandbox) -> None:
    from verl.tools.utils.tool_registry import initialize_tools_from_config

    monkeypatch.setenv("RETOOL_SANDBOX_URL", stub_sandbox.url)
    (tool,) = initialize_tools_from_config(str(TOOL_CONFIG_PATH))
    assert isinstance(tool, CodeInterpreterTool)
    assert tool.name == "code_interpreter" and tool.client.url == stub_sandbox.url
    assert tool.tool_schema.model_dump(exclude_unset=True, exclude_none=True) == TOOL_SCHEMA
    raw = yaml.safe_load(TOOL_CONFIG_PATH.read_text())["tools"][0]
    assert "tool_schema" not in raw, "one schema: recipes.retool.schema.TOOL_SCHEMA, not a copy in the YAML"
    assert call(tool, "6 * 7")[0] == "42"


def test_stdout_and_notebook_display(stub_sandbox) -> None:
    tool = make_tool(stub_sandbox.url)
    text, metrics = call(tool, "print('a')\nx = 20\nx + 1")
    assert text == "a\n21"
    assert metrics["calls"] == 1 and metrics["errors"] == 0 and metrics["status"] == "finished"
    sent = stub_sandbox.state.requests[-1]
    assert sent["language"] == "python" and sent["run_timeout"] == 10 and sent["memory_limit_MB"] == -1
    assert set(sent) == {"code", "language", "compile_timeout", "run_timeout", "memory_limit_MB", "stdin", "files",
                         "fetch_files"}  # fmt: skip


def test_fenced_code_and_assignment_last_line(stub_sandbox) -> None:
    tool = make_tool(stub_sandbox.url)
    assert call(tool, "Let me compute.\n```python\nimport math\nr = math.isqrt(99)\n```")[0] == "[no output]"
    assert call(tool, "```python\nvals = [k * k for k in range(4)]\nsum(vals)\n```")[0] == "14"


def test_traceback_reaches_the_model(stub_sandbox) -> None:
    text, metrics = call(make_tool(stub_sandbox.url), "print('before')\n1 / 0")
    assert text.startswith("before\n")
    assert "Traceback (most recent call last)" in text and "ZeroDivisionError: division by zero" in text
    assert metrics["errors"] == 1 and metrics["timeouts"] == 0


def test_timeout_keeps_partial_output_and_says_so(stub_sandbox) -> None:
    tool = make_tool(stub_sandbox.url, default_timeout=1)
    text, metrics = call(tool, "import time\nprint('partial', flush=True)\ntime.sleep(30)")
    assert text == "partial\n[timed out after 1 s]"
    assert metrics["timeouts"] == 1 and metrics["errors"] == 0
    assert call(tool, "while True: pass")[0] == "[timed out after 1 s]"


def test_retries_on_503_and_504(stub_sandbox) -> None:
    stub_sandbox.inject(fail_next=[503, 504])
    text, metrics = call(make_tool(stub_sandbox.url), "print('ok')")
    assert text == "ok"
    assert metrics["retries"] == 2 and len(stub_sandbox.state.requests) == 3


def test_overloaded_sandbox_after_all_retries(stub_sandbox) -> None:
    stub_sandbox.inject(fail_next=[503] * 10)
    text, metrics = call(make_tool(stub_sandbox.url, max_retries=2), "print('ok')")
    assert text.startswith("[sandbox unavailable:") and "HTTP 503" in text and "the code was not run" in text
    assert metrics["unavailable"] == 1 and len(stub_sandbox.state.requests) == 3


def test_connection_refused_is_explicit() -> None:
    tool = make_tool(closed_port_url(), max_retries=1)
    text, metrics = call(tool, "print(1)")
    assert text.startswith("[sandbox unavailable: cannot reach http://127.0.0.1:")
    assert "ConnectionRefusedError" in text and "after 2 attempts" in text
    assert metrics["unavailable"] == 1 and metrics["retries"] == 1


def test_server_errors_are_not_retried(stub_sandbox) -> None:
    tool = make_tool(stub_sandbox.url)
    stub_sandbox.inject(fail_next=[500])
    text, _ = call(tool, "print(1)")
    assert text.startswith("[sandbox error: HTTP 500") and len(stub_sandbox.state.requests) == 1
    stub_sandbox.inject(raw_next=["<html>oops</html>"])
    assert call(tool, "print(1)")[0].startswith("[sandbox error: invalid JSON from the sandbox")


def test_sandbox_error_status(stub_sandbox) -> None:
    text, metrics = call(make_tool(stub_sandbox.url, default_language="cobol"), "print(1)")
    assert text == "[sandbox error: language 'cobol' not supported]"
    assert metrics["sandbox_errors"] == 1


def test_slow_sandbox_is_not_rerun() -> None:
    """An HTTP read timeout may mean the code ran: the client reports it instead of running it again."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        url = f"http://127.0.0.1:{server.getsockname()[1]}/run_code"
        client = SandboxClient(url, run_timeout_s=0.1, request_margin_s=0.3, retry_backoff_s=0.01)
        start = time.monotonic()
        result = client.run("print(1)")
    assert result.kind == "unavailable" and "no answer from the sandbox within 0.5 s" in result.message
    assert result.retries == 0 and time.monotonic() - start < 3


def test_long_output_keeps_head_and_tail(stub_sandbox) -> None:
    tool = make_tool(stub_sandbox.url, max_output_chars=200)
    text, _ = call(tool, "print('HEAD' + 'x' * 50000)\nraise ValueError('the tail matters')")
    assert text.startswith("HEADxxx") and text.endswith("ValueError: the tail matters")
    assert "characters omitted ...]" in text and len(text) < 300
    assert truncate_middle("abcdef", 4) == "ab\n[... 2 characters omitted ...]\nef"
    assert truncate_middle("abc", 4) == "abc"


def test_bounded_concurrency_per_tool(stub_sandbox) -> None:
    tool = make_tool(stub_sandbox.url, max_concurrency=2)
    stub_sandbox.inject(delay_s=0.5)

    async def many():
        return await asyncio.gather(*(tool.execute(f"i{i}", {"code": f"print({i})"}) for i in range(6)))

    start = time.monotonic()
    results = asyncio.run(many())
    elapsed = time.monotonic() - start
    assert [r[0].text for r in results] == [str(i) for i in range(6)]
    assert stub_sandbox.state.max_in_flight <= 2
    assert elapsed >= 1.45  # at least three waves of 0.5 s: never more than two requests at once
    totals = tool.totals()
    assert totals["calls"] == 6 and totals["latency_s_max"] >= 0.5 and totals["latency_s_mean"] > 0


def test_invalid_calls_are_answered_not_raised(stub_sandbox) -> None:
    tool = make_tool(stub_sandbox.url)

    async def go(parameters):
        response, _, metrics = await tool.execute("id", parameters)
        return response.text, metrics

    for parameters in [{}, {"code": ""}, {"code": 42}, {"cmd": "print(1)"}]:
        text, metrics = asyncio.run(go(parameters))
        assert text.startswith("[invalid call: code_interpreter needs a non-empty string argument 'code']")
        assert metrics["sandbox_errors"] == 1
    assert not stub_sandbox.state.requests


def test_parse_sandboxfusion_responses() -> None:
    """The response shapes SandboxFusion documents (sandbox/server/sandbox_api.py)."""
    run_ok = {"status": "Finished", "execution_time": 0.01, "return_code": 0, "stdout": "hi\n", "stderr": ""}
    ok = {"status": "Success", "message": "", "compile_result": None, "executor_pod_name": None, "files": {},
          "run_result": run_ok}  # fmt: skip
    failed = {"status": "Failed", "message": "", "run_result": {"status": "Finished", "return_code": 1, "stdout": "",
              "stderr": "Traceback ...\nNameError: x"}}  # fmt: skip
    tle = {"status": "Failed", "run_result": {"status": "TimeLimitExceeded", "return_code": None, "stdout": "1\n2\n",
           "stderr": None}}  # fmt: skip
    error = {"status": "SandboxError", "message": "preexec_fn failed", "run_result": None}
    assert parse_response(ok).kind == "finished" and parse_response(ok).stdout == "hi\n"
    assert parse_response(failed).kind == "finished" and parse_response(failed).return_code == 1
    assert parse_response(tle).kind == "timeout" and parse_response(tle).stdout == "1\n2\n"
    assert parse_response(error).kind == "sandbox_error" and parse_response(error).message == "preexec_fn failed"
    assert parse_response(["x"]).kind == "sandbox_error"


def test_url_forms() -> None:
    assert run_code_url("http://h:8080") == "http://h:8080/run_code"
    assert run_code_url("http://h:8080/") == "http://h:8080/run_code"
    assert run_code_url("http://h:8080/run_code") == "http://h:8080/run_code"
    for bad in ["", "h:8080", "ftp://h/run_code"]:
        with pytest.raises(ValueError):
            run_code_url(bad)
