"""The launch walk: which of the kit's modules a launch's data passes through, and how often it comes back.

Why (issue 41): following the ``args`` of ``python -m recipes.launch run ...`` through the code entered 16 modules,
coming back 30 times, because the dry-run table derived its numbers while it rendered. This measures the walk the
same way every time, so a change that makes it longer shows in a number:

- record the call tree of the kit's functions under ``recipes.launch.cli._run`` for one in-process dry run;
- keep a call when one of its arguments is the launch's data (the argparse ``Namespace``, the ``Plan``, the resolved
  ``DictConfig``, the plan's ``Facts``; a list or tuple holding one counts) or when it leads to such a call;
- read each call site once (a reader follows a call once, however often a loop makes it);
- walk the kept tree depth first at module granularity: entering a module by a call or by a return is an entry, and
  an entry into a module the walk has been in before is a return.

Run it directly to print the walk: ``python tests/launch_walk.py qwen3_4b_dapo a3``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

KIT_PACKAGES = ("recipes.", "platforms", "npu_kernels")


@dataclass
class Call:
    module: str
    site: tuple[str, int, str, int] | None  # caller file and line, callee file and first line
    carries: bool
    children: list[Call] = field(default_factory=list)


@dataclass(frozen=True)
class Walk:
    modules: list[str]  # the walk, one entry per module entered

    @property
    def distinct(self) -> int:
        return len(set(self.modules))

    @property
    def entries(self) -> int:
        return len(self.modules) - 1

    @property
    def returns(self) -> int:
        seen: set[str] = set()
        count = 0
        for module in self.modules:
            count += module in seen
            seen.add(module)
        return count

    def entered(self, module: str) -> int:
        return Counter(self.modules)[module]

    def line(self) -> str:
        return " > ".join(m.replace("recipes.launch.", "") for m in self.modules)


def _followed_types() -> tuple[type, ...]:
    from omegaconf import DictConfig

    from recipes.launch.planning.facts import Facts
    from recipes.launch.planning.plan import Plan

    return argparse.Namespace, Plan, DictConfig, Facts


def _carries(value: object, types: tuple[type, ...]) -> bool:
    if isinstance(value, types):
        return True
    return isinstance(value, list | tuple) and 0 < len(value) < 50 and any(isinstance(v, types) for v in value)


def _record(argv: list[str]) -> Call:
    from recipes.launch import cli

    types = _followed_types()
    root: list[Call] = []
    stack: list[tuple[object, Call]] = []

    def profile(frame, event: str, _arg: object) -> None:  # noqa: ANN001 (sys.setprofile's frame)
        if event not in ("call", "return"):
            return
        code, module = frame.f_code, frame.f_globals.get("__name__", "")
        if event == "return":
            if stack and stack[-1][0] is frame:
                stack.pop()
            return
        if not stack:
            if module == "recipes.launch.cli" and code.co_name == "_run":
                root.append(Call(module, None, True))
                stack.append((frame, root[0]))
            return
        if not module.startswith(KIT_PACKAGES):
            return
        names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
        caller = frame.f_back
        site = (caller.f_code.co_filename, caller.f_lineno, code.co_filename, code.co_firstlineno)
        call = Call(module, site, any(_carries(frame.f_locals.get(n), types) for n in names))
        stack[-1][1].children.append(call)
        stack.append((frame, call))

    sys.setprofile(profile)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            cli.main(argv)
    finally:
        sys.setprofile(None)
    assert root, "recipes.launch.cli._run never ran"
    return root[0]


def _prune(call: Call, seen: set) -> list[Call]:
    kept = []
    for child in call.children:
        if child.site in seen:
            continue
        seen.add(child.site)
        child.children = _prune(child, seen)
        if child.carries or child.children:
            kept.append(child)
    return kept


def _visit(call: Call, modules: list[str]) -> None:
    if modules[-1] != call.module:
        modules.append(call.module)
    for child in call.children:
        _visit(child, modules)
        if modules[-1] != call.module:
            modules.append(call.module)


def walk(recipe: str, hw: str, home: Path) -> Walk:
    """The walk of ``run RECIPE --hw HW --dry-run --no-path-check`` with ``HOME=home`` (imports warmed first, so
    that only the launch's own calls are recorded)."""
    from recipes.launch import cli

    argv = ["run", recipe, "--hw", hw, "--dry-run", "--no-path-check"]
    saved = os.environ.get("HOME")
    os.environ["HOME"] = str(home)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            cli.main(argv)
        root = _record(argv)
    finally:
        if saved is not None:
            os.environ["HOME"] = saved
    root.children = _prune(root, set())
    modules = [root.module]
    _visit(root, modules)
    return Walk(modules)


if __name__ == "__main__":
    import tempfile

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    name = sys.argv[1] if len(sys.argv) > 1 else "qwen3_4b_dapo"
    profile_name = sys.argv[2] if len(sys.argv) > 2 else "a3"
    with tempfile.TemporaryDirectory() as tmp:
        found = walk(name, profile_name, Path(tmp))
    print(f"{name} on {profile_name}: {found.distinct} modules, {found.entries} entries, {found.returns} returns")
    print(f"  {found.line()}")
