"""Run a patch on a module right after it is first imported, or at once if it already is: lazy platform fixes.

Why: the cpu platform's fixes to vLLM (:mod:`.vllm_cpu_probe`, :mod:`.vllm_cpu_threads`) are imported by verl in
processes that may never use the module they fix (``VERL_USE_EXTERNAL_MODULES`` reaches every verl process, the
model's ``external_lib`` every process that builds a model config, vLLM servers included). Importing the target
eagerly to patch it costs what the fix saves: ``vllm.v1.worker.cpu_worker`` pulls IPEX in (4.4 s of CPU), and
``vllm.platforms`` 1.3 s on top of torch. A finder on ``sys.meta_path`` that wraps the target's loader patches it in
the processes that import it and costs nothing elsewhere.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable, Sequence
from types import ModuleType

Patch = Callable[[ModuleType], object]


class _PatchingLoader(importlib.abc.Loader):
    """Runs the real loader, then the patches on the module it filled."""

    def __init__(self, loader: importlib.abc.Loader, patches: list[Patch]) -> None:
        self._loader = loader
        self._patches = patches

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        for patch in self._patches:
            patch(module)


class PostImportFinder(importlib.abc.MetaPathFinder):
    """Finds the modules it has patches for through the other finders and hands back specs with a patching loader."""

    def __init__(self) -> None:
        self.patches: dict[str, list[Patch]] = {}

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        patches = self.patches.get(fullname)
        if not patches:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _PatchingLoader(spec.loader, list(patches))
                return spec
        return None


def _finder() -> PostImportFinder:
    for finder in sys.meta_path:
        if isinstance(finder, PostImportFinder):
            return finder
    finder = PostImportFinder()
    sys.meta_path.insert(0, finder)
    return finder


def when_imported(name: str, patch: Patch) -> str:
    """Apply ``patch`` to module ``name`` now if it is imported ("now"), else right after its first import
    ("later"). A patch must tolerate being applied twice (a module can be reloaded; a hook imported twice)."""
    module = sys.modules.get(name)
    if module is not None:
        patch(module)
        return "now"
    patches = _finder().patches.setdefault(name, [])
    if patch not in patches:
        patches.append(patch)
    return "later"
