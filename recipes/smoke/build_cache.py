"""The build cache of the smoke's offline model directory: one lock, a fingerprint per build, atomic moves.

Why apart from the builders (:mod:`recipes.smoke.offline_tokenizer`, :mod:`recipes.smoke.tiny_model`): both keep
the same kind of record (the inputs + sha256 of every file written) in the same directory under the same lock, and
the cache check must stay cheap (no torch or transformers import: versions come from package metadata). A build is
written to a temporary directory first and its fingerprint last, so an interrupted build is never mistaken for a
complete one.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from recipes.retool.bundle import file_sha256  # streamed sha256, one copy in the kit

# Bump when the build logic changes in a way that alters the output, so stale caches are rebuilt.
BUILD_REVISION = 1

LOCK_FILE = ".tiny_model.lock"


def log(msg: str) -> None:
    print(f"[tiny_model] {msg}", file=sys.stderr, flush=True)


def digest(obj: Any) -> str:
    """sha256 of ``obj`` as canonical JSON: a fingerprint of plain-data build inputs."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


def version(dist: str) -> str:
    """Installed version, read from package metadata: the cache check must not pay for importing torch."""
    return importlib.metadata.version(dist)


@contextlib.contextmanager
def locked(out_dir: Path) -> Iterator[None]:
    """Serialise builders of the same directory (parallel pytest workers, several launch scripts)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / LOCK_FILE, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def is_cached(out_dir: Path, fingerprint_name: str, inputs: dict[str, Any]) -> bool:
    """True if ``out_dir`` holds a finished build of ``inputs`` whose files are all still intact."""
    try:
        record = json.loads((out_dir / fingerprint_name).read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(record, dict) or record.get("inputs") != inputs or not record.get("files"):
        return False
    for name, sha in record["files"].items():
        path = out_dir / name
        if not path.is_file() or file_sha256(path) != sha:
            return False
    return True


def write_fingerprint(out_dir: Path, fingerprint_name: str, inputs: dict[str, Any], files: list[str]) -> None:
    """Record a finished build (written last, atomically: its presence means the build is whole)."""
    record = {"inputs": inputs, "files": {name: file_sha256(out_dir / name) for name in sorted(files)}}
    tmp = out_dir / f".{fingerprint_name}.tmp"
    tmp.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, out_dir / fingerprint_name)


def move_into(src: Path, out_dir: Path) -> list[str]:
    """Move the finished files of a build into ``out_dir``, world-readable (some savers create them 0600, which
    breaks containers that mount the directory under another user)."""
    names = sorted(p.name for p in src.iterdir() if p.is_file())
    for name in names:
        os.chmod(src / name, 0o644)
        os.replace(src / name, out_dir / name)
    return names
