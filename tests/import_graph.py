"""The kit's own import graph, read from the source with ``ast`` (nothing is imported), and its cycles.

Why: issue 22 item 5 found modules that import each other (``sandbox/bench.py`` <-> ``sandbox/bench_burst.py``,
one direction inside a function), which an import-time check cannot see; every ``import`` statement counts here,
module level or inside a function. Used by ``tests/test_import_graph.py``; run it directly to print the cycles:

    python tests/import_graph.py
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("platforms", "npu_kernels", "recipes", "sandbox", "scripts")


def module_name(path: Path, root: Path = REPO_ROOT) -> str:
    """``recipes/launch/cli.py`` -> ``recipes.launch.cli``; a package's ``__init__.py`` is the package."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_files(root: Path = REPO_ROOT, packages: Iterable[str] = PACKAGES) -> dict[str, Path]:
    return {module_name(p, root): p for pkg in packages for p in sorted((root / pkg).rglob("*.py"))}


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The module a ``from X import ...`` names, relative imports resolved against ``module``."""
    if not node.level:
        return node.module or ""
    base = module.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def imported_names(path: Path, module: str) -> list[tuple[str, int]]:
    """Every module name ``path`` imports (any depth: functions, ``try`` blocks), with its line.

    ``from pkg import name`` yields ``pkg.name``: the submodule ``name`` when there is one, else ``pkg`` (the
    caller keeps the longest prefix that is a module), so ``from pkg import sub`` in ``pkg/__init__.py`` is no cycle."""
    names: list[tuple[str, int]] = []
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = _absolute(node, module, is_package)
            names += [(f"{target}.{alias.name}", node.lineno) for alias in node.names]
    return names


def owner(name: str, modules: set[str]) -> str | None:
    """The longest of the kit's modules that ``name`` is or lies inside (``a.b.func`` -> ``a.b``)."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def build_graph(files: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the kit's modules it imports (importing ``a.b.c`` also runs ``a`` and ``a.b``, not counted)."""
    modules = set(files)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in files.items():
        for name, _line in imported_names(path, module):
            target = owner(name, modules)
            if target and target != module:
                graph[module].add(target)
    return graph


def _prose(tree: ast.AST) -> set[int]:
    """The ids of string constants that are prose or fragments, not names: a string standing as a statement of its
    own (a docstring, an attribute's doc) and the literal pieces of an f-string."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            skip.add(id(node.value))
        elif isinstance(node, ast.JoinedStr):
            skip.update(id(value) for value in node.values)
    return skip


def named_modules(path: Path, modules: set[str]) -> list[tuple[str, int]]:
    """The kit's modules ``path`` names in a string, with the line: a plain string constant that is exactly a dotted
    module name of the tree (``"platforms.cpu_attention"``), as ``VERL_USE_EXTERNAL_MODULES`` or a worker's
    ``external_lib`` hands verl a module to import. An import check cannot see such a reference, yet verl runs it."""
    tree = ast.parse(path.read_text(), str(path))
    skip = _prose(tree)
    return [
        (node.value, node.lineno)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip
        if "." in node.value and node.value in modules
    ]


def build_name_graph(files: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the kit's modules it names in a string (:func:`named_modules`), itself left out."""
    modules = set(files)
    return {
        module: {name for name, _line in named_modules(path, modules) if name != module}
        for module, path in files.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def main() -> int:
    graph = build_graph(source_files())
    found = cycles(graph)
    edges = sum(len(targets) for targets in graph.values())
    print(f"{len(graph)} modules, {edges} import edges, {len(found)} cycle(s)")
    for component in found:
        print(f"  cycle of {len(component)}: {', '.join(component)}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
