"""The doctor's live Ray query against a real (local, CPU-only) Ray cluster of the pinned version, started with a
made-up NPU total of 10 while the fake /dev has 16 davinci nodes: the A3 undercount, as `ray status` would show it."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from kit_testing import REPO_ROOT, kit_env

from platforms import NPU

DRIVER = textwrap.dedent(
    """
    import json, subprocess, sys
    import ray

    ray.init(num_cpus=1, resources={"NPU": 10}, include_dashboard=False, logging_level="ERROR")
    try:
        address = ray.get_runtime_context().gcs_address
        proc = subprocess.run(
            [sys.executable, "-m", "platforms.doctor", "--json", "--hw", "a3", "--only", "ray",
             "--dev-root", sys.argv[1], "--ray-address", address],
            capture_output=True, text=True, timeout=180,
        )
        print(json.dumps({"rc": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr[-2000:]}))
    finally:
        ray.shutdown()
    """
)


@pytest.mark.slow
def test_live_ray_cluster_undercount(tmp_path: Path) -> None:
    dev = tmp_path / "dev"
    dev.mkdir()
    for i in range(16):
        (dev / f"davinci{i}").touch()
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER, str(dev)],
        env=kit_env(KIT_DEVICE="npu"),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO_ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["rc"] == 1, result
    (ray,) = json.loads(result["stdout"])["checks"]
    assert ray["status"] == "FAIL" and ray["details"]["ray"] == 10 and ray["details"]["present"] == 16, ray
    assert ray["details"]["source"].startswith("ray cluster at ")
    assert shlex.join(["ray", "start", "--head", *NPU.ray_start_args(16)]) in ray["fix"]
