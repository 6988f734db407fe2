"""The current stack's vLLM files its model probe under the current stack's own cache folder, and its entry collides
with the reference's: the same file name, another hash (tests/test_vllm_cache_root.py has why; the reference's side
runs there). The collision half needs the reference's venv too, and skips without it.

Runs under the current stack's interpreter (``bash scripts/test.sh --stack 0.9.1``); skips under another verl.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kit_testing import needs_verl_09, require_vllm
from vllm_cache_checks import check_vllm_files_its_probe_under_the_stacks_root, vllm_cache_facts

from platforms import stacks

pytestmark = needs_verl_09()


def test_the_current_stacks_vllm_files_its_probe_apart_from_the_references(tmp_path: Path) -> None:
    require_vllm()
    current = check_vllm_files_its_probe_under_the_stacks_root(stacks.CURRENT, tmp_path)
    reference_python = stacks.REFERENCE.venv / "bin" / "python"
    if not reference_python.exists():
        pytest.skip(f"the reference's venv ({stacks.REFERENCE.venv}) is not built: the collision needs both vLLMs")
    reference = vllm_cache_facts(reference_python, tmp_path, None)
    assert reference["name"] == current["name"], (reference, current)  # one file name for both vLLMs ...
    assert reference["hash"] != current["hash"], (reference, current)  # ... and each the other's miss
    assert Path(current["folder"]) != Path(reference["folder"]), (reference, current)
