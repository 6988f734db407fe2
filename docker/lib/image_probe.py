"""Run inside a kit container by docker/test_images.py: what a user's first minutes in it exercise, as one JSON line.

* the sandbox as the recipes start it (``python -m sandbox serve`` on loopback): which isolation it could set up
  inside this container (bubblewrap needs namespaces a container's default seccomp profile may deny), and a real
  ``print(6 * 7)`` through it;
* the checkpoint rule of the launcher (recipes/launch/run_inputs/paths.py ``check_ckpt_dir``): a folder under the
  mounted ``CKPT_ROOT`` passes, one on the container's own filesystem is refused;
* a file written under ``CKPT_ROOT``, which the host then looks for after ``--rm``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _get(url: str, body: dict | None = None) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def sandbox_facts() -> dict:
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "sandbox", "serve", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                health = _get(f"{base}/health")
                if health.get("status") == "ok":
                    break
            except OSError:
                pass
            time.sleep(0.5)
        else:
            return {"error": "the sandbox did not become ready in 60 s"}
        ran = _get(f"{base}/run_code", {"code": "print(6 * 7)", "language": "python"})
        return {
            "isolation": health["isolation"]["mode"],
            "reason": health.get("isolation_reason", ""),
            "filesystem": health["isolation"].get("filesystem"),
            "stdout": (ran.get("run_result") or {}).get("stdout", ""),
        }
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()


def checkpoint_facts() -> dict:
    from recipes.launch.run_inputs.paths import check_ckpt_dir

    mounted = Path(os.environ["CKPT_ROOT"]) / "probe-run"
    mounted.mkdir(parents=True, exist_ok=True)
    (mounted / "written-inside.txt").write_text("written inside the container\n")
    return {
        "mounted_problems": [p.message for p in check_ckpt_dir(str(mounted), None)],
        "ephemeral_problems": [p.message for p in check_ckpt_dir("/root/ephemeral-ckpt", None)],
    }


def main() -> int:
    print(json.dumps({"sandbox": sandbox_facts(), "checkpoints": checkpoint_facts()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
