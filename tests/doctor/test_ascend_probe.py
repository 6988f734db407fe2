"""Parsers of platforms.ascend_probe on the formats CANN and npu-smi actually print."""

from __future__ import annotations

import textwrap
from pathlib import Path

from platforms.ascend_probe import (
    package_mentions,
    parse_npu_smi_info,
    read_cann_version,
    read_driver_version,
    vllm_ascend_env_names,
)

# An Atlas 800T A2 (8 x 910B3) as npu-smi 23.0.6 prints it, process table included.
A2_NPU_SMI = """\
+------------------------------------------------------------------------------------------------+
| npu-smi 23.0.6                   Version: 23.0.6                                               |
+---------------------------+---------------+----------------------------------------------------+
| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
+===========================+===============+====================================================+
{rows}+---------------------------+---------------+----------------------------------------------------+
| NPU     Chip              | Process id    | Process name             | Process memory(MB)      |
+===========================+===============+====================================================+
| 0       0                 | 824166        | python                   | 59316                   |
+===========================+===============+====================================================+
| No running processes found in NPU 1                                                            |
+===========================+===============+====================================================+
"""


def _a2_rows(health: dict[int, str]) -> str:
    rows = []
    for npu in range(8):
        used = 62449 if npu == 0 else 3390
        rows.append(f"| {npu:<6}{'910B3':<19} | {health.get(npu, 'OK'):<13} | {'93.3':<12}{38:<18}{'0    / 0':<20} |")
        rows.append(f"| {0:<25} | {f'0000:C{npu + 1}:00.0':<13} | {0:<12}{'0    / 0':<18}{used:<5}/ 65536         |")
        rows.append(
            "+===========================+===============+====================================================+"
        )
    return "\n".join(rows) + "\n"


def test_npu_smi_a2_layout() -> None:
    info = parse_npu_smi_info(A2_NPU_SMI.format(rows=_a2_rows({6: "Alarm"})))
    assert info.tool_version == "23.0.6"
    assert len(info.devices) == 8, "the process table must not add devices"
    first = info.devices[0]
    assert (first.npu, first.chip, first.phy_id, first.name) == (0, 0, None, "910B3")
    assert (first.hbm_used_mb, first.hbm_total_mb, first.bus_id) == (62449, 65536, "0000:C1:00.0")
    assert [d.health for d in info.devices] == ["OK"] * 6 + ["Alarm", "OK"]
    assert info.devices[6].label == "NPU 6"


def test_npu_smi_a3_layout_has_two_dies_per_npu() -> None:
    text = textwrap.dedent(
        """\
        | npu-smi 24.1.rc3.7               Version: 24.1.rc3.7                                           |
        | NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
        | Chip  Phy-ID              | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
        +===========================+===============+====================================================+
        | 0     Ascend910           | OK            | 178.7       37                0    / 0             |
        | 0     0                   | 0000:9D:00.0  | 0           0    / 0          3419 / 65536         |
        +------------------------------------------------------------------------------------------------+
        | 0     Ascend910           | Critical      | -           36                0    / 0             |
        | 1     1                   | 0000:9F:00.0  | 0           0    / 0          46084/ 65536         |
        +===========================+===============+====================================================+
        """
    )
    info = parse_npu_smi_info(text)
    assert info.tool_version == "24.1.rc3.7"
    assert [(d.npu, d.chip, d.phy_id, d.health) for d in info.devices] == [(0, 0, 0, "OK"), (0, 1, 1, "Critical")]
    assert info.devices[1].hbm_used_mb == 46084, "'46084/ 65536' (no space before the slash) must parse"
    assert info.devices[1].label == "device 1 (NPU 0 chip 1)"


def test_npu_smi_masked_bus_id_and_garbage() -> None:
    text = (
        "| 0     910B4               | OK            | 105.5       39                0    / 0             |\n"
        "| 0                         | xxxx:xx:xx.x  | 5           0    / 0          6154 / 65536         |\n"
    )
    assert [d.hbm_used_mb for d in parse_npu_smi_info(text).devices] == [6154]
    assert parse_npu_smi_info("dcmi model initialized failed, because the device is used. ret is -8020\n").devices == []


def test_cann_version_cfg(tmp_path: Path) -> None:
    (tmp_path / "version.cfg").write_text(
        "# version: 1.0\nruntime_running_version=[7.5.0.1.129:8.0.RC3]\ntoolkit_running_version=[7.5.0.1.129:8.0.RC3]\n"
    )
    found = read_cann_version(tmp_path)
    assert found is not None and (found.version, found.kind) == ("8.0.RC3", "version.cfg")


def test_cann_install_info_when_no_version_cfg(tmp_path: Path) -> None:
    (tmp_path / "aarch64-linux").mkdir()
    (tmp_path / "aarch64-linux" / "ascend_toolkit_install.info").write_text(
        "package_name=Ascend-cann-toolkit\nversion=8.5.0\ninnerversion=V100R001C25\narch=aarch64\n"
    )
    found = read_cann_version(tmp_path)
    assert found is not None and (found.version, found.kind) == ("8.5.0", "install.info")


def test_cann_build_number_is_the_last_resort(tmp_path: Path) -> None:
    (tmp_path / "runtime").mkdir()
    (tmp_path / "runtime" / "version.info").write_text("Version=7.6.0.1.220\n")
    found = read_cann_version(tmp_path)
    assert found is not None and (found.version, found.kind) == ("7.6.0.1.220", "build-number")
    assert read_cann_version(tmp_path / "missing") is None


def test_driver_version(tmp_path: Path) -> None:
    (tmp_path / "driver").mkdir()
    (tmp_path / "driver" / "version.info").write_text("Version=25.2.1\nascendhal_version=7.35.23\n")
    assert read_driver_version(tmp_path) == "25.2.1"
    assert read_driver_version(tmp_path / "none") is None


def test_vllm_ascend_env_table(tmp_path: Path) -> None:
    (tmp_path / "envs.py").write_text(
        "import os\nfrom typing import Any, Callable, Dict\n"
        "env_variables: Dict[str, Callable[[], Any]] = {\n"
        '    "VLLM_ASCEND_ENABLE_NZ":\n    lambda: int(os.getenv("VLLM_ASCEND_ENABLE_NZ", 1)),\n'
        '    "SOC_VERSION": lambda: os.getenv("SOC_VERSION"),\n}\n'
    )
    (tmp_path / "other.py").write_text("import os\nX = os.getenv('VLLM_ASCEND_SPECIAL')\n")
    assert vllm_ascend_env_names(tmp_path) == {"VLLM_ASCEND_ENABLE_NZ", "SOC_VERSION"}
    assert package_mentions(tmp_path, "VLLM_ASCEND_SPECIAL")
    assert not package_mentions(tmp_path, "VLLM_ASCEND_ENABLE_FLASHCOMM")
    (tmp_path / "envs.py").write_text("x = 1\n")
    assert vllm_ascend_env_names(tmp_path) is None
