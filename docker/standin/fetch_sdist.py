"""Download one sdist from PyPI's simple index (PEP 691 JSON) and check its sha256; print its path.

Why not ``pip download``: pip builds the sdist's metadata to check the version, and vLLM built with
``VLLM_TARGET_DEVICE=empty`` (as the vllm-ascend image installs it) calls itself ``0.11.0+empty``, which pip refuses
for a request of ``vllm==0.11.0``. Runs inside docker/standin/Dockerfile.vllm-ascend; standard library only.

    python3 fetch_sdist.py NAME VERSION DEST_DIR
"""

import hashlib
import json
import sys
import urllib.request
from pathlib import Path

INDEX = "https://pypi.org/simple"


def main(name: str, version: str, dest: str) -> int:
    request = urllib.request.Request(f"{INDEX}/{name}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=60) as answer:
        files = json.load(answer)["files"]
    wanted = f"{name.replace('-', '_')}-{version}.tar.gz", f"{name}-{version}.tar.gz"
    entry = next((f for f in files if f["filename"] in wanted), None)
    if entry is None:
        sys.exit(f"fetch_sdist: no sdist {wanted[1]} on {INDEX}")
    path = Path(dest) / entry["filename"]
    path.parent.mkdir(parents=True, exist_ok=True)
    urllib.request.urlretrieve(entry["url"], path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != entry["hashes"]["sha256"]:
        sys.exit(f"fetch_sdist: {path.name}: sha256 {digest} is not the index's {entry['hashes']['sha256']}")
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
