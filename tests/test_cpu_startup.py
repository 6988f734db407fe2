"""The cpu platform's RL start-up cuts: vLLM's platform probe without IPEX, lazy vLLM patches, no Ray dashboard.

Profiled on 2 cores (the smoke's RL stage, timestamped log): the first GRPO step ended 103.8 s after the stage began;
IPEX was imported by 8 processes, 6 of which never run a model (vLLM's XPU probe in the TaskRunner, the agent-loop
worker, each vLLM server and its engine core; the unpin module's eager import of vLLM's CPU worker in each server).
With these cuts: 86.0 s, IPEX in the 2 trainer ranks only. These tests check each cut in a fresh interpreter, where
what is imported can be seen, and that the platform hands them to verl.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import types

import pytest
from kit_testing import require_vllm

from platforms import post_import, stacks, vllm_cpu_probe
from platforms.base import RL_RAY_DASHBOARD_KEY
from platforms.cpu import EXTERNAL_MODULES_ENV, PACKED_ATTENTION_MODULE, VLLM_PROBE_MODULE, CpuPlatform
from recipes.smoke.supervisor import kit_env

IPEX = "intel_extension_for_pytorch"


def _fresh(code: str) -> dict:
    """Run ``code`` in a new interpreter of this venv; it prints one JSON line, returned parsed."""
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=kit_env(), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


PLATFORM_QUERY = f"""
    import json, sys
    from vllm.platforms import current_platform
    print(json.dumps({{"platform": type(current_platform).__name__, "ipex": {IPEX!r} in sys.modules}}))
"""


def test_vllm_resolves_the_cpu_platform_without_importing_ipex() -> None:
    require_vllm()
    assert _fresh(f"import {VLLM_PROBE_MODULE}\n" + textwrap.dedent(PLATFORM_QUERY)) == {
        "platform": "CpuPlatform",
        "ipex": False,
    }


def test_without_the_probe_module_vllm_imports_ipex() -> None:
    """What the cut saves: vLLM 0.11's XPU probe imports IPEX in every process that resolves the platform. If a
    vLLM upgrade stops doing that, this fails and the module can go."""
    require_vllm()
    assert _fresh(PLATFORM_QUERY) == {"platform": "CpuPlatform", "ipex": True}


def test_the_unpin_module_waits_for_vllms_cpu_worker() -> None:
    """Imported in every process that builds a model config (vLLM servers too), it must not import vLLM's CPU
    worker (and IPEX with it) itself; the worker gets wrapped when a trainer rank imports it."""
    require_vllm()
    result = _fresh(f"""
        import json, sys
        import platforms.vllm_cpu_probe, platforms.vllm_cpu_threads
        before = {{"worker": "vllm.v1.worker.cpu_worker" in sys.modules, "ipex": {IPEX!r} in sys.modules}}
        from vllm.v1.worker.cpu_worker import CPUWorker
        print(json.dumps({{**before, "wrapped": getattr(CPUWorker.init_device, "_kit_unpinned", False)}}))
    """)
    assert result == {"worker": False, "ipex": False, "wrapped": True}


def _fake_platforms(calls: list[str]) -> types.ModuleType:
    module = types.ModuleType("fake_vllm_platforms")

    def xpu_probe() -> str:
        calls.append("xpu")
        return "vllm.platforms.xpu.XPUPlatform"

    module.builtin_platform_plugins = {"xpu": xpu_probe}
    return module


def test_the_probe_runs_where_torch_has_xpu(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    platforms = _fake_platforms(calls)
    assert vllm_cpu_probe.patch(platforms) is True
    assert vllm_cpu_probe.patch(platforms) is False  # patched once
    monkeypatch.setattr(vllm_cpu_probe, "torch_has_xpu", lambda: False)
    assert platforms.builtin_platform_plugins["xpu"]() is None and calls == []
    monkeypatch.setattr(vllm_cpu_probe, "torch_has_xpu", lambda: True)
    assert platforms.builtin_platform_plugins["xpu"]() == "vllm.platforms.xpu.XPUPlatform" and calls == ["xpu"]


def test_when_imported_patches_after_the_first_import(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "kit_late_module.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen: list[int] = []

    def patch(module: types.ModuleType) -> None:
        seen.append(module.VALUE)
        module.VALUE = 2

    monkeypatch.delitem(sys.modules, "kit_late_module", raising=False)
    assert post_import.when_imported("kit_late_module", patch) == "later"
    assert seen == []  # nothing imported yet
    import kit_late_module  # noqa: PLC0415

    assert (seen, kit_late_module.VALUE) == ([1], 2)
    assert post_import.when_imported("kit_late_module", patch) == "now" and seen == [1, 2]
    monkeypatch.delitem(sys.modules, "kit_late_module")


def test_the_cpu_platform_names_the_probe_first_and_keeps_other_modules() -> None:
    def modules(environ: dict[str, str], phase: str = "rl") -> list[str]:
        entries = {e.name: e.value for e in CpuPlatform().env(phase, stacks.REFERENCE, environ)}
        return entries[EXTERNAL_MODULES_ENV].split(",")

    assert modules({}) == [VLLM_PROBE_MODULE, PACKED_ATTENTION_MODULE]
    hooks = "recipes.smoke.sabotage.hooks"  # the learning check's sabotage switches ride on the same variable
    kept = modules({EXTERNAL_MODULES_ENV: f"{hooks}, {VLLM_PROBE_MODULE}"})
    assert kept == [VLLM_PROBE_MODULE, PACKED_ATTENTION_MODULE, hooks]
    assert modules({}, "sft") == [PACKED_ATTENTION_MODULE]  # SFT reads no vLLM config: only the attention


def test_the_cpu_platform_starts_ray_without_its_dashboard() -> None:
    assert f"{RL_RAY_DASHBOARD_KEY}=False" in CpuPlatform().verl_overrides("rl", stacks.REFERENCE)
