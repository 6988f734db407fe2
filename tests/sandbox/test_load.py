"""Load and overload: 500 requests at 32 concurrent clients lose nothing; a burst of simultaneous clients up to
workers + queue is queued, not refused; past that the answer is an immediate 503 with a SandboxError body (the
burst bench counts it), and clients that retry get through."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from sandbox.bench_burst import format_burst, run_burst

CODE = "print(sum(range(10**5)))"
EXPECTED = "4999950000\n"


async def _fire(url: str, total: int, concurrency: int, code: str = CODE) -> list[tuple[int, dict, float]]:
    results: list[tuple[int, dict, float]] = []
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(total):
        queue.put_nowait(i)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=120) as client:

        async def worker() -> None:
            while not queue.empty():
                queue.get_nowait()
                started = time.monotonic()
                resp = await client.post(url, json={"code": code, "language": "python", "run_timeout": 30})
                results.append((resp.status_code, resp.json(), time.monotonic() - started))

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return results


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.split()[-1])
    raise AssertionError(f"{name} not in metrics")


def test_500_requests_at_32_concurrency(server, helpers) -> None:
    before = _metric(httpx.get(f"{server.base}/metrics").text, 'retool_sandbox_requests_total{status="Success"}')
    results = asyncio.run(_fire(server.url, 500, 32))
    assert len(results) == 500
    bad = [
        (code, body.get("message"))
        for code, body, _ in results
        if code != 200 or body["status"] != "Success" or body["run_result"]["stdout"] != EXPECTED
    ]
    assert not bad, bad[:5]
    after = _metric(httpx.get(f"{server.base}/metrics").text, 'retool_sandbox_requests_total{status="Success"}')
    assert after - before == 500
    helpers.wait_until_clean(server)


def test_overload_is_an_immediate_503(helpers, tmp_path) -> None:
    isolation = "none" if helpers.bwrap_skip_reason() else "bwrap"
    with helpers.start_server(tmp_path, "--max-queue", "2", isolation=isolation, workers=1) as srv:
        slow = "import time\ntime.sleep(2)\nprint('ok')"
        results = asyncio.run(_fire(srv.url, 10, 10, slow))
        ok = [r for r in results if r[0] == 200]
        refused = [r for r in results if r[0] != 200]
        assert {r[0] for r in refused} == {503}
        assert all(r[1]["status"] == "SandboxError" and "overloaded" in r[1]["message"] for r in refused)
        assert all(r[1]["status"] == "Success" for r in ok)
        assert len(ok) >= 3 and len(refused) >= 1 and len(ok) + len(refused) == 10
        assert max(r[2] for r in refused) < 1.0, "overload answers must not wait"
        metrics = httpx.get(f"{srv.base}/metrics").text
        assert _metric(metrics, "retool_sandbox_rejected_total") == len(refused)
        # The burst bench counts those refusals (it never retries): 12 at once against 1 worker + 2 queued.
        burst = asyncio.run(run_burst(srv.url, "print", 12, timeout=30, deadline=60))
        assert burst.unavailable >= 1 and burst.ok >= 3 and burst.ok + burst.unavailable == 12
        assert not burst.clean and "unavailable: HTTP 503" in format_burst(burst)
        # A client that backs off and retries gets through.
        code, body, _ = srv.run("print('after the storm')")
        assert code == 200 and body["status"] == "Success"


@pytest.mark.parametrize("mode", ["cold"])
def test_cold_path(helpers, tmp_path, mode) -> None:
    """--cold runs each request in a fresh interpreter (nothing pre-imported) with the same limits and API."""
    with helpers.start_server(tmp_path, "--cold") as srv:
        assert srv.health["isolation"]["execution"] == mode and srv.health["preloaded"] == []
        code, body, _ = srv.run("import sympy; print(sympy.factorint(2**64 - 1))", run_timeout=30)
        assert body["status"] == "Success"
        assert body["run_result"]["stdout"] == "{3: 1, 5: 1, 17: 1, 257: 1, 641: 1, 65537: 1, 6700417: 1}\n"
        code, body, seconds = srv.run("while True: pass", run_timeout=1)
        assert body["run_result"]["status"] == "TimeLimitExceeded" and seconds <= 2.5
        results = asyncio.run(_fire(srv.url, 20, 8))
        assert all(c == 200 and b["run_result"]["stdout"] == EXPECTED for c, b, _ in results)
        helpers.wait_until_clean(srv)


def test_a_burst_within_workers_plus_queue_is_queued_not_refused(server) -> None:
    """256 clients at the same instant against 2 workers (default queue 1,024): every one answered correctly."""
    assert server.health["max_queue"] >= 256
    result = asyncio.run(run_burst(server.url, "print", 256, timeout=120, deadline=240))
    assert result.clean and result.ok == 256, format_burst(result)
    assert 0 < result.p50_ms <= result.p99_ms <= result.max_ms
    metrics = httpx.get(f"{server.base}/metrics").text
    assert _metric(metrics, "retool_sandbox_queued") == 0 and _metric(metrics, "retool_sandbox_in_flight") == 0
