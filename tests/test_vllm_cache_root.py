"""Each stack's vLLM keeps its own cache folder (``VLLM_CACHE_ROOT`` in the RL environment, platforms/base.py
``vllm_cache_env``, from ``Stack.vllm_cache_root``).

Why: both stacks' vLLMs file what they probe of a model class (in a fresh interpreter that imports vLLM, before each
server starts) under one file name in ``<root>/modelinfos``, stamped with the hash of their own model source. With one
folder, the learning check run on one stack after the other (CI's order, ``bench_learn_speed --all-stacks``) found the
other stack's entry, saw the hash differ and probed again: a ``python -m vllm.model_executor.models.registry``
process on each run's path to its servers (docs/measurements/vllm_cache_root.yaml).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kit_testing import interpreter_stack, require_vllm
from vllm_cache_checks import check_vllm_files_its_probe_under_the_stacks_root

from platforms import stacks
from platforms.base import VLLM_CACHE_ENV
from platforms.profiles import PROFILES


def _root(profile: str, stack: stacks.Stack, environ: dict[str, str], phase: str = "rl") -> str | None:
    values = [e.value for e in PROFILES[profile].env(phase, stack, environ) if e.name == VLLM_CACHE_ENV]
    assert len(values) <= 1, values
    return values[0] if values else None


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_every_stack_has_its_own_vllm_cache_on_every_platform(profile: str) -> None:
    roots = {stack.name: _root(profile, stack, {}) for stack in stacks.STACKS.values()}
    assert None not in roots.values(), roots
    assert len(set(roots.values())) == len(roots), roots  # one folder per stack
    assert roots[stacks.REFERENCE.name] == "~/.cache/vllm", roots  # the reference keeps vLLM's own folder


def test_the_folder_follows_xdg_and_a_users_own_root_is_kept() -> None:
    xdg = {"XDG_CACHE_HOME": "/data/cache/"}
    assert _root("cpu", stacks.CURRENT, xdg) == f"/data/cache/vllm{stacks.CURRENT.folder_suffix}"
    assert _root("a3", stacks.CURRENT, {VLLM_CACHE_ENV: "/mnt/vllm"}) == "/mnt/vllm"
    assert _root("cpu", stacks.REFERENCE, {VLLM_CACHE_ENV: " /mnt/vllm "}) == "/mnt/vllm"


def test_sft_runs_no_vllm_and_gets_no_cache_folder() -> None:
    assert all(_root(p, s, {}, "sft") is None for p in PROFILES for s in stacks.STACKS.values())


def test_this_stacks_vllm_files_its_model_probe_under_the_stacks_folder(tmp_path: Path) -> None:
    require_vllm()
    facts = check_vllm_files_its_probe_under_the_stacks_root(interpreter_stack(), tmp_path)
    assert facts["name"] == "vllm-model_executor-models-llama-LlamaForCausalLM.json", facts
