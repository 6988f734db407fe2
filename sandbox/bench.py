"""Load test for any SandboxFusion-compatible ``/run_code`` URL: latency percentiles and requests/s.

Each snippet's stdout is checked, so a fast wrong answer counts as an error, not as throughput. ``--burst N``
switches to the burst mode (:mod:`sandbox.bench_burst`): N clients at the same instant, the way an RL step's tool
calls arrive.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

from sandbox.bench_burst import RECIPE_MOVED, run_burst_cli, write_json
from sandbox.bench_requests import SNIPPETS, percentile, run_code_payload
from sandbox.cli_errors import KitError, UsageError, check_writable


@dataclass
class BenchRow:
    snippet: str
    concurrency: int
    requests: int
    ok: int
    errors: int
    p50_ms: float
    p95_ms: float
    p99_ms: float
    req_per_s: float


async def _one(client: httpx.AsyncClient, url: str, code: str, expected: str, timeout: float) -> tuple[bool, float]:
    started = time.perf_counter()
    try:
        resp = await client.post(url, json=run_code_payload(code), timeout=timeout)
        body = resp.json()
        ok = (
            resp.status_code == 200
            and body.get("status") == "Success"
            and (body.get("run_result") or {}).get("stdout", "").strip() == expected
        )
    except (httpx.HTTPError, ValueError):
        ok = False
    return ok, time.perf_counter() - started


async def bench_one(url: str, snippet: str, concurrency: int, requests: int, warmup: int, timeout: float) -> BenchRow:
    code, expected = SNIPPETS[snippet]
    limits = httpx.Limits(max_connections=concurrency + 4, max_keepalive_connections=concurrency + 4)
    async with httpx.AsyncClient(limits=limits) as client:
        for _ in range(warmup):
            await _one(client, url, code, expected, timeout)
        queue: asyncio.Queue[int] = asyncio.Queue()
        for i in range(requests):
            queue.put_nowait(i)
        latencies: list[float] = []
        errors = 0

        async def drain() -> None:
            nonlocal errors
            while True:
                try:
                    queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                ok, seconds = await _one(client, url, code, expected, timeout)
                latencies.append(seconds)
                errors += not ok

        started = time.perf_counter()
        await asyncio.gather(*(drain() for _ in range(concurrency)))
        wall = time.perf_counter() - started
    return BenchRow(
        snippet=snippet,
        concurrency=concurrency,
        requests=requests,
        ok=requests - errors,
        errors=errors,
        p50_ms=round(percentile(latencies, 0.5) * 1000, 1),
        p95_ms=round(percentile(latencies, 0.95) * 1000, 1),
        p99_ms=round(percentile(latencies, 0.99) * 1000, 1),
        req_per_s=round(requests / wall, 1),
    )


def unreachable(url: str, timeout: float) -> str:
    """Why ``url`` cannot be benchmarked (no answer, or not a /run_code service), or "" when one request works.

    Without it a dead URL measured its own connection errors: "errors 3, p50 0.3 ms, 3073 req/s" and no reason."""
    code, _ = SNIPPETS["print"]
    try:
        response = httpx.post(url, json={"code": code, "language": "python"}, timeout=timeout)
    except httpx.HTTPError as exc:
        return f"cannot reach {url}: {type(exc).__name__}: {exc}"
    if response.status_code != 200:
        return f"{url} answered HTTP {response.status_code}: {response.text[:200]}"
    return ""


def format_table(rows: list[BenchRow]) -> str:
    header = (
        f"{'snippet':<8} {'conc':>5} {'reqs':>5} {'errors':>6} {'p50 ms':>9} {'p95 ms':>9} {'p99 ms':>9} {'req/s':>8}"
    )
    lines = [header, "-" * len(header)]
    for r in rows:
        lines.append(
            f"{r.snippet:<8} {r.concurrency:>5} {r.requests:>5} {r.errors:>6} {r.p50_ms:>9.1f} {r.p95_ms:>9.1f} "
            f"{r.p99_ms:>9.1f} {r.req_per_s:>8.1f}"
        )
    return "\n".join(lines)


async def run_bench(
    url: str, snippets: list[str], concurrencies: list[int], requests: int, warmup: int, timeout: float
) -> list[BenchRow]:
    rows = []
    for snippet in snippets:
        for concurrency in concurrencies:
            rows.append(await bench_one(url, snippet, concurrency, requests, warmup, timeout))
    return rows


def run_bench_cli(args: argparse.Namespace) -> int:
    if args.recipe:
        why, fix = RECIPE_MOVED
        raise UsageError(why, fix.format(recipe=args.recipe))
    if args.json_out:
        if Path(args.json_out).is_dir():
            raise UsageError(f"--json {args.json_out} is a folder", "name a file to write the results to")
        check_writable("--json", Path(args.json_out))  # before the benchmark, not after it (issue 33)
    burst = bool(args.burst)
    chosen = args.snippets or ("print" if burst else ",".join(SNIPPETS))
    snippets = [s.strip() for s in chosen.split(",") if s.strip()]
    unknown = [s for s in snippets if s not in SNIPPETS]
    if unknown:
        raise UsageError(f"--snippets: unknown {', '.join(unknown)}", f"choose from {', '.join(sorted(SNIPPETS))}")
    if burst:
        return run_burst_cli(args, snippets)
    concurrencies = args.concurrency  # parsed and checked by the CLI (sandbox/cli.py _counts)
    problem = unreachable(args.url, args.timeout)
    if problem:
        raise KitError(problem, "is the sandbox running? retool-sandbox serve")
    rows = asyncio.run(run_bench(args.url, snippets, concurrencies, args.requests, args.warmup, args.timeout))
    print(f"bench {args.url}")
    print(format_table(rows))
    if args.json_out:
        write_json(args.json_out, [asdict(r) for r in rows])
    return 1 if any(r.errors for r in rows) else 0
