"""Readers for what an Ascend host says about itself: CANN version files, ``npu-smi info``, vllm-ascend's env table.

Kept apart from the doctor so each format has one parser with its own tests, and so nothing here imports torch,
torch_npu or vllm: every reader works on plain files and text, which is what a broken stack still offers.

Formats (as shipped by CANN 8.x and the Ascend HDK; fixtures in tests/doctor follow them):

* ``<toolkit>/version.cfg``: ``runtime_running_version=[<build>:<release>]`` per component, e.g.
  ``toolkit_running_version=[8.2.0.1.100:8.2.RC1]``; the release after the colon is the CANN version users know.
* ``<toolkit>/<arch>-linux/ascend_toolkit_install.info``: ``version=8.2.RC1`` (also the 8.5+ ``cann/`` layout).
* ``<toolkit>/{runtime,compiler}/version.info``: ``Version=<build number>``; an internal build id, last resort only.
* ``npu-smi info``: a box table with two rows per logical device (NPU id, name, health / chip [phy-id], bus id,
  AICore%, memory and HBM ``used / total`` in MB); on A3 every NPU has two chips (dies) with their own Phy-ID.
"""

from __future__ import annotations

import ast
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

# ---------------------------------------------------------------------------------------------- CANN version


@dataclass(frozen=True)
class CannVersion:
    """A CANN release string and the file it came from (``kind`` tells how much to trust it)."""

    version: str
    source: Path
    kind: str  # "version.cfg" | "install.info" | "build-number"


_CFG_LINE = re.compile(r"^(?P<component>[a-z_]+?)_running_version=\[(?P<build>[^:\]]*):(?P<release>[^\]]+)\]\s*$", re.M)
_INFO_VERSION = re.compile(r"^version=(?P<version>\S+)\s*$", re.M)
_BUILD_VERSION = re.compile(r"^Version=(?P<version>\S+)\s*$", re.M)


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return None


def read_cann_version(toolkit_home: Path) -> CannVersion | None:
    """The CANN release installed at ``toolkit_home`` (e.g. ``/usr/local/Ascend/ascend-toolkit/latest``), or None.

    version.cfg first because it names the release for every component; the toolkit's install.info next (the only
    file in CANN 8.5+'s ``cann/`` layout); a component's version.info last, because it holds a build number.
    """
    text = _read(toolkit_home / "version.cfg")
    if text:
        found = {m["component"]: m["release"].strip() for m in _CFG_LINE.finditer(text)}
        for component in ("toolkit", "runtime", *sorted(found)):
            if component in found:
                return CannVersion(found[component], toolkit_home / "version.cfg", "version.cfg")
    for info in sorted(toolkit_home.glob("*-linux/ascend_toolkit_install.info")):
        match = _INFO_VERSION.search(_read(info) or "")
        if match:
            return CannVersion(match["version"], info, "install.info")
    for component in ("runtime", "compiler"):
        match = _BUILD_VERSION.search(_read(toolkit_home / component / "version.info") or "")
        if match:
            return CannVersion(match["version"], toolkit_home / component / "version.info", "build-number")
    return None


def read_driver_version(ascend_root: Path) -> str | None:
    """``Version=`` of ``<root>/driver/version.info``: the host driver the container got mounted."""
    match = _BUILD_VERSION.search(_read(ascend_root / "driver" / "version.info") or "")
    return match["version"] if match else None


# ---------------------------------------------------------------------------------------------- npu-smi info


@dataclass(frozen=True)
class NpuSmiDevice:
    """One logical device (an A2 NPU, or one die of an A3 NPU) as ``npu-smi info`` lists it."""

    npu: int
    chip: int
    phy_id: int | None
    name: str
    health: str
    bus_id: str
    hbm_used_mb: int | None
    hbm_total_mb: int | None

    @property
    def label(self) -> str:
        if self.phy_id is not None:
            return f"device {self.phy_id} (NPU {self.npu} chip {self.chip})"
        return f"NPU {self.npu}" if self.chip == 0 else f"NPU {self.npu} chip {self.chip}"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class NpuSmiInfo:
    tool_version: str | None
    devices: list[NpuSmiDevice]


_SMI_VERSION = re.compile(r"npu-smi\s+(?P<tool>\S+)\s+Version:\s*(?P<version>\S+)")
_BUS_ID = re.compile(r"^[0-9A-Fa-fx]{4,8}:[0-9A-Fa-fx]{2}:[0-9A-Fa-fx]{2}\.[0-9A-Fa-fx]$")
_ROW1_HEAD = re.compile(r"^(?P<npu>\d+)\s+(?P<name>\S.*)$")
_USED_TOTAL = re.compile(r"(\d+)\s*/\s*(\d+)")


def _cells(line: str) -> list[str] | None:
    stripped = line.strip()
    if not stripped.startswith("|") or not stripped.endswith("|"):
        return None
    return [cell.strip() for cell in stripped[1:-1].split("|")]


def parse_npu_smi_info(text: str) -> NpuSmiInfo:
    """Devices from ``npu-smi info`` text. Rows come in pairs: (NPU, Name | Health | ...) then
    (Chip [Phy-ID] | Bus-Id | AICore Memory HBM); the process table after them is ignored."""
    version_match = _SMI_VERSION.search(text)
    devices: list[NpuSmiDevice] = []
    pending: tuple[int, str, str] | None = None
    for line in text.splitlines():
        if "Process id" in line or "Process name" in line:
            break  # the per-process table reuses the same box characters
        cells = _cells(line)
        if cells is None or len(cells) != 3:
            continue
        if _BUS_ID.match(cells[1]):
            if pending is None:
                continue
            npu, name, health = pending
            pending = None
            ids = cells[0].split()
            if not ids or not ids[0].isdigit():
                continue
            chip = int(ids[0])
            phy_id = int(ids[1]) if len(ids) > 1 and ids[1].isdigit() else None
            pairs = _USED_TOTAL.findall(cells[2])
            hbm = pairs[1] if len(pairs) >= 2 else (pairs[0] if pairs else None)
            devices.append(
                NpuSmiDevice(
                    npu=npu,
                    chip=chip,
                    phy_id=phy_id,
                    name=name,
                    health=health,
                    bus_id=cells[1],
                    hbm_used_mb=int(hbm[0]) if hbm else None,
                    hbm_total_mb=int(hbm[1]) if hbm else None,
                )
            )
            continue
        head = _ROW1_HEAD.match(cells[0])
        if head and cells[1] and " " not in cells[1]:
            pending = (int(head["npu"]), head["name"].strip(), cells[1])
    return NpuSmiInfo(version_match["version"] if version_match else None, devices)


# ---------------------------------------------------------------------------------------------- vllm-ascend envs


def vllm_ascend_env_names(package_dir: Path) -> set[str] | None:
    """Keys of ``env_variables`` in ``vllm_ascend/envs.py``, read with ``ast`` (importing vllm_ascend pulls in vLLM
    and torch_npu, which is exactly what may be broken). None when the file or the table is missing."""
    source = _read(package_dir / "envs.py")
    if source is None:
        return None
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        target = None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        if isinstance(target, ast.Name) and target.id == "env_variables" and isinstance(value, ast.Dict):
            return {key.value for key in value.keys if isinstance(key, ast.Constant) and isinstance(key.value, str)}
    return None


def package_mentions(package_dir: Path, name: str) -> bool:
    """Whether any .py file of the package contains ``name`` (a variable read with os.getenv outside envs.py)."""
    return any(name in (_read(path) or "") for path in package_dir.rglob("*.py"))
