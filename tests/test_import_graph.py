"""Imports run one way: the kit's modules form no cycle, function-level imports included (issue 22 item 5).

What would fail: two modules that import each other, at module level or lazily inside a function (the way
``sandbox/bench.py`` and ``sandbox/bench_burst.py`` did: one direction hidden in ``run_bench_cli``), or a longer
ring. The graph is read with ``ast`` (tests/import_graph.py), so the check imports nothing and takes a second.
"""

from __future__ import annotations

from pathlib import Path

from import_graph import build_graph, cycles, imported_names, owner, source_files


def test_the_kit_has_no_import_cycles() -> None:
    found = cycles(build_graph(source_files()))
    assert found == [], f"modules that import each other (move what they share into a module both import): {found}"


def test_the_recipes_reach_no_doctor_internals() -> None:
    """What the launchers share with the doctor lives below both (``npu_kernels/platform/netprobe.py``); the recipes
    run the doctor as a command (``retool-doctor``), never through its modules."""
    files = source_files()
    wrong = [
        f"{module}:{line} imports {name}"
        for module, path in files.items()
        if module.startswith("recipes.")
        for name, line in imported_names(path, module)
        if (owner(name, set(files)) or "").startswith("npu_kernels.doctor.")
    ]
    assert wrong == [], "move what the recipes need from the doctor down to npu_kernels/platform/"


def _tree(root: Path, files: dict[str, str]) -> dict[str, Path]:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return source_files(root, ["pkg"])


def test_the_check_sees_a_cycle_through_a_function_level_import(tmp_path: Path) -> None:
    files = _tree(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg import a\n",  # a package importing its submodule is no cycle
            "pkg/a.py": "from pkg.shared import X\nimport pkg.c\n",
            "pkg/b.py": "def f():\n    from pkg.a import X\n",
            "pkg/c.py": "try:\n    from pkg import b\nexcept ImportError:\n    pass\n",
            "pkg/shared.py": "X = 1\n",
        },
    )
    assert cycles(build_graph(files)) == [["pkg.a", "pkg.b", "pkg.c"]]


def test_a_shared_module_below_both_is_no_cycle(tmp_path: Path) -> None:
    files = _tree(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from pkg.b import g\nfrom pkg.shared import X\n",
            "pkg/b.py": "def g():\n    from pkg.shared import X\n",
            "pkg/shared.py": "X = 1\n",
        },
    )
    assert cycles(build_graph(files)) == []
