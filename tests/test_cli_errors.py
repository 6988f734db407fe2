"""The one error boundary (platforms/cli_errors.py) and the sandbox's copy, and that every entry point uses it.

What would fail: a command whose ``main`` loses ``@entry_point`` (its expected failures become tracebacks again), a
module that defines its own ``EXIT_*`` codes again, the sandbox's copy drifting from the kit's (another code or
line for the same failure), a boundary that swallows a bug, and the sandbox importing the kit (anywhere).
"""

from __future__ import annotations

import ast
import errno
import importlib
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
import tomllib
from kit_testing import REPO_ROOT

import platforms.cli_errors as kit
import sandbox.cli_errors as box

COPIES = {"kit": kit, "sandbox": box}
SCRIPTS = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["scripts"]
#: ``python -m`` / script entry points users (or the run scripts) call, beside the console scripts.
MODULE_ENTRIES = (
    "platforms.cli",
    "platforms.images",
    "platforms.vllm_cpu",
    "npu_kernels.patcher",
    "recipes.launch.cluster.ray_cluster",
    "recipes.launch.cluster.containers",
    "recipes.launch.handoffs.handoff",
    "recipes.smoke.bench_learn",
    "recipes.smoke.bench_seeds",
    "recipes.smoke.cli",
    "recipes.smoke.learn_data",
    "recipes.smoke.make_data",
    "recipes.smoke.tiny_model",
)
PACKAGES = ("platforms", "npu_kernels", "recipes", "sandbox", "scripts")


def _raising(exc: BaseException) -> Callable[[list[str] | None], int]:
    def main(argv: list[str] | None = None) -> int:
        raise exc

    return main


@pytest.mark.parametrize("copy", list(COPIES))
@pytest.mark.parametrize(
    ("exc", "code", "line"),
    [
        (kit.KitError, 1, "demo: error: the sandbox does not answer (start it)"),
        (kit.UsageError, 2, "demo: error: the sandbox does not answer (start it)"),
    ],
)
def test_expected_failures_are_one_line_and_their_code(
    copy: str, exc: type, code: int, line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    module: ModuleType = COPIES[copy]
    error = getattr(module, exc.__name__)("the sandbox does not answer", "start it")
    assert module.entry_point("demo")(_raising(error))([]) == code
    assert capsys.readouterr().err == line + "\n"


@pytest.mark.parametrize("copy", list(COPIES))
def test_path_errors_name_the_path_and_bugs_keep_their_traceback(copy: str, capsys: pytest.CaptureFixture[str]) -> None:
    module: ModuleType = COPIES[copy]
    guard = module.entry_point("demo")
    missing = FileNotFoundError(errno.ENOENT, "No such file or directory", "/data/x.parquet")
    assert guard(_raising(missing))([]) == module.EXIT_USAGE
    assert capsys.readouterr().err == "demo: error: /data/x.parquet: No such file or directory\n"
    full = OSError(errno.ENOSPC, "No space left on device", "/ckpt/out")
    assert guard(_raising(full))([]) == module.EXIT_FAILED  # a full disk is not the user's input
    assert guard(_raising(KeyboardInterrupt()))([]) == module.EXIT_INTERRUPTED
    for bug in (ZeroDivisionError("division by zero"), OSError(errno.EBADF, "Bad file descriptor"), KeyError("x")):
        with pytest.raises(type(bug)):
            guard(_raising(bug))([])


def test_the_sandbox_copy_keeps_the_kit_contract() -> None:
    for name in ("EXIT_OK", "EXIT_FAILED", "EXIT_USAGE", "EXIT_INTERRUPTED"):
        assert getattr(box, name) == getattr(kit, name), name
    assert box.error_line("p", "what", "fix") == kit.error_line("p", "what", "fix") == "p: error: what (fix)"
    assert box.error_line("p", "what") == kit.error_line("p", "what") == "p: error: what"


@pytest.mark.parametrize("copy", list(COPIES))
def test_an_output_is_checked_before_the_work(copy: str, tmp_path: Path) -> None:
    """Both copies refuse the same outputs with the same line (the sandbox's is for ``bench --json``, issue 33)."""
    module: ModuleType = COPIES[copy]
    module.check_writable("--json", tmp_path / "new" / "r.json")  # a folder still to make is fine
    (tmp_path / "f").write_text("mine")
    for path, line in (
        ("/proc/kit.json", "--json /proc/kit.json: cannot write in /proc"),
        (str(tmp_path / "f" / "r.json"), f"--json {tmp_path}/f/r.json: {tmp_path}/f is a file, not a folder"),
    ):
        with pytest.raises(module.UsageError) as caught:
            module.check_writable("--json", Path(path))
        assert caught.value.what.startswith(line), caught.value.what


def test_option_types_refuse_out_of_range_values() -> None:
    import argparse

    assert kit.port_arg("8080") == 8080 and kit.counts_arg("1, 8,32") == [1, 8, 32]
    assert kit.whole_number_arg(0)("0") == 0 and kit.number_arg(0)("2.5") == 2.5
    bad = [
        (kit.port_arg, "0"),
        (kit.port_arg, "65536"),
        (kit.port_arg, "http"),
        (kit.counts_arg, "1,0"),
        (kit.counts_arg, ","),
        (kit.whole_number_arg(0), "-1"),
        (kit.whole_number_arg(1, 8), "9"),
        (kit.number_arg(0), "nan"),
        (kit.number_arg(0), "-5"),
    ]
    for parse, text in bad:
        with pytest.raises(argparse.ArgumentTypeError):
            parse(text)


@pytest.mark.parametrize("entry", sorted(SCRIPTS.values()) + [f"{m}:main" for m in MODULE_ENTRIES])
def test_every_entry_point_is_behind_the_boundary(entry: str) -> None:
    module, _, function = entry.partition(":")
    main = getattr(importlib.import_module(module), function)
    assert hasattr(main, "__wrapped__"), f"{entry} is not wrapped by @entry_point (platforms/cli_errors.py)"


def _python_files() -> list:
    return [p for pkg in PACKAGES for p in sorted((REPO_ROOT / pkg).rglob("*.py"))]


def test_exit_codes_are_defined_once() -> None:
    owners = {REPO_ROOT / "platforms" / "cli_errors.py", REPO_ROOT / "sandbox" / "cli_errors.py"}
    defined = []
    for path in _python_files():
        for node in ast.parse(path.read_text()).body:
            targets = node.targets if isinstance(node, ast.Assign) else []
            names = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
            if any(name.startswith("EXIT_") for name in names) and path not in owners:
                defined.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno}")
    assert defined == [], f"exit codes defined outside platforms/cli_errors.py: {defined}"
