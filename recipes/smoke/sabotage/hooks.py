"""The sabotage switches that patch verl (see :mod:`recipes.smoke.sabotage`), applied on import.

Imported in every verl process through verl's own hook (``VERL_USE_EXTERNAL_MODULES=recipes.smoke.sabotage.hooks``);
each switch is off unless its variable is set, and each patches verl only when the module it targets is first
imported (a post-import hook), so processes that never build that part do not import it for this.

* ``KIT_TEST_WEIGHT_SYNC=first-only``: the vLLM rollout applies only the first weight update it receives (the
  actor's initial weights) and ignores every later one, so it keeps sampling from the initial model while the actor
  trains: verl issue #4147's failure (``free_cache_engine=False`` never syncs).
* ``KIT_TEST_LOSS_MASK=tool-tokens``: ``ToolAgentLoop`` marks the tool's response tokens as the model's own
  (``response_mask`` 1 instead of 0), so the policy loss trains on text the sandbox wrote.

The third sabotage of the learning check, a reward with its sign flipped, is :mod:`.reward` beside this file.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Callable
from types import ModuleType

from recipes.smoke.sabotage import LOSS_MASK, MASK_SWITCH, MASK_TOOL_TOKENS, SYNC_FIRST_ONLY, SYNC_SWITCH, WEIGHT_SYNC

#: The class whose ``update_weights`` hands the trainer's weights to vLLM, per module: 0.6.1's
#: ``vLLMAsyncRollout`` (vllm_rollout_spmd.py), 0.9.1's ``ServerAdapter`` (vllm_rollout.py:210, the V1 trainer's
#: rollout side, which sends the weights to the server's workers).
ROLLOUTS = {
    "verl.workers.rollout.vllm_rollout.vllm_rollout_spmd": "vLLMAsyncRollout",
    "verl.workers.rollout.vllm_rollout.vllm_rollout": "ServerAdapter",
}
AGENT_LOOP = "verl.experimental.agent_loop.tool_agent_loop"


def _sync_first_only(module: ModuleType) -> None:
    cls = next(getattr(module, name) for name in ROLLOUTS.values() if hasattr(module, name))
    original = cls.update_weights

    async def update_weights(self, weights, **kwargs):
        self._kit_syncs = getattr(self, "_kit_syncs", 0) + 1
        if self._kit_syncs > 1:
            print(f"{WEIGHT_SYNC.marker}: update {self._kit_syncs} skipped", flush=True)
            return None
        return await original(self, weights, **kwargs)

    cls.update_weights = update_weights


def _mask_tool_tokens(module: ModuleType) -> None:
    cls = module.ToolAgentLoop
    original = cls._handle_processing_tools_state
    announced = []

    async def handle(self, agent_data):
        before = len(agent_data.response_mask)
        state = await original(self, agent_data)
        added = len(agent_data.response_mask) - before
        if added:  # the tool's response, appended with mask 0: train on it as if the model had written it
            agent_data.response_mask[before:] = [1] * added
            if not announced:
                announced.append(added)
                print(f"{LOSS_MASK.marker}: {added} tool response tokens trained on (first call)", flush=True)
        return state

    cls._handle_processing_tools_state = handle


class _PatchOnImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds a target module with the regular machinery, runs it, then applies its switch."""

    def __init__(self, patches: dict[str, Callable[[ModuleType], None]]) -> None:
        self.patches, self.loaders = patches, {}

    def find_spec(self, fullname, path, target=None):
        if fullname not in self.patches:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None:
            return None
        self.loaders[fullname], spec.loader = spec.loader, self
        return spec

    def create_module(self, spec):
        return self.loaders[spec.name].create_module(spec)

    def exec_module(self, module):
        self.loaders[module.__name__].exec_module(module)
        self.patches[module.__name__](module)


def _install() -> None:
    patches = {}
    if os.environ.get(SYNC_SWITCH) == SYNC_FIRST_ONLY:
        patches.update(dict.fromkeys(ROLLOUTS, _sync_first_only))
    if os.environ.get(MASK_SWITCH) == MASK_TOOL_TOKENS:
        patches[AGENT_LOOP] = _mask_tool_tokens
    if not patches or any(isinstance(finder, _PatchOnImport) for finder in sys.meta_path):
        return
    for name in [name for name in patches if name in sys.modules]:
        patches.pop(name)(sys.modules[name])
    sys.meta_path.insert(0, _PatchOnImport(patches))


_install()
