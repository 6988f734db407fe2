"""vLLM's own batch limits for an OpenAI API server on this CPU, as the installed vLLM computes them.

Shared by the reference's test (tests/test_vllm_cpu.py, vLLM 0.11) and the current stack's
(tests/stack091/test_vllm_cpu_batch_limits_091.py, vLLM 0.23): the cpu platform hands verl these numbers
(platforms/cpu.py ``VLLM_CPU_BATCH_LIMITS``) instead of verl's GPU-sized defaults, so the test derives them from the
stack's vLLM rather than from a copy of its table. A fresh interpreter: importing vLLM here would change later tests'
import order (tests/test_vllm_cpu.py ``_AUTOBIND_011``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from kit_testing import kit_env

#: The engine config vLLM builds for its API server (the usage context verl's server is: an OpenAI-compatible
#: server), at tensor parallel 1, on the given model: the scheduler's two limits, printed as JSON.
_DEFAULTS = """
import json, sys
from vllm.engine.arg_utils import EngineArgs
from vllm.usage.usage_lib import UsageContext
args = EngineArgs(model=sys.argv[1], dtype="float32", enforce_eager=True, max_model_len=1024)
scheduler = args.create_engine_config(usage_context=UsageContext.OPENAI_API_SERVER).scheduler_config
limits = {"max_num_batched_tokens": scheduler.max_num_batched_tokens, "max_num_seqs": scheduler.max_num_seqs}
print("limits:", json.dumps(limits))
"""


def vllm_api_server_limits(model: Path) -> dict[str, int]:
    """``max_num_batched_tokens`` and ``max_num_seqs`` this interpreter's vLLM picks for an API server on a CPU."""
    proc = subprocess.run(
        [sys.executable, "-c", _DEFAULTS, str(model)],
        env=kit_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(line for line in reversed(proc.stdout.splitlines()) if line.startswith("limits:"))
    return json.loads(line.removeprefix("limits:"))
