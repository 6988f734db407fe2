"""``retool-sandbox bench --burst N``: N clients send one request each at the same instant.

This is the load an RL step puts on the sandbox: every agent-loop worker's tool threads (``max_concurrency``) fire
as the rollouts reach their code blocks, so up to agent workers x max_concurrency requests are in flight at once
(issue 14 item 2: 16 x 64 = 1,024 for the kit's recipes). The other bench mode keeps a fixed number of clients
busy and measures throughput; this one asks whether a burst of that size is answered without a single refusal,
and how long the last request waited. Bounded: N x rounds requests, each with ``--timeout``, all within
``--deadline`` seconds. A recipe's N comes from the kit's launcher (``retool-launch demand --recipe NAME``): the
sandbox stands alone and reads no recipe.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from sandbox.bench_requests import SNIPPETS, percentile, run_code_payload
from sandbox.cli_errors import UsageError
from sandbox.worker_os import raise_open_file_limit

#: HTTP answers a client treats as "try later": what the kit's tool retries and finally reports as unavailable.
UNAVAILABLE_STATUSES = frozenset({429, 502, 503, 504})


@dataclass
class BurstResult:
    snippet: str
    clients: int
    rounds: int
    ok: int
    failed: int
    unavailable: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    wall_s: float
    deadline_hit: bool
    examples: list[str]

    @property
    def clean(self) -> bool:
        return self.failed == 0 and self.unavailable == 0 and not self.deadline_hit


#: What ``bench --recipe NAME`` became: the kit's launcher composes the recipe and prints the number; the sandbox,
#: which stands alone (issue 22 item 5), takes it as ``--burst N``.
RECIPE_MOVED = (
    "--recipe: the sandbox no longer reads the kit's recipes",
    'retool-sandbox bench --burst "$(retool-launch demand --recipe {recipe})"',
)


def add_burst_options(bench: argparse.ArgumentParser) -> None:
    group = bench.add_argument_group("burst mode (the recipe's concurrency: every client at once)")
    group.add_argument(
        "--burst",
        type=int,
        metavar="N",
        help="N clients send one request each at the same instant; a recipe's N, the in-flight tool calls per "
        "sandbox: `retool-launch demand --recipe NAME [--hw PROFILE] [--layout per-node|shared]`",
    )
    group.add_argument("--recipe", help=argparse.SUPPRESS)  # only to say where it went (RECIPE_MOVED)
    group.add_argument("--rounds", type=int, default=1, help="bursts in a row (default %(default)s)")
    group.add_argument(
        "--deadline", type=float, default=600.0, help="stop the whole run after this many seconds (default 600)"
    )


def _classify(status: int | None, body: object, expected: str) -> str:
    if status is None or status in UNAVAILABLE_STATUSES:
        return "unavailable"
    if (
        status == 200
        and isinstance(body, dict)
        and body.get("status") == "Success"
        and (body.get("run_result") or {}).get("stdout", "").strip() == expected
    ):
        return "ok"
    return "failed"


def _decode_chunked(data: bytes) -> bytes:
    out = bytearray()
    while data:
        size_line, _, rest = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0] or b"0", 16)
        if size == 0:
            break
        out += rest[:size]
        data = rest[size + 2 :]
    return bytes(out)


async def post_json(url: str, payload: dict[str, object], timeout: float) -> tuple[int, bytes]:
    """One ``POST`` on its own connection (``Connection: close``), with asyncio streams only.

    Why not httpx here: on a 2-core host, httpx spent ~30 ms of CPU per request with 1,024 connections open, so the
    bench measured its own client; a bare HTTP/1.1 exchange costs a fraction of that, and the server's numbers show.
    """
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    body = json.dumps(payload).encode()
    head = (
        f"POST {parts.path or '/'} HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()

    async def exchange() -> bytes:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            writer.write(head + body)
            await writer.drain()
            return await reader.read()
        finally:
            writer.close()

    raw = await asyncio.wait_for(exchange(), timeout)
    header, _, content = raw.partition(b"\r\n\r\n")
    lines = header.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    if any(line.lower().startswith("transfer-encoding:") and "chunked" in line.lower() for line in lines[1:]):
        content = _decode_chunked(content)
    return status, content


async def _answer(url: str, payload: dict[str, object], timeout: float) -> tuple[int | None, object]:
    """One request's HTTP status (None: no complete answer) and its body: decoded JSON, raw text, or why none came."""
    try:
        status, content = await post_json(url, payload, timeout)
    except (OSError, TimeoutError, ValueError, IndexError) as exc:  # no (complete) HTTP answer
        return None, f"{type(exc).__name__}: {exc}"
    try:
        return status, json.loads(content)
    except ValueError:
        return status, content[:200].decode(errors="replace")


async def _release_rounds(
    one: Callable[[asyncio.Event], Awaitable[None]], clients: int, rounds: int, deadline: float, started: float
) -> int:
    """``rounds`` bursts of ``clients`` tasks released together; how many were unfinished at the deadline (0: none).

    Unfinished tasks are cancelled and the remaining rounds skipped: the run stays within ``deadline`` seconds."""
    for _ in range(rounds):
        go = asyncio.Event()
        tasks = [asyncio.create_task(one(go)) for _ in range(clients)]
        await asyncio.sleep(0)  # every task is parked on the event: they leave together
        go.set()
        left = deadline - (time.perf_counter() - started)
        _done, pending = await asyncio.wait(tasks, timeout=max(left, 0.0))
        if pending:
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            return len(pending)
    return 0


async def run_burst(
    url: str, snippet: str, clients: int, rounds: int = 1, timeout: float = 60.0, deadline: float = 600.0
) -> BurstResult:
    """Fire ``clients`` requests at once, ``rounds`` times; nothing is retried, so every refusal is counted."""
    if urlsplit(url).scheme != "http":
        raise ValueError(f"burst mode speaks plain http (loopback or cluster-internal), not {url}")
    code, expected = SNIPPETS[snippet]
    payload = run_code_payload(code)
    counts = {"ok": 0, "failed": 0, "unavailable": 0}
    latencies: list[float] = []
    examples: list[str] = []
    started = time.perf_counter()

    async def one(go: asyncio.Event) -> None:
        await go.wait()
        begun = time.perf_counter()
        status, body = await _answer(url, payload, timeout)
        kind = _classify(status, body, expected)
        counts[kind] += 1
        latencies.append(time.perf_counter() - begun)
        if kind != "ok" and len(examples) < 5:
            detail = body.get("message") if isinstance(body, dict) else body
            examples.append(f"{kind}: HTTP {status}: {str(detail)[:160]}")

    unfinished = await _release_rounds(one, clients, rounds, deadline, started)
    counts["unavailable"] += unfinished
    wall = time.perf_counter() - started
    return BurstResult(
        snippet=snippet,
        clients=clients,
        rounds=rounds,
        ok=counts["ok"],
        failed=counts["failed"],
        unavailable=counts["unavailable"],
        p50_ms=round(percentile(latencies, 0.5) * 1000, 1),
        p99_ms=round(percentile(latencies, 0.99) * 1000, 1),
        max_ms=round(max(latencies, default=float("nan")) * 1000, 1),
        wall_s=round(wall, 2),
        deadline_hit=unfinished > 0,
        examples=examples,
    )


def format_burst(result: BurstResult) -> str:
    header = f"{'snippet':<8} {'clients':>7} {'rounds':>6} {'ok':>6} {'failed':>6} {'unavail':>7} "
    header += f"{'p50 ms':>9} {'p99 ms':>9} {'max ms':>9} {'wall s':>7}"
    r = result
    row = f"{r.snippet:<8} {r.clients:>7} {r.rounds:>6} {r.ok:>6} {r.failed:>6} {r.unavailable:>7} "
    row += f"{r.p50_ms:>9.1f} {r.p99_ms:>9.1f} {r.max_ms:>9.1f} {r.wall_s:>7.2f}"
    lines = [header, "-" * len(header), row]
    if r.deadline_hit:
        lines.append("deadline reached: unfinished requests counted as unavailable")
    lines += [f"  e.g. {e}" for e in r.examples]
    return "\n".join(lines)


def server_capacity(url: str) -> dict[str, int] | None:
    """workers / max_queue / capacity from the kit sandbox's /health (None for other servers)."""
    parts = urlsplit(url)
    try:
        body = httpx.get(f"{parts.scheme}://{parts.netloc}/health", timeout=5).json()
        return {k: int(body[k]) for k in ("workers", "max_queue", "capacity")}
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return None


def write_json(path: str, rows: list[dict[str, object]]) -> None:
    """The ``--json`` results; the folders it names are made (the path was checked before the benchmark ran)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(rows, indent=2))


def run_burst_cli(args: argparse.Namespace, snippets: list[str]) -> int:
    clients = args.burst
    if clients < 1 or args.rounds < 1 or not 0 < args.deadline < float("inf"):  # nan too
        raise UsageError("--burst, --rounds and --deadline must be positive")
    raise_open_file_limit(clients + 256)  # one connection per client, and the process's own
    capacity = server_capacity(args.url)
    if capacity:
        note = "" if capacity["capacity"] >= clients else f"  <- below {clients}: expect refusals"
        print(f"server: {capacity['workers']} workers + {capacity['max_queue']} queue = {capacity['capacity']}{note}")
    results = []
    for snippet in snippets:
        print(f"burst {args.url}: {clients} clients at once x {args.rounds} round(s), snippet {snippet}", flush=True)
        result = asyncio.run(run_burst(args.url, snippet, clients, args.rounds, args.timeout, args.deadline))
        print(format_burst(result), flush=True)
        results.append(result)
    if args.json_out:
        write_json(args.json_out, [asdict(r) for r in results])
    return 0 if all(r.clean for r in results) else 1
