"""A fake Atlas A3 node for the doctor: stub torch / torch_npu (torch_npu registers the hccl backend with the stub
torch.distributed, as the real one does), package metadata at the pinned versions, a patched verl record, a CANN
tree, /dev with 16 davinci nodes, an npu-smi that prints real-format output, Ray resources, the host's interfaces as
``ip -o -4 addr`` prints them, a sandbox that answers pong, and the environment CANN's set_env.sh plus the kit's rl
preset would produce.

``FakeA3`` builds the good node; tests then plant one fault and run ``retool-doctor`` against it in a fresh
interpreter (the stub torch_npu must not leak into the test process). The stub ``torch`` shadows the real one so each
run costs a Python start-up, not a torch import.
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from kit_testing import REPO_ROOT

from platforms import PROFILES
from platforms.stacks import REFERENCE

A3_DEVICES = 16
#: This node's address and the interface that carries it, among a loopback and a docker bridge.
NODE_IP = "10.20.0.7"
NODE_NIC = "enp189s0f0"
IP_ADDR_TEXT = f"""\
1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever
2: {NODE_NIC}    inet {NODE_IP}/24 brd 10.20.0.255 scope global {NODE_NIC}\\    valid_lft forever preferred_lft forever
5: docker0    inet 172.17.0.1/16 brd 172.17.255.255 scope global docker0\\       valid_lft forever preferred_lft forever
"""
CANN_BUILD = "8.3.0.2.220"  # the build id in front of the release in version.cfg; any value, only the release counts

# The vllm_ascend 0.11.0 env table, abridged: the doctor only needs the dict literal's keys.
VLLM_ASCEND_ENVS = """
import os
from typing import Any, Callable, Dict

env_variables: Dict[str, Callable[[], Any]] = {
    "SOC_VERSION": lambda: os.getenv("SOC_VERSION", "ASCEND910B1"),
    "VLLM_VERSION": lambda: os.getenv("VLLM_VERSION", None),
    "USE_OPTIMIZED_MODEL": lambda: bool(int(os.getenv("USE_OPTIMIZED_MODEL", "1"))),
    "VLLM_ASCEND_ENABLE_MLP_OPTIMIZE": lambda: bool(int(os.getenv("VLLM_ASCEND_ENABLE_MLP_OPTIMIZE", "0"))),
    "VLLM_ASCEND_ENABLE_NZ": lambda: int(os.getenv("VLLM_ASCEND_ENABLE_NZ", 1)),
}


def __getattr__(name: str):
    return env_variables[name]()
"""


def npu_smi_a3_text(health: dict[int, str] | None = None, hbm_used: dict[int, int] | None = None) -> str:
    """``npu-smi info`` of an A3 node (8 NPUs x 2 dies) in the tool's own layout (npu-smi 25.2.1, Ascend HDK)."""
    health = health or {}
    hbm_used = hbm_used or {}
    rule = "+" + "-" * 96 + "+"
    head_rule = "+---------------------------+---------------+----------------------------------------------------+"
    eq_rule = "+===========================+===============+====================================================+"

    def row(a: str, b: str, c: str) -> str:
        return f"| {a:<25} | {b:<13} | {c:<50} |"

    lines = [
        rule,
        f"| {'npu-smi 25.2.1':<32} {'Version: 25.2.1':<62}|",
        head_rule,
        "| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|",
        "| Chip  Phy-ID              | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |",
        eq_rule,
    ]
    for phy in range(A3_DEVICES):
        npu, chip = divmod(phy, 2)
        power = f"{165.3 + npu:.1f}" if chip == 0 else "-"
        used = hbm_used.get(phy, 3143 - 256 * chip)
        lines.append(row(f"{npu:<6}Ascend910", health.get(phy, "OK"), f"{power:<12}{36:<18}{'0    / 0'}"))
        lines.append(row(f"{chip:<6}{phy}", f"0000:{0x90 + phy:02X}:00.0", f"{0:<12}{'0    / 0':<18}{used:<5}/ 65536"))
        lines.append(rule if chip == 0 else eq_rule)
    lines += [
        head_rule,
        "| NPU     Chip              | Process id    | Process name             | Process memory(MB)      |",
        eq_rule,
    ]
    for npu in range(A3_DEVICES // 2):
        lines.append(f"| {'No running processes found in NPU ' + str(npu):<94} |")
        lines.append(eq_rule)
    return "\n".join(lines) + "\n"


# torch.distributed as far as the doctor asks it: the backend registry (Backend.register_backend appends to
# Backend.backend_list in torch) and is_backend_available.
TORCH_DISTRIBUTED_STUB = """
class Backend:
    backend_list = ["gloo"]

    @classmethod
    def register_backend(cls, name, func, extended_api=False, devices=None):
        cls.backend_list.append(name.lower())


def is_available():
    return True


def is_backend_available(backend):
    return backend.lower() in Backend.backend_list
"""

# What torch_npu/__init__.py (Ascend/pytorch) does on import: register hccl with torch.distributed.
HCCL_REGISTRATION = """
import torch.distributed
torch.distributed.Backend.register_backend("hccl", None, devices=["npu"])
"""


def _dist_info(site: Path, name: str, version: str) -> None:
    folder = site / f"{name.replace('-', '_')}-{version}.dist-info"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def _patch_record() -> str:
    """What scripts/setup_verl.sh --install writes to verl/version/kit_patches: '<patch-id> <file> <subject>'."""
    lines = []
    for patch in sorted((REPO_ROOT / "patches").glob("*.patch")):
        pid = subprocess.run(
            ["git", "patch-id", "--stable"], stdin=patch.open("rb"), capture_output=True, check=True
        ).stdout.split()[0]
        subject = next(
            line[len("Subject: ") :] for line in patch.read_text().splitlines() if line.startswith("Subject:")
        )
        lines.append(f"{pid.decode()} {patch.name} {subject}")
    return "\n".join(lines) + "\n"


class _Pong(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        body = b'"pong"' if self.path == "/v1/ping" else b"not found"
        self.send_response(200 if self.path == "/v1/ping" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="session")
def sandbox_url() -> Iterator[str]:
    """A SandboxFusion-shaped ping endpoint on loopback (the real sandbox's /v1/ping answers the JSON string pong)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Pong)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/run_code"
    server.shutdown()


@dataclass
class DoctorRun:
    returncode: int
    report: dict
    stdout: str
    stderr: str

    def by_status(self, status: str) -> dict[str, dict]:
        return {c["check"]: c for c in self.report["checks"] if c["status"] == status}

    def check(self, name: str) -> dict:
        found = [c for c in self.report["checks"] if c["check"] == name]
        assert found, f"no check {name!r} in {[c['check'] for c in self.report['checks']]}"
        return found[0]


@dataclass
class FakeA3:
    root: Path
    sandbox_url: str
    env: dict[str, str] = field(default_factory=dict)

    DEVICES = A3_DEVICES
    npu_smi_text = staticmethod(npu_smi_a3_text)

    @property
    def site(self) -> Path:
        return self.root / "site"

    @property
    def dev(self) -> Path:
        return self.root / "dev"

    @property
    def cann(self) -> Path:
        return self.root / "Ascend"

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def toolkit(self) -> Path:
        return self.cann / "ascend-toolkit" / "latest"

    @property
    def ray_json(self) -> Path:
        return self.root / "ray_resources.json"

    @property
    def ip_addr(self) -> Path:
        return self.root / "ip_addr.txt"

    @property
    def model(self) -> Path:
        return self.root / "Qwen3-4B-Instruct-2507"

    @property
    def data(self) -> Path:
        return self.root / "train.parquet"

    def build(self) -> FakeA3:
        self._python_packages()
        for i in range(A3_DEVICES):
            (self.dev / f"davinci{i}").parent.mkdir(parents=True, exist_ok=True)
            (self.dev / f"davinci{i}").touch()
        for name in ("davinci_manager", "devmm_svm", "hisi_hdc"):
            (self.dev / name).touch()
        self._cann_tree()
        self.bin.mkdir(parents=True, exist_ok=True)
        (self.bin / "npu-smi-info.txt").write_text(npu_smi_a3_text())
        npu_smi = self.bin / "npu-smi"
        npu_smi.write_text(
            '#!/usr/bin/env bash\n[[ ${1:-} == info ]] || { echo "usage: npu-smi info" >&2; exit 2; }\n'
            'cat "$(dirname "$0")/npu-smi-info.txt"\n'
        )
        npu_smi.chmod(0o755)
        self.set_ray({"NPU": float(A3_DEVICES), "CPU": 320.0, "memory": 1.6e12})
        self.model.mkdir(parents=True, exist_ok=True)
        (self.model / "config.json").write_text(json.dumps({"model_type": "qwen3", "num_attention_heads": 32}))
        (self.model / "tokenizer.json").write_text("{}")
        (self.model / "model.safetensors").write_bytes(b"\0" * 4096)
        import pyarrow as pa
        import pyarrow.parquet as pq

        row = {"prompt": [{"role": "user", "content": "1+1?"}], "reward_model": {"ground_truth": "2"}}
        pq.write_table(pa.Table.from_pylist([row]), self.data)  # a real RL parquet: the doctor reads its rows
        self.ip_addr.write_text(IP_ADDR_TEXT)
        self.env = self._good_env()
        return self

    def _python_packages(self) -> None:
        site = self.site
        (site / "torch").mkdir(parents=True)
        (site / "torch" / "__init__.py").write_text(f"__version__ = {REFERENCE.pin('NPU_TORCH_VERSION')!r}\n")
        (site / "torch" / "distributed").mkdir()
        (site / "torch" / "distributed" / "__init__.py").write_text(TORCH_DISTRIBUTED_STUB)
        (site / "torch_npu" / "npu").mkdir(parents=True)
        self.set_hccl_registered(True)
        (site / "torch_npu" / "npu" / "__init__.py").write_text(
            textwrap.dedent(
                f"""
                def device_count():
                    return {A3_DEVICES}

                def is_available():
                    return True

                def get_device_name(index=0):
                    return "Ascend910_9391"
                """
            )
        )
        (site / "vllm_ascend").mkdir()
        (site / "vllm_ascend" / "__init__.py").write_text("")
        (site / "vllm_ascend" / "envs.py").write_text(VLLM_ASCEND_ENVS)
        (site / "verl" / "version").mkdir(parents=True)
        (site / "verl" / "__init__.py").write_text("")
        (site / "verl" / "version" / "kit_patches").write_text(_patch_record())
        versions = {
            "torch": REFERENCE.pin("NPU_TORCH_VERSION"),
            "torch-npu": REFERENCE.pin("TORCH_NPU_VERSION"),
            "vllm": REFERENCE.pin("VLLM_VERSION")
            + "+empty",  # VLLM_TARGET_DEVICE=empty editable install, as in the image
            "vllm-ascend": REFERENCE.pin("VLLM_ASCEND_VERSION"),
            "verl": REFERENCE.pin("VERL_VERSION"),
            **REFERENCE.python_requirements(),
        }
        for name, version in versions.items():
            self.set_version(name, version)

    def _cann_tree(self) -> None:
        release = REFERENCE.pin("CANN_VERSION")
        versioned = self.cann / "ascend-toolkit" / release
        for sub in ("lib64", "opp", "aarch64-linux"):
            (versioned / sub).mkdir(parents=True, exist_ok=True)
        self.set_cann_version(release, versioned)
        (versioned / "aarch64-linux" / "ascend_toolkit_install.info").write_text(
            f"package_name=Ascend-cann-toolkit\nversion={release}\narch=aarch64\nos=linux\npath={versioned}\n"
        )
        (self.cann / "ascend-toolkit" / "latest").symlink_to(release)
        (self.cann / "ascend-toolkit" / "set_env.sh").write_text("# fake: the test sets the variables itself\n")
        (self.cann / "nnal" / "atb" / "latest" / "atb" / "cxx_abi_0" / "lib").mkdir(parents=True)
        (self.cann / "nnal" / "atb" / "set_env.sh").write_text("# fake\n")
        (self.cann / "driver").mkdir()
        (self.cann / "driver" / "version.info").write_text("Version=25.2.1\nascendhal_version=7.35.23\n")

    # -- knobs for planting faults ------------------------------------------------------------------------------

    def set_version(self, name: str, version: str) -> None:
        for old in self.site.glob(f"{name.replace('-', '_')}-*.dist-info"):
            for f in old.iterdir():
                f.unlink()
            old.rmdir()
        _dist_info(self.site, name, version)

    def set_cann_version(self, release: str, where: Path | None = None) -> None:
        where = where or self.toolkit
        components = ("runtime", "compiler", "hccl", "opp", "toolkit", "aoe", "ncs", "opp_kernel")
        lines = ["# version: 1.0"] + [f"{c}_running_version=[{CANN_BUILD}:{release}]" for c in components]
        (where / "version.cfg").write_text("\n".join(lines) + "\n")

    def set_npu_smi(self, text: str) -> None:
        (self.bin / "npu-smi-info.txt").write_text(text)

    def set_ray(self, resources: dict[str, float]) -> None:
        self.ray_json.write_text(json.dumps(resources))

    def set_hccl_registered(self, registered: bool) -> None:
        """The stub torch_npu, with or without the hccl registration a real one does on import."""
        text = f"__version__ = {REFERENCE.pin('TORCH_NPU_VERSION')!r}\nfrom . import npu\n"
        (self.site / "torch_npu" / "__init__.py").write_text(text + (HCCL_REGISTRATION if registered else ""))

    def set_patch_record(self, text: str) -> None:
        (self.site / "verl" / "version" / "kit_patches").write_text(text)

    def _good_env(self) -> dict[str, str]:
        # Detection and Ray variables of the developer's shell must not leak in; TORCH_DEVICE_BACKEND_AUTOLOAD=0 is
        # itself a known-bad setting on an NPU host, so the good node does not have it.
        drop = (
            "KIT_DEVICE",
            "KIT_HW",
            "ASCEND_RT_VISIBLE_DEVICES",
            "RAY_ADDRESS",
            "TORCH_DEVICE_BACKEND_AUTOLOAD",
            "KIT_PATCH_DIR",
            "RETOOL_SANDBOX_URL",
            "MASTER_ADDR",
        )
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in drop and not k.startswith(("ASCEND_", "ATB_", "VLLM_")) and not k.endswith("_SOCKET_IFNAME")
        }
        toolkit = str(self.toolkit)
        atb = str(self.cann / "nnal" / "atb" / "latest" / "atb" / "cxx_abi_0")
        env.update(
            PATH=f"{self.bin}{os.pathsep}{env.get('PATH', os.defpath)}",
            PYTHONPATH=os.pathsep.join([str(self.site), str(REPO_ROOT)]),
            ASCEND_TOOLKIT_HOME=toolkit,
            ASCEND_HOME_PATH=toolkit,
            ASCEND_OPP_PATH=f"{toolkit}/opp",
            ASCEND_AICPU_PATH=toolkit,
            ATB_HOME_PATH=atb,
            LD_LIBRARY_PATH=f"{atb}/lib:{toolkit}/lib64:{toolkit}/lib64/plugin/opskernel",
        )
        for entry in PROFILES["a3"].env("rl", REFERENCE):
            if entry.value is None:
                env.pop(entry.name, None)
            else:
                env[entry.name] = entry.value
        return env

    def run(self, *extra: str, env: dict[str, str] | None = None, sandbox_flag: bool = True) -> DoctorRun:
        """The doctor against this node; ``sandbox_flag=False`` leaves the sandbox URL to the environment."""
        args = [
            "--json",
            "--phase",
            "rl",
            "--dev-root",
            str(self.dev),
            "--cann-root",
            str(self.cann),
            "--ray-resources-json",
            str(self.ray_json),
            *(["--sandbox-url", self.sandbox_url] if sandbox_flag else []),
            "--node-ip",
            NODE_IP,
            "--ip-addr-file",
            str(self.ip_addr),
            "--model",
            str(self.model),
            "--data",
            str(self.data),
            "--ckpt-dir",
            str(self.root / "ckpt"),
            "--min-free-gb",
            "0.001",
            *extra,
        ]
        proc = subprocess.run(
            [sys.executable, "-m", "platforms.doctor", *args],
            env=env if env is not None else self.env,
            capture_output=True,
            text=True,
            timeout=120,
            cwd=self.root,
        )
        try:
            report = json.loads(proc.stdout)
        except ValueError:
            pytest.fail(f"doctor printed no JSON (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return DoctorRun(proc.returncode, report, proc.stdout, proc.stderr)


@pytest.fixture
def fake_a3(tmp_path: Path, sandbox_url: str) -> FakeA3:
    return FakeA3(tmp_path, sandbox_url).build()
