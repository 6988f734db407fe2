"""The main job's prefix-caching check (tests/kit_main_job.py) against rl.log lines as each stack's engine prints them:
it must pass on the stack's own setting and fail on every other (issue 51: on, in blocks of 32, on the current stack;
off on the reference)."""

from __future__ import annotations

import pytest
from kit_main_job import check_rollout_engine_prefix_caching

from platforms import stacks

RAY = "\x1b[36m(vLLMHttpServer pid=1)\x1b[0m "
#: verl 0.9.1's vLLMHttpServer prints vLLM 0.23's arguments one a line (seen in this stop's rl.log)
ARGS_091 = "".join(f"{RAY} {arg},\n" for arg in ("'--enable_prefix_caching'", "'--block_size'")) + f"{RAY} '32']\n"
#: vLLM 0.11's engine config line (0.6.1)
CONFIG_061 = "INFO ... Initializing a V1 LLM engine with config: model=m, enable_prefix_caching=False, ...\n"


def test_each_stack_passes_on_its_own_engine_log() -> None:
    check_rollout_engine_prefix_caching(ARGS_091, stacks.CURRENT)
    check_rollout_engine_prefix_caching(CONFIG_061, stacks.REFERENCE)


@pytest.mark.parametrize(
    ("log", "stack"),
    [
        (ARGS_091, stacks.REFERENCE),  # on where IPEX dies
        (CONFIG_061, stacks.CURRENT),  # off where the current stack's speed rests on it
        (ARGS_091.replace("'--enable_prefix_caching'", "'--no-enable_prefix_caching'"), stacks.CURRENT),
        (ARGS_091.replace("'32'", "'128'"), stacks.CURRENT),  # on, but vLLM's default block: no turn reuses one
        (ARGS_091.replace("'--block_size',\n", "").replace("'32']", "'x']"), stacks.CURRENT),  # no block size logged
        ("actor_rollout_ref.rollout.enable_prefix_caching=True\n", stacks.CURRENT),  # the launch's word, not vLLM's
        ("", stacks.REFERENCE),  # nothing logged
        (CONFIG_061 + CONFIG_061.replace("=False", "=True"), stacks.REFERENCE),  # two engines, one of them on
    ],
)
def test_any_other_setting_fails(log: str, stack: stacks.Stack) -> None:
    with pytest.raises(AssertionError):
        check_rollout_engine_prefix_caching(log, stack)
