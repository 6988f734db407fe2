"""Issue 44, finding 8: ``bash scripts/test_images.sh`` on a fresh machine installed docker.io, then the stand-in
build stopped at ``debootstrap: command not found``. The stand-in scripts now install every host tool they call
(docker/standin/lib/standin.sh ``STANDIN_TOOLS``, ``standin_need_tools``) with apt-get, as root, where one is missing.

Two checks: the list covers each command the host-side stand-in scripts call (parsed from them), and the function,
run with debootstrap missing and a fake apt-get on PATH, installs debootstrap (nothing real is installed).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from kit_testing import REPO_ROOT

STANDIN = REPO_ROOT / "docker" / "standin"
LIB = STANDIN / "lib" / "standin.sh"
#: The kit's stack view (kit_use_stack), sourced by the accelerator stand-ins for their stack's pins; the host's python3
#: answers it (the harness runs on it).
STACK_LIB = REPO_ROOT / "scripts" / "lib" / "stack.sh"
#: The scripts that run on the host (cann_stub.sh runs inside the image, from its Dockerfile).
HOST_SCRIPTS = [LIB, STANDIN / "python_slim.sh", STANDIN / "vllm_ascend.sh", STANDIN / "vllm_openai.sh"]
BUILTINS = set(
    "source . echo printf local shift return exit set trap case esac if then else elif fi for while do done in "
    "mapfile command compgen cd pwd true false export read declare unset test [[ [ ((".split()
)


def _tools() -> dict[str, str]:
    out = subprocess.run(
        ["bash", "-c", 'source "$1"; printf "%s\\n" "${STANDIN_TOOLS[@]}"', "-", str(LIB)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return dict(line.split(":", 1) for line in out.split())


def _commands(text: str) -> set[str]:
    """The first word of every simple command: heredoc bodies, comments and single-quoted strings left out; command
    substitutions and the words after ; | && || { ! then do else start a command."""
    text = re.sub(r"<<(\w+)\n.*?\n\1\n", "\n", text, flags=re.S)
    text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    text = re.sub(r"'[^'\n]*'", "''", text)
    text = re.sub(r"\$\{[^}]*\}", "X", text.replace("\\\n", " "))  # ${...}: a value, not a { block }
    found = set()
    for segment in re.split(r"\$\(|<\(|;|\|\||&&|\||\{|\}|\n|\bthen\b|\bdo\b|\belse\b|!", text):
        words = [w for w in segment.split() if not re.fullmatch(r"[A-Za-z_]\w*=\S*", w)]
        if words and re.fullmatch(r"[a-z][\w.-]*|\[\[|\(\(", words[0]):
            found.add(words[0])
    return found


def test_the_install_list_covers_every_host_command_of_the_standin_builds() -> None:
    functions = set().union(*(re.findall(r"^(\w+)\(\) \{", lib.read_text(), flags=re.M) for lib in (LIB, STACK_LIB)))
    called = set().union(*(_commands(path.read_text()) for path in HOST_SCRIPTS))
    assert {"debootstrap", "chroot", "tar", "docker", "awk"} <= called, called  # the parse sees the real calls
    uncovered = called - set(_tools()) - functions - BUILTINS - {"apt-get"}
    assert uncovered == set(), f"stand-in scripts call {sorted(uncovered)}: add COMMAND:PACKAGE to STANDIN_TOOLS"


def test_every_standin_script_installs_its_tools_first() -> None:
    for path in HOST_SCRIPTS[1:]:
        lines = path.read_text().splitlines()
        need = next(i for i, line in enumerate(lines) if line.startswith("standin_need_tools"))
        usage = next(i for i, line in enumerate(lines) if line.startswith("standin_usage"))
        first_tool = next(i for i, line in enumerate(lines) if re.match(r"(root|root_tag)=\$\(", line))
        assert usage < need < first_tool, path.name  # --help installs nothing; the build finds its tools


def test_a_missing_debootstrap_is_installed_with_apt(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, _ in _tools().items():
        real = shutil.which(name)
        if name != "debootstrap" and real:
            (bin_dir / name).symlink_to(real)
    for name in ("docker", "id"):  # present (docker.io installed by test_images.py), and root
        (bin_dir / name).unlink(missing_ok=True)
        (bin_dir / name).write_text("#!/bin/sh\necho 0\n")
        (bin_dir / name).chmod(0o755)
    calls = tmp_path / "apt.log"
    (bin_dir / "apt-get").write_text(f'#!/bin/sh\necho "$*" >>{calls}\n')
    (bin_dir / "apt-get").chmod(0o755)
    keyring = tmp_path / "keyring.gpg"
    keyring.write_text("")
    script = f'source "{LIB}"; STANDIN_KEYRING={keyring}; standin_need_tools; echo done'
    proc = subprocess.run(
        [shutil.which("bash") or "/bin/bash", "-c", script],
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": str(bin_dir)},
        timeout=60,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "done", proc.stderr
    assert calls.read_text().splitlines() == ["update -qq", "install -y -q debootstrap"]
    assert "stand-in: installing debootstrap (apt)" in proc.stderr
