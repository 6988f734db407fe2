"""``retool-sandbox serve`` (the service) and ``retool-sandbox bench`` (a load test for any /run_code URL)."""

from __future__ import annotations

import argparse
import errno
import logging
import os
import socket
import subprocess
import sys

from sandbox.bench_burst import add_burst_options
from sandbox.cli_errors import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    ArgumentParser,
    UsageError,
    entry_point,
    fail,
    input_path,
    output_file,
)
from sandbox.keepalive import BACKOFF_S, MAX_DEATHS, WINDOW_S, run_keep_alive
from sandbox.settings import DEFAULT_PRELOAD, SandboxSettings
from sandbox.worker_os import raise_open_file_limit

log = logging.getLogger("sandbox")
PROG = "retool-sandbox"


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
    return value


def _at_least_zero(text: str) -> int:
    """A whole number >= 0 (queue slots, MiB where 0 means none, a uid): a negative one was taken and made a sandbox
    that refuses every request or runs code as no one (issue 33)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is out of range (0 or more)")
    return value


def _seconds(text: str) -> float:
    """A positive, finite number of seconds: 0 or nan timed every run out at once, a negative one or nan ended the
    bench in ValueError from the socket layer (issue 33)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text} is not a positive number of seconds")
    return value


def _port(text: str) -> int:
    """A TCP port, 0 (any free one, reported once bound) to 65535: checked here, not an OverflowError in bind()."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text} is not a port (0-65535)")
    return value


def _counts(text: str) -> list[int]:
    """Comma-separated positive client counts (``1,8,32``)."""
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of whole numbers") from None
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give one or more counts of at least 1")
    return counts


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog=PROG,
        description="SandboxFusion-compatible /run_code service (warm fork-server workers, bubblewrap isolation).",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the /run_code HTTP service")
    defaults = SandboxSettings()
    _add_serve_capacity(serve, defaults)
    _add_serve_limits(serve, defaults)
    _add_serve_process(serve, defaults)
    _add_bench(sub.add_parser("bench", help="load-test a SandboxFusion-compatible /run_code URL"))
    return parser


def _add_serve_capacity(serve: argparse.ArgumentParser, defaults: SandboxSettings) -> None:
    """Where it listens and how many requests it takes at once (the sizing rule of docs/sandbox.md)."""
    serve.add_argument("--host", default=defaults.host, help="bind address (default %(default)s: loopback only)")
    serve.add_argument("--port", type=_port, default=defaults.port, help="default %(default)s; 0: any free port")
    serve.add_argument(
        "--workers",
        type=_positive_int,
        default=defaults.workers,
        help="concurrent executions (default: CPU cores = %(default)s)",
    )
    serve.add_argument(
        "--max-queue",
        type=_at_least_zero,
        default=defaults.max_queue,
        help="requests allowed to wait for a worker; more get the overload answer (default %(default)s). Sizing "
        "rule: --workers + --max-queue >= the tool calls in flight against this sandbox = the tool's max_concurrency "
        "x the agent-loop workers it serves (16 x 64 = 1,024 for the kit's recipes on one node); "
        "`retool-launch run RECIPE --dry-run` compares the two",
    )


def _add_serve_limits(serve: argparse.ArgumentParser, defaults: SandboxSettings) -> None:
    """What one run may use and see: output, isolation, warm workers, memory, time, processes, files."""
    serve.add_argument(
        "--output-limit-kb",
        type=_positive_int,
        default=defaults.output_limit_kb,
        help="cap on stdout and on stderr per run, KiB (default %(default)s)",
    )
    serve.add_argument(
        "--isolation",
        choices=("auto", "bwrap", "none"),
        default=defaults.isolation,
        help="bwrap: require bubblewrap; none: rlimit fallback; auto: bwrap if it runs (default)",
    )
    serve.add_argument(
        "--cold", action="store_true", help="fresh interpreter per request instead of warm fork-server workers (slower)"
    )
    serve.add_argument(
        "--recycle-after",
        type=_positive_int,
        default=defaults.recycle_after,
        help="replace a warm worker after this many requests (default %(default)s)",
    )
    serve.add_argument(
        "--preload",
        default=",".join(DEFAULT_PRELOAD),
        help="comma-separated modules warm workers import up front (missing ones are skipped)",
    )
    serve.add_argument(
        "--default-memory-mb",
        type=_at_least_zero,
        default=defaults.default_memory_mb,
        help="memory limit when a request sends memory_limit_MB <= 0; 0 = none (default %(default)s)",
    )
    serve.add_argument(
        "--max-run-timeout",
        type=_seconds,
        default=defaults.max_run_timeout,
        help="largest run_timeout accepted, seconds (default %(default)s)",
    )
    serve.add_argument(
        "--nproc",
        type=_positive_int,
        default=defaults.nproc,
        help="process/thread cap for the sandbox uid (RLIMIT_NPROC, default %(default)s)",
    )
    serve.add_argument(
        "--fsize-mb",
        type=_positive_int,
        default=defaults.fsize_mb,
        help="largest file a run may write, MiB (default %(default)s)",
    )


def _add_serve_process(serve: argparse.ArgumentParser, defaults: SandboxSettings) -> None:
    """Who runs the code, how overload is answered, what it may read, logging and the keep-alive supervisor."""
    serve.add_argument(
        "--sandbox-uid",
        type=_at_least_zero,
        default=defaults.sandbox_uid,
        help="uid/gid of worker slot 0's code when the server is root; slot i uses this minus i "
        "(default %(default)s, nobody)",
    )
    serve.add_argument(
        "--overload-status",
        type=int,
        choices=(429, 503, 504),
        default=defaults.overload_status,
        help="HTTP status of overload answers (verl 0.6.1 retries only 504; default %(default)s)",
    )
    serve.add_argument(
        "--allow-path",
        type=input_path(),  # checked before the port is taken
        action="append",
        default=[],
        metavar="PATH",
        help="a host file or directory request code may read, on top of the filesystem allowlist (repeatable)",
    )
    serve.add_argument("--log-level", default="info", help="uvicorn/sandbox log level (default %(default)s)")
    serve.add_argument(
        "--keep-alive",
        action="store_true",
        help=f"run the server as the child of a supervisor that restarts it on the same port {BACKOFF_S:g} s after "
        "it dies (killed by a signal or a non-zero exit); gives up when it dies more than "
        f"{MAX_DEATHS} times within {WINDOW_S:g} s; SIGTERM/SIGINT stop both, without a restart. In-flight requests "
        "of a server that dies get no answer (the kit's tool reports them as sandbox errors)",
    )


def _add_bench(bench: argparse.ArgumentParser) -> None:
    bench.add_argument("--url", default="http://127.0.0.1:8080/run_code", help="default %(default)s")
    bench.add_argument(
        "--concurrency", type=_counts, default="1,8,32", help="comma-separated client counts (default %(default)s)"
    )
    bench.add_argument(
        "--requests",
        type=_positive_int,
        default=100,
        help="timed requests per snippet and concurrency (default %(default)s)",
    )
    bench.add_argument(
        "--snippets",
        help="subset of: print, numpy, sympy, sum, loop (default: all; print in burst mode)",
    )
    bench.add_argument("--warmup", type=_at_least_zero, default=3, help="untimed requests first (default %(default)s)")
    bench.add_argument("--timeout", type=_seconds, default=60.0, help="HTTP timeout per request, s")
    bench.add_argument("--json", dest="json_out", type=output_file(".json"), help="also write the results as JSON here")
    bench.add_argument("--force", action="store_true", help="replace a --json file that exists (default: refused)")
    add_burst_options(bench)


def _listen(host: str, port: int) -> socket.socket | None:
    """Bind before anything starts, so a busy port is one line and exit 1, and "ready" is only ever logged after it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(4096)
    except OSError as exc:
        sock.close()
        why = "the port is in use (another sandbox? stop it or pick --port)" if exc.errno == errno.EADDRINUSE else ""
        fail(PROG, f"cannot listen on {host}:{port}: {why or exc.strerror or exc}")
        return None
    sock.set_inheritable(True)
    if port == 0:
        print(f"{PROG}: --port 0: listening on {host}:{sock.getsockname()[1]}", file=sys.stderr, flush=True)
    return sock


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from sandbox.app import create_app
    from sandbox.isolation import plan_isolation

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    sock = _listen(args.host, args.port)
    if sock is None:
        return EXIT_FAILED
    args.port = sock.getsockname()[1]  # the port taken when --port 0 asked for any
    missing = [p for p in args.allow_path if not os.path.exists(p)]
    if missing:
        sock.close()
        return fail(PROG, f"--allow-path {missing[0]} does not exist", "give a path on this machine", EXIT_USAGE)
    settings = SandboxSettings(
        host=args.host,
        port=args.port,
        workers=args.workers,
        max_queue=args.max_queue,
        output_limit_kb=args.output_limit_kb,
        isolation=args.isolation,
        cold=args.cold,
        recycle_after=args.recycle_after,
        preload=tuple(m.strip() for m in args.preload.split(",") if m.strip()),
        default_memory_mb=args.default_memory_mb,
        max_run_timeout=args.max_run_timeout,
        nproc=args.nproc,
        fsize_mb=args.fsize_mb,
        sandbox_uid=args.sandbox_uid,
        sandbox_gid=args.sandbox_uid,
        overload_status=args.overload_status,
        allow_paths=tuple(str(p) for p in args.allow_path),
    )
    raise_open_file_limit(4 * (settings.workers + settings.max_queue) + 256)  # sockets + per-run pipes
    try:
        plan = plan_isolation(settings)
    except (RuntimeError, OSError, ValueError, subprocess.SubprocessError) as exc:
        sock.close()
        return fail(PROG, str(exc))
    config = uvicorn.Config(
        create_app(settings, plan),
        host=settings.host,
        port=settings.port,
        log_level=args.log_level.lower(),
        access_log=False,
        backlog=4096,
        timeout_keep_alive=30,
    )
    server = uvicorn.Server(config)
    try:
        server.run(sockets=[sock])
    finally:
        plan.cleanup()
    return EXIT_OK if server.started else EXIT_FAILED


@entry_point(PROG)
def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    if args.command == "serve" and args.keep_alive:
        if args.port == 0:
            raise UsageError(
                "--keep-alive with --port 0: each restart would listen on another free port",
                "give a fixed --port the clients can keep using",
            )
        return run_keep_alive(argv, args.host, args.port)
    if args.command == "serve":
        return _serve(args)
    from sandbox.bench import run_bench_cli

    return run_bench_cli(args)


if __name__ == "__main__":
    sys.exit(main())
