"""Imports run one way: the kit's modules form no cycle, and each layer imports only the layers below it.

What would fail: two modules that import each other, at module level or lazily inside a function (issue 22 item 5:
``sandbox/bench.py`` and ``sandbox/bench_burst.py``, one direction hidden in ``run_bench_cli``), or a longer ring;
and an import up the layers (issue 41: the recipe code's ``bundle.py`` took two folder names from the launcher, the
launcher's ``restart.py`` and ``node_sandbox.py`` took a process helper from the main job). The graph is read with
``ast`` (tests/import_graph.py), so the check imports nothing and takes a second.
"""

from __future__ import annotations

from pathlib import Path

from import_graph import build_graph, build_name_graph, cycles, imported_names, owner, source_files


def test_the_kit_has_no_import_cycles() -> None:
    found = cycles(build_graph(source_files()))
    assert found == [], f"modules that import each other (move what they share into a module both import): {found}"


def test_the_recipes_reach_no_doctor_internals() -> None:
    """What the launchers share with the doctor lives below both (``platforms/netprobe.py``); the recipes
    run the doctor as a command (``retool-doctor``), never through its modules."""
    files = source_files()
    wrong = [
        f"{module}:{line} imports {name}"
        for module, path in files.items()
        if module.startswith("recipes.")
        for name, line in imported_names(path, module)
        if (owner(name, set(files)) or "").startswith("platforms.doctor.")
    ]
    assert wrong == [], "move what the recipes need from the doctor down to platforms/"


#: The kit's layers, lowest first: a module may import its own layer and those before it. The sandbox is a service
#: that stands alone: it imports none of them (the recipe code may read its settings, e.g. what its workers preload).
LAYERS = (
    ("the platform layer, pins, the error boundary, the doctor", "platforms"),
    ("the fused kernels", "npu_kernels"),
    ("the recipe code: reward, tool, dataset, data prep", "recipes.retool"),
    # the launcher's rooms, lowest first (recipes/launch/__init__.py says what each holds); its commands (cli.py,
    # __main__.py) sit above them all
    ("the launcher's run inputs", "recipes.launch.run_inputs"),
    ("the launcher's run supervision", "recipes.launch.supervision"),
    ("the launcher's sizing", "recipes.launch.sizing"),
    ("the launcher's cluster work", "recipes.launch.cluster"),
    ("the launcher's planning", "recipes.launch.planning"),
    ("the launcher's hand-offs", "recipes.launch.handoffs"),
    ("the launcher's commands", "recipes.launch"),
    ("the main job", "recipes.smoke"),
    ("scripts", "scripts"),
)
STANDS_ALONE = "sandbox"


def layer_of(module: str) -> int | None:
    """The index in :data:`LAYERS` of the layer ``module`` belongs to (the longest prefix); None for the sandbox and
    for the ``recipes`` package root, which holds no code."""
    matches = [i for i, (_, prefix) in enumerate(LAYERS) if module == prefix or module.startswith(prefix + ".")]
    return max(matches, key=lambda i: len(LAYERS[i][1])) if matches else None


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    wrong = []
    for module, targets in sorted(graph.items()):
        here = layer_of(module)
        for target in sorted(targets):
            there = layer_of(target)
            if module.startswith(STANDS_ALONE + ".") or module == STANDS_ALONE:
                if not (target == STANDS_ALONE or target.startswith(STANDS_ALONE + ".")):
                    wrong.append(f"{module} -> {target} (the sandbox stands alone)")
            elif here is not None and there is not None and there > here:
                wrong.append(f"{module} ({LAYERS[here][0]}) -> {target} ({LAYERS[there][0]})")
    return wrong


def test_every_module_belongs_to_a_layer() -> None:
    stray = [m for m in source_files() if layer_of(m) is None and m.split(".")[0] != STANDS_ALONE and m != "recipes"]
    assert stray == [], f"modules in no layer of LAYERS: {stray}"


def test_imports_run_down_the_layers() -> None:
    wrong = upward_imports(build_graph(source_files()))
    assert wrong == [], "imports up the layers (move what both need into the lower one):\n" + "\n".join(wrong)


def test_the_layer_check_sees_an_upward_import(tmp_path: Path) -> None:
    """What the check would miss if it were broken: the recipe code reaching the launcher, even inside a function,
    one of the launcher's rooms reaching a higher one, and the sandbox reaching the kit."""
    graph = {
        "recipes.retool.bundle": {"recipes.launch.run_inputs.inputs"},
        "recipes.launch.supervision.restart": {"recipes.smoke.supervisor", "platforms.cli_errors"},
        "recipes.smoke.cli": {"recipes.launch.planning.plan", "recipes.retool.reward"},
        "sandbox.cli": {"platforms.cli_errors"},
        "recipes.retool.bundle_offline": {"sandbox.settings"},
        "recipes.launch.sizing.capacity": {"recipes.launch.planning.compose", "recipes.launch.run_inputs.paths"},
    }
    assert upward_imports(graph) == [
        "recipes.launch.sizing.capacity (the launcher's sizing) -> recipes.launch.planning.compose (the launcher's "
        "planning)",
        "recipes.launch.supervision.restart (the launcher's run supervision) -> recipes.smoke.supervisor "
        "(the main job)",
        "recipes.retool.bundle (the recipe code: reward, tool, dataset, data prep) -> recipes.launch.run_inputs.inputs "
        "(the launcher's run inputs)",
        "sandbox.cli -> platforms.cli_errors (the sandbox stands alone)",
    ]


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


#: Upward names the tree still holds, each with why: remove an entry when its name goes (the test below fails on a
#: stale one). Keyed by (module, name), so a change of the layers' wording leaves them valid.
KNOWN_UPWARD_NAMES = {
    ("platforms.npu", "npu_kernels.auto"): (
        "the NPU and CUDA environment tables (FUSED_KERNELS) hand verl the fused kernels' import hook by name, and "
        "npu_kernels imports platforms: the loop by name the CPU attention had; naming the hook from a layer above "
        "both is a design change of the environment tables, not made yet"
    ),
}


def test_no_module_names_a_higher_layer_in_a_string() -> None:
    """A module name in a string is an import verl makes for the kit (``VERL_USE_EXTERNAL_MODULES``, a worker's
    ``external_lib``) or a ``python -m``: it runs the named module, so it follows the layers as an import does. What
    it caught: the cpu platform naming its attention in ``npu_kernels`` while that module imported ``platforms.cpu``."""
    graph = build_name_graph(source_files())
    kept = {module: {t for t in targets if (module, t) not in KNOWN_UPWARD_NAMES} for module, targets in graph.items()}
    wrong = upward_imports(kept)
    assert wrong == [], "string names of a module up the layers (move the module down):\n" + "\n".join(wrong)
    stale = sorted(pair for pair in KNOWN_UPWARD_NAMES if pair[1] not in graph.get(pair[0], set()))
    assert stale == [], f"KNOWN_UPWARD_NAMES lists names the tree no longer holds: {stale}"


def test_the_name_check_sees_a_string_up_the_layers(tmp_path: Path) -> None:
    """The loop this check was written for, rebuilt: a platform names a kernel module in a plain string; the same
    name in a docstring, a bare string, an f-string, a longer string or a module not in the tree is no reference."""
    root = tmp_path
    for name, text in {
        "platforms/__init__.py": "",
        "platforms/cpu.py": '"""Names npu_kernels.attention."""\nMODULE = "npu_kernels.attention"\n',
        "platforms/env.py": '"npu_kernels.attention"\nA = f"npu_kernels.attention{1}"\nB = "npu_kernels.attention,x"\n'
        'C = "npu_kernels.missing"\nD = "platforms.cpu"\n',
        "npu_kernels/__init__.py": "",
        "npu_kernels/attention.py": "from platforms.cpu import MODULE\n",
    }.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    graph = build_name_graph(source_files(root, ["platforms", "npu_kernels"]))
    assert graph["platforms.env"] == {"platforms.cpu"}  # a name, but not up the layers
    assert upward_imports(graph) == [f"platforms.cpu ({LAYERS[0][0]}) -> npu_kernels.attention ({LAYERS[1][0]})"]
