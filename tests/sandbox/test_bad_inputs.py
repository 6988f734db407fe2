"""Hostile and broken programs: each is answered within run_timeout + 1 s with the right status, and afterwards the
server is healthy and no request process or request directory is left (both isolation modes)."""

from __future__ import annotations

import os
import threading
import time
import uuid
from pathlib import Path

import pytest

SLACK_S = 1.0


def _claims(server, what: str) -> bool:
    """What the running server says it protects (tests hold it to exactly that, and skip the rest with a reason)."""
    iso = server.health["isolation"]
    if what == "files":  # an allowlist root, Landlock, or a uid that owns nothing
        return iso["mode"] == "bwrap" or iso["privilege"] == "uid" or iso["filesystem"] == "landlock"
    if what == "signals":  # a run cannot signal the worker: another uid, or Landlock's signal scope (ABI >= 6)
        return iso["privilege"] == "uid" or server.health["filesystem"].get("landlock_abi", 0) >= 6
    if what == "processes":
        return iso["privilege"] in ("uid", "ruid") or os.geteuid() != 0
    if what == "network":
        return iso["network_isolated"] == "true"
    raise ValueError(what)


@pytest.fixture
def settled(server, helpers):
    """After the test: the server still answers correctly and nothing of the runs is left behind."""
    yield server
    helpers.wait_until_clean(server)
    assert server.get_health()["status"] == "ok"
    code, body, _ = server.run("print('still fine')", run_timeout=10)
    assert code == 200 and body["run_result"]["stdout"] == "still fine\n", body


def test_infinite_loop(settled) -> None:
    code, body, seconds = settled.run("while True:\n    pass", run_timeout=2)
    assert code == 200 and body["status"] == "Failed"
    assert body["run_result"]["status"] == "TimeLimitExceeded" and body["run_result"]["return_code"] is None
    assert seconds <= 2 + SLACK_S


def test_fork_bomb(settled) -> None:
    bomb = (
        "import os, time\n"
        "while True:\n"
        "    try:\n"
        "        os.fork()\n"
        "    except OSError:\n"
        "        print('EAGAIN', flush=True)\n"
        "        time.sleep(0.05)\n"
    )
    code, body, seconds = settled.run(bomb, run_timeout=3)
    assert code == 200 and body["status"] == "Failed"
    assert body["run_result"]["status"] == "TimeLimitExceeded"
    assert seconds <= 3 + SLACK_S


def test_process_cap(settled) -> None:
    """The run's process budget (RLIMIT_NPROC of its uid) stops spawning; posix_spawn keeps this fast under load."""
    if not _claims(settled, "processes"):
        pytest.skip("this server runs code as root without a separate uid: no process cap, only the timeout")
    flood = (
        "import subprocess\n"
        "procs = []\n"
        "try:\n"
        "    for i in range(2000):\n"
        "        procs.append(subprocess.Popen(['sleep', '30']))\n"
        "    print('never capped')\n"
        "except OSError as e:\n"
        "    print('capped at', len(procs), type(e).__name__)\n"
    )
    code, body, seconds = settled.run(flood, run_timeout=20)
    out = body["run_result"]["stdout"]
    assert body["status"] == "Success" and out.startswith("capped at"), body
    assert int(out.split()[2]) <= 256  # the default --nproc
    assert seconds <= 20 + SLACK_S


def test_memory_limit_stops_4gb_but_not_numpy(settled) -> None:
    code, body, seconds = settled.run(
        "x = bytearray(4 * 1024**3)\nprint('allocated', len(x))", run_timeout=10, memory_limit_MB=1024
    )
    assert code == 200 and body["status"] == "Failed"
    assert body["run_result"]["status"] == "Finished" and body["run_result"]["return_code"] != 0
    assert "MemoryError" in body["run_result"]["stderr"] and "allocated" not in body["run_result"]["stdout"]
    assert seconds <= 10 + SLACK_S

    numeric = (
        "import numpy as np, scipy.linalg, sympy\n"
        "a = np.random.rand(300, 300)\n"
        "print(float(np.linalg.det(a @ a.T)) >= 0, sympy.isprime(2**61 - 1), scipy.linalg.norm(np.eye(4)))"
    )
    code, body, _ = settled.run(numeric, run_timeout=20, memory_limit_MB=1024)
    assert body["status"] == "Success", body
    assert body["run_result"]["stdout"] == "True True 2.0\n"


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_10mb_output_is_capped_not_stalled(settled, stream) -> None:
    limit = settled.health["output_limit_bytes"]
    program = f"import sys\nsys.{stream}.write('x' * 10_000_000)\nsys.{stream}.flush()\nprint('END')"
    code, body, seconds = settled.run(program, run_timeout=10)
    assert code == 200 and body["status"] == "Success", body["message"]
    text = body["run_result"][stream]
    assert text.startswith("x" * 1000) and "[output truncated:" in text
    assert limit <= len(text.encode()) < limit + 200
    assert seconds <= 10 + SLACK_S and body["run_result"]["execution_time"] < 5


def test_connect_to_server_port(settled) -> None:
    if not _claims(settled, "network"):
        pytest.skip("this server reports no network isolation (fallback without root): connections are possible")
    program = (
        f"import socket\ns = socket.create_connection(('127.0.0.1', {settled.port}), timeout=2)\nprint('CONNECTED')"
    )
    code, body, seconds = settled.run(program, run_timeout=5)
    assert code == 200 and body["status"] == "Failed"
    assert "CONNECTED" not in body["run_result"]["stdout"]
    assert "Error" in body["run_result"]["stderr"]  # ConnectionRefusedError / OSError: Network is unreachable
    assert seconds <= 5 + SLACK_S


def test_write_and_read_outside_the_temp_dir(settled, tmp_path: Path) -> None:
    if not _claims(settled, "files"):
        pytest.skip(f"this server reports no file protection: {settled.health['privilege_note']}")
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET")
    secret.chmod(0o600)
    targets = [tmp_path / "written-by-sandbox.txt", Path("/var/tmp") / f"sbx-{uuid.uuid4().hex}.txt"]
    program = (
        "import os\n"
        f"for path in {[str(t) for t in targets]!r}:\n"
        "    try:\n"
        "        open(path, 'w').write('pwned'); print('WROTE', path)\n"
        "    except OSError as e:\n"
        "        print('write refused', type(e).__name__)\n"
        "try:\n"
        f"    print('READ', open({str(secret)!r}).read())\n"
        "except OSError as e:\n"
        "    print('read refused', type(e).__name__)\n"
        "open('inside.txt', 'w').write('fine'); print('inside ok')\n"
    )
    try:
        code, body, seconds = settled.run(program, run_timeout=5)
        out = body["run_result"]["stdout"]
        assert "WROTE" not in out and "TOP-SECRET" not in out, out
        assert out.count("write refused") == 2 and "read refused" in out and "inside ok" in out
        assert all(not t.exists() for t in targets)
        assert seconds <= 5 + SLACK_S
    finally:
        for target in targets:
            target.unlink(missing_ok=True)


def test_runs_cannot_see_each_other(settled) -> None:
    """While one run keeps a secret in its directory, a concurrent run on the other worker cannot find or read it."""
    if not _claims(settled, "files"):
        pytest.skip(f"this server reports no file protection: {settled.health['privilege_note']}")
    holder = "open('secret.txt', 'w').write('RUN-A-SECRET')\nimport time\ntime.sleep(3)\nprint('done')"
    result: dict = {}
    thread = threading.Thread(target=lambda: result.update(a=settled.run(holder, run_timeout=10)))
    thread.start()
    time.sleep(1.0)
    roots = ["/tmp", settled.health["tmp_root"]]
    spy = (
        "import glob, os\n"
        f"for root in {roots!r}:\n"
        "    for path in glob.glob(os.path.join(root, '**', 'run-*', 'secret.txt'), recursive=True):\n"
        "        try:\n"
        "            print('LEAK', open(path).read())\n"
        "        except OSError:\n"
        "            print('denied', path)\n"
        "print('spy done')\n"
    )
    _, body, _ = settled.run(spy, run_timeout=5)
    thread.join()
    assert "LEAK" not in body["run_result"]["stdout"] and "spy done" in body["run_result"]["stdout"]
    assert result["a"][1]["run_result"]["stdout"] == "done\n"


def test_segfault(settled) -> None:
    code, body, seconds = settled.run("import ctypes\nctypes.string_at(0)", run_timeout=5)
    assert code == 200 and body["status"] == "Failed"
    assert body["run_result"]["status"] == "Finished" and body["run_result"]["return_code"] == -11
    assert seconds <= 5 + SLACK_S


def test_killing_the_parent(settled) -> None:
    program = "import os, signal, time\nos.kill(os.getppid(), signal.SIGKILL)\ntime.sleep(1)\nprint('survived')"
    code, body, seconds = settled.run(program, run_timeout=5)
    assert seconds <= 5 + SLACK_S
    if _claims(settled, "signals"):  # the worker cannot be signalled
        assert body["status"] == "Failed" and "PermissionError" in body["run_result"]["stderr"]
    else:  # same privileges: the worker dies, the run is a sandbox error, the worker is replaced
        assert body["status"] in ("Failed", "SandboxError"), body


def test_invalid_utf8_output(settled) -> None:
    code, body, _ = settled.run("import sys\nsys.stdout.buffer.write(b'\\xff\\xfe\\xfa ok\\n')", run_timeout=5)
    assert code == 200 and body["status"] == "Success"
    assert body["run_result"]["stdout"] == "\ufffd\ufffd\ufffd ok\n"


def test_10mb_stdin(settled) -> None:
    data = "a" * 10_000_000
    code, body, seconds = settled.run("import sys\nprint(len(sys.stdin.read()))", run_timeout=10, stdin=data)
    assert code == 200 and body["status"] == "Success" and body["run_result"]["stdout"] == "10000000\n"
    code, body, seconds = settled.run("print('ignored my stdin')", run_timeout=5, stdin=data)
    assert body["status"] == "Success" and seconds <= 5 + SLACK_S


def test_background_process_is_killed_with_the_run(settled, helpers) -> None:
    program = "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\nprint('parent exits')\n"
    code, body, seconds = settled.run(program, run_timeout=5)
    assert body["status"] == "Success" and seconds <= 5 + SLACK_S
    helpers.wait_until_clean(settled, timeout=5)
