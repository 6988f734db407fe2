"""``retool-doctor``: the registry of checks, the run over it, the table and the command line.

Exit status 0 unless a check FAILs (WARN does not fail), 2 for usage errors (a bad option, ``KIT_DEVICE`` or
``KIT_HW``), so scripts and image builds can gate on it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import platforms as device
from platforms import PHASES, PLATFORM_OVERRIDE_ENV, PLATFORMS, PROFILES, HardwareProfile, Platform, pins, stacks
from platforms.cli import add_profile_option, add_stack_option
from platforms.cli_errors import ArgumentParser, entry_point, input_file, input_folder, number_arg
from platforms.doctor.disk import check_disk
from platforms.doctor.host import check_cann, check_npu_smi, check_platform
from platforms.doctor.image import check_image
from platforms.doctor.network import check_network
from platforms.doctor.probes import (
    CANN_ROOT,
    FAIL,
    STATUSES,
    WARN,
    Context,
    Options,
    Probes,
    Report,
    Result,
    fail,
    has_host_stack,
    skip,
)
from platforms.doctor.run import SANDBOX_URL_ENV, check_env, check_paths, check_ray, check_sandbox
from platforms.doctor.stack import check_patches, check_versions


@dataclass(frozen=True)
class Group:
    """A check group: its name (``--only`` takes it; check ids start with it), its check, and which hardware
    profiles it means something for (None: every profile)."""

    name: str
    check: Callable[[Context], list[Result]]
    applies: Callable[[HardwareProfile], bool] | None = None

    def platforms(self) -> list[str]:
        """The platforms of the profiles the group applies to, for the SKIP line elsewhere."""
        applies = self.applies or (lambda _profile: True)
        return sorted({p.platform.name for p in PROFILES.values() if applies(p)})


def _on_host_stack(profile: HardwareProfile) -> bool:
    return has_host_stack(profile.platform)


def _has_node_shape(profile: HardwareProfile) -> bool:
    return profile.devices_per_node is not None


#: The checks in report order.
REGISTRY: tuple[Group, ...] = (
    Group("platform", check_platform),
    Group("image", check_image),
    Group("cann", check_cann, _on_host_stack),
    Group("npu-smi", check_npu_smi, _on_host_stack),
    Group("network", check_network),
    Group("versions", check_versions),
    Group("patches", check_patches),
    # Ray's device count is only a fact on profiles with devices per node (on CPU it is a scheduling label).
    Group("ray", check_ray, _has_node_shape),
    Group("env", check_env),
    Group("sandbox", check_sandbox),
    Group("paths", check_paths),
    Group("disk", check_disk),
)
CHECKS: dict[str, Group] = {group.name: group for group in REGISTRY}
GROUPS: tuple[str, ...] = tuple(CHECKS)


def _note_of(platform: Platform) -> str:
    try:
        return platform.status_note() or "no details"
    except Exception as exc:  # noqa: BLE001  (a broken stack is reported in the note, not raised)
        return f"{type(exc).__name__}: {exc}"


def _available(platform: Platform) -> bool:
    try:
        return platform.is_available()
    except Exception:  # noqa: BLE001  (same)
        return False


def _detected_note(detected: Platform, davinci: int, torch_devices: int | None, probes: Probes) -> str:
    """What the detected platform says about itself; for the host fallback (no devices to mask), why no
    accelerator platform was taken."""
    if torch_devices is not None:
        parts = [_note_of(detected), f"{torch_devices} visible"]
        if has_host_stack(detected):
            parts.append(f"{davinci} /dev/davinciN nodes")
        return ", ".join(parts)
    parts = []
    for platform in (p for p in PLATFORMS.values() if p.visible_devices_env is not None):
        state = (
            f"{platform.name.upper()} present but not used" if _available(platform) else f"no {platform.name.upper()}"
        )
        parts.append(f"{state} ({_note_of(platform)})")
    forced = probes.env.get(PLATFORM_OVERRIDE_ENV, "").strip()
    return ", ".join(parts) + (f"; {PLATFORM_OVERRIDE_ENV}={forced}" if forced else "")


def build_context(opts: Options, probes: Probes) -> Context:
    detected = probes.detect_platform()
    davinci = device.count_davinci(probes.dev_root)
    has_devices = detected.visible_devices_env is not None
    torch_devices = detected.device_count(probes.dev_root) if has_devices else None
    note = _detected_note(detected, davinci, torch_devices, probes)
    name = opts.profile or device.default_hardware(probes.env, probes.dev_root, detected)
    return Context(probes, opts, detected, note, device.get_profile(name), davinci, torch_devices)


def run_checks(opts: Options, probes: Probes | None = None) -> Report:
    probes = probes or Probes()
    ctx = build_context(opts, probes)
    results: list[Result] = []
    for group in REGISTRY:
        if opts.only is not None and group.name not in opts.only:
            continue
        if group.applies is not None and not group.applies(ctx.profile):
            where = " / ".join(group.platforms())
            results.append(skip(group.name, f"only for {where} (this run targets {ctx.profile.name})"))
            continue
        try:
            results.extend(group.check(ctx))
        except Exception as exc:  # noqa: BLE001  (one broken probe must not hide the other checks)
            summary = f"the check itself failed: {type(exc).__name__}: {exc}"
            fix = "re-run with --only to skip it, and report this (--json output helps)"
            results.append(fail(group.name, summary, fix))
    return Report(ctx.detected.name, ctx.profile.name, ctx.platform.name, opts.phase, results)


def render_table(report: Report, verbose: bool = False) -> str:
    rows = report.results
    width = max([len(r.check) for r in rows] + [5])
    lines = [
        f"retool-doctor: platform {report.detected}, hardware {report.profile}, phase {report.phase} "
        f"(pins: {pins.PINS_FILE})",
        f"{'STATUS':<6}  {'CHECK':<{width}}  RESULT",
    ]
    for r in rows:
        lines.append(f"{r.status:<6}  {r.check:<{width}}  {r.summary}")
        if r.fix and r.status in (WARN, FAIL):
            lines.append(f"{'':<6}  {'':<{width}}  fix: {r.fix}")
        if verbose and r.check == "npu-smi":
            for dev in r.details.get("devices", []):
                lines.append(
                    f"{'':<6}  {'':<{width}}  NPU {dev['npu']} chip {dev['chip']}: {dev['health']}, "
                    f"HBM {dev['hbm_used_mb']}/{dev['hbm_total_mb']} MB"
                )
    counts = report.counts()
    verdict = "not ready: fix the FAIL lines before starting a run" if report.exit_code else "ready"
    lines.append(", ".join(f"{counts[s]} {s}" for s in STATUSES if counts[s]) + f" -> {verdict}")
    return "\n".join(lines) + "\n"


def _csv(value: str) -> frozenset[str]:
    names = frozenset(v.strip() for v in value.split(",") if v.strip())
    unknown = names - set(GROUPS)
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown check group(s) {', '.join(sorted(unknown))}; choose from {', '.join(GROUPS)}"
        )
    return names


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="retool-doctor",
        description="Check this machine before a ReTool SFT/RL run: platform, CANN, npu-smi, network interface, "
        "versions against the kit's pins, verl's patches, Ray's device count, env vars, sandbox, paths and disk. "
        "Exit 1 on any FAIL, 2 on a usage error.",
    )
    parser.add_argument("--phase", choices=PHASES, default="rl", help="which run to check for (default %(default)s)")
    add_profile_option(parser, "hardware profile (default: KIT_HW, else this machine's)")
    add_stack_option(parser)
    parser.add_argument("--json", action="store_true", help="print the report as JSON (top-level 'platform' field)")
    parser.add_argument("--only", type=_csv, help=f"comma-separated groups to run: {', '.join(GROUPS)}")
    parser.add_argument("-v", "--verbose", action="store_true", help="table: list every device npu-smi reports")
    parser.add_argument(
        "--sandbox-url",
        help=f"sandbox to ping (GET <base>/v1/ping), e.g. http://127.0.0.1:8080/run_code (default: ${SANDBOX_URL_ENV})",
    )
    parser.add_argument("--model", type=Path, help="local model directory to check (config, tokenizer, weights)")
    parser.add_argument("--data", type=Path, action="append", default=[], help="data file or dir to check (repeatable)")
    parser.add_argument("--ckpt-dir", type=Path, help="where checkpoints go: checks free space and write access")
    parser.add_argument(
        "--min-free-gb",
        type=number_arg(0),
        help="free space to require under --ckpt-dir (default: one checkpoint of --model, sized as the recipe's "
        "dry run sizes it; without --model an assumed 100)",
    )
    parser.add_argument(
        "--node-ip",
        help="this node's address as the other nodes reach it (default: the source address of the route to "
        "MASTER_ADDR, else of the default route)",
    )
    probe = parser.add_argument_group("where to look (defaults read this machine; tests point them at fakes)")
    probe.add_argument("--dev-root", type=Path, default=Path("/dev"), help="device node directory (default /dev)")
    probe.add_argument("--cann-root", type=Path, default=CANN_ROOT, help="Ascend install root (default %(default)s)")
    probe.add_argument("--npu-smi", help="npu-smi binary (default: found on PATH)")
    probe.add_argument(
        "--patches-dir", type=input_folder(), help="the kit's patch series (default: the kit's patches/)"
    )
    probe.add_argument("--ray-resources-json", type=input_file(), help="JSON file with this node's Ray resources")
    probe.add_argument("--ray-address", help="Ray cluster to query (default: RAY_ADDRESS, or a running local one)")
    probe.add_argument("--ip-addr-file", type=input_file(), help="saved `ip -o -4 addr show` output (default: run it)")
    return parser


@entry_point("retool-doctor")
def main(argv: Sequence[str] | None = None, probes: Probes | None = None) -> int:
    args = build_parser().parse_args(argv)
    opts = Options(
        stack=stacks.export(stacks.resolve(args.stack)),  # the versions and the patch series are held to this stack
        phase=args.phase,
        profile=args.profile,
        only=args.only,
        sandbox_url=args.sandbox_url,
        model=args.model,
        data=list(args.data),
        ckpt_dir=args.ckpt_dir,
        min_free_gb=args.min_free_gb,
        node_ip=args.node_ip,
    )
    if probes is None:
        probes = Probes(
            dev_root=args.dev_root,
            cann_root=args.cann_root,
            npu_smi=args.npu_smi,
            ray_resources_json=args.ray_resources_json,
            ray_address=args.ray_address,
        )
        if args.patches_dir is not None:
            probes.patches_dir = args.patches_dir
        if args.ip_addr_file is not None:
            ip_addr_file: Path = args.ip_addr_file
            probes.ip_addr_text = ip_addr_file.read_text
    report = run_checks(opts, probes)  # KIT_DEVICE=tpu or KIT_HW=a9 raise the platform's UsageError: one line
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        sys.stdout.write(render_table(report, verbose=args.verbose))
    return report.exit_code
