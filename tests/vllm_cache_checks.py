"""What makes a per-stack vLLM cache folder necessary, asked of the installed vLLM itself (shared by
tests/test_vllm_cache_root.py under the reference's interpreter and tests/stack091/test_vllm_cache_root_091.py under
the current stack's): where it files a model class's probed facts for a given ``VLLM_CACHE_ROOT``, under which name,
and stamped with which hash. Each runs in a fresh interpreter, with ``HOME`` moved so nothing real is touched.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from platforms.base import VLLM_CACHE_ENV
from platforms.profiles import PROFILES
from platforms.stacks import Stack

#: The learning check's model class (SmolLM2 is a Llama): the entry both stacks' RL servers probe.
PROBED_CLASS = "LlamaForCausalLM"

_QUERY = f"""
    import hashlib, json
    import vllm.envs as envs
    from vllm.model_executor.models.registry import ModelRegistry
    entry = ModelRegistry.models[{PROBED_CLASS!r}]
    source = __import__(entry.module_name, fromlist=["_"]).__file__
    print(json.dumps({{
        "root": envs.VLLM_CACHE_ROOT,
        "folder": str(entry._get_cache_dir()),
        "name": entry._get_cache_filename(),
        "hash": hashlib.md5(open(source, "rb").read()).hexdigest(),
    }}))
"""


def vllm_cache_facts(python: str | Path, home: Path, root: str | None) -> dict[str, str]:
    """The vLLM of ``python``'s venv, asked with ``HOME=home`` and ``VLLM_CACHE_ROOT=root`` (None: unset): the root it
    resolves, the folder and file name of its cache entry for :data:`PROBED_CLASS`, the hash it stamps it with
    (the md5 of the model's source file, registry.py's ``module_hash``)."""
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin", "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    if root is not None:
        env[VLLM_CACHE_ENV] = root
    proc = subprocess.run(
        [str(python), "-c", textwrap.dedent(_QUERY)], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def check_vllm_files_its_probe_under_the_stacks_root(stack: Stack, home: Path) -> dict[str, str]:
    """This interpreter's vLLM, given the stack's root from the kit's RL environment, files the probe's entry inside
    it; with no root set it uses the folder the reference's entry names (vLLM's default). Returns the facts."""
    entries = {e.name: e.value for e in PROFILES["cpu"].env("rl", stack, {})}
    value = entries[VLLM_CACHE_ENV]
    facts = vllm_cache_facts(sys.executable, home, value)
    expected = str(home) + value[1:] if value.startswith("~/") else value  # vLLM expands "~" itself, on each node
    assert facts["root"] == expected, facts
    assert Path(facts["folder"]).parent == Path(expected), facts
    assert vllm_cache_facts(sys.executable, home, None)["root"] == str(home / ".cache" / "vllm")  # vLLM's default
    return facts
