"""The kit's agent loop (recipes/retool/agent_loop.py) on either stack's verl, without a server: what the tests of
its loss-mask counts share (tests/retool/test_agent_loop.py on verl 0.6.1, tests/stack091/test_agent_loop_091.py on
0.9.1). Importable as ``agent_loop_witness`` (tests/ is on sys.path under pytest).

* :func:`check_registration`: verl's own agent loop worker still loads ``agent_loop_config_path`` over its own
  registrations, and the kit's file registers ``tool_agent`` to the kit's class (what hydra builds from it).
* :func:`sabotaged`: verl's ``ToolAgentLoop`` patched by the learning check's loss-mask sabotage
  (recipes/smoke/sabotage/hooks.py), as the hook does it in a run, undone afterwards.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator
from typing import Any

from recipes.retool import AGENT_LOOP_CONFIG_PATH
from recipes.retool.schema import AGENT_NAME

KIT_LOOP = "recipes.retool.agent_loop.KitToolAgentLoop"


def check_registration() -> None:
    """The registry verl's worker builds from ``agent_loop_config_path``: ``tool_agent`` is the kit's class."""
    from hydra.utils import get_class
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop import agent_loop

    # verl registers its ToolAgentLoop on import (the package's __init__ imports tool_agent_loop) ...
    assert agent_loop._agent_loop_registry[AGENT_NAME]["_target_"].endswith("tool_agent_loop.ToolAgentLoop")
    # ... and its worker's __init__ loads the config list after, replacing entries by name (0.6.1's
    # AgentLoopWorkerBase, under the ray actor AgentLoopWorker; 0.9.1's AgentLoopWorker)
    worker = getattr(agent_loop, "AgentLoopWorkerBase", None) or agent_loop.AgentLoopWorker
    sources = inspect.getsource(worker.__init__)
    assert "agent_loop_config_path" in sources, "verl's agent loop worker no longer reads agent_loop_config_path"
    assert "_agent_loop_registry[agent_loop_config.name] = agent_loop_config" in sources, sources
    entries = OmegaConf.load(AGENT_LOOP_CONFIG_PATH)
    registry = {**agent_loop._agent_loop_registry, **{entry.name: entry for entry in entries}}
    assert registry[AGENT_NAME]["_target_"] == KIT_LOOP, registry[AGENT_NAME]
    from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop

    assert issubclass(get_class(KIT_LOOP), ToolAgentLoop)


@contextlib.contextmanager
def sabotaged() -> Iterator[None]:
    """verl's ToolAgentLoop with the loss-mask sabotage applied to the base class (as the hook does on import)."""
    from verl.experimental.agent_loop import tool_agent_loop

    from recipes.smoke.sabotage import hooks

    original = tool_agent_loop.ToolAgentLoop._handle_processing_tools_state
    hooks._mask_tool_tokens(tool_agent_loop)
    try:
        yield
    finally:
        tool_agent_loop.ToolAgentLoop._handle_processing_tools_state = original


def counts(output: Any) -> dict[str, int]:
    from recipes.retool.schema import LOSS_MASK_FIELD

    return output.extra_fields[LOSS_MASK_FIELD]
