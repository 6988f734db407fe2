"""pins.env is the single source of versions: bash and Python read the same values."""

from __future__ import annotations

import subprocess

import pytest
from kit_testing import REPO_ROOT

from platforms import pins
from platforms.cli_errors import EXIT_USAGE, UsageError
from platforms.stacks import REFERENCE


def test_bash_and_python_read_the_same_pins() -> None:
    python_view = pins.load()
    keys = " ".join(python_view)
    script = f'set -euo pipefail; source pins.env; for k in {keys}; do printf "%s=%s\\n" "$k" "${{!k}}"; done'
    out = subprocess.run(["bash", "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, check=True).stdout
    bash_view = dict(line.split("=", 1) for line in out.splitlines())
    assert bash_view == python_view


def test_required_pins_present() -> None:
    assert REFERENCE.pin("VERL_VERSION") == "0.6.1"
    assert REFERENCE.pin("VLLM_ASCEND_TAG_A2") == "v0.11.0"
    assert REFERENCE.pin("VLLM_ASCEND_TAG_A3") == "v0.11.0-a3"
    assert REFERENCE.pin("CANN_VERSION") == "8.3.RC2"
    assert REFERENCE.pin("NPU_TORCH_VERSION") == "2.7.1"
    assert REFERENCE.pin("TORCH_NPU_VERSION") == "2.7.1"
    assert len(REFERENCE.pin("VERL_SDIST_SHA256")) == 64
    reqs = REFERENCE.python_requirements()
    assert reqs["transformers"].startswith("4.57.")
    assert int(reqs["numpy"].split(".")[0]) < 2


def test_installed_packages_match_pins() -> None:
    import importlib.metadata as md

    for name, version in REFERENCE.python_requirements().items():
        assert md.version(name) == version, f"{name}: installed {md.version(name)}, pinned {version}"


@pytest.mark.parametrize(
    "bad",
    ["lowercase=1", "A=$HOME", "A=two words", "A=1\nA=2", "export A=1"],
)
def test_parser_rejects_what_bash_and_python_would_read_differently(bad: str) -> None:
    with pytest.raises(ValueError):
        pins.parse(bad)


def test_a_damaged_pins_file_is_a_usage_error_naming_the_line() -> None:
    """The image scripts (platform/images.py, the launcher's cluster/containers.py) print a UsageError as one line,
    exit 2: a damaged pins.env must be one, not a bare ValueError that ends in a traceback."""
    with pytest.raises(UsageError) as caught:
        pins.parse("A=1\nbroken line")
    assert caught.value.exit_code == EXIT_USAGE
    assert "pins.env line 2" in caught.value.what and "pins.env" in caught.value.fix


def test_no_version_pin_is_written_outside_pins_env() -> None:
    """The pinned versions must not be repeated in the kit's scripts, configs or Dockerfiles."""
    needles = {
        REFERENCE.pin("VERL_SDIST_SHA256"),
        REFERENCE.pin("TORCH_NPU_VERSION"),
        REFERENCE.pin("CANN_VERSION"),
    }
    needles |= {f"=={v}" for v in REFERENCE.python_requirements().values()}
    files = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    offenders = []
    for path in (REPO_ROOT / f for f in files):
        if not path.is_file() or "tests" in path.relative_to(REPO_ROOT).parts:
            continue
        if path.name == "pins.env" or path.suffix in {".patch", ".md", ".pyc"}:
            continue
        text = path.read_text(errors="ignore")
        offenders += [f"{path.relative_to(REPO_ROOT)}: {n}" for n in needles if n in text]
    assert not offenders, offenders
