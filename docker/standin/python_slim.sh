#!/usr/bin/env bash
# A STAND-IN for the CPU image's base (pins.env CPU_BASE_IMAGE:CPU_BASE_TAG, python:3.11-slim-bookworm), built from
# local material on a machine that cannot reach Docker Hub: Debian's debootstrap of bookworm from Debian's mirror,
# Debian's Python 3.11 made the /usr/local Python the real base has, then `docker import` under the real base's tag.
# Only scripts/test_images.sh calls it; the image carries a label and /etc/retool-kit-standin.json, and
# retool-doctor warns inside any image built on it. Never push or ship it.
#
# What it reproduces of the real base, and where each fact comes from (the python image's published layers,
# docker-library/repo-info repos/python/remote/slim.md: ENV PATH=/usr/local/bin:..., ENV LANG=C.UTF-8, apt-get
# install ca-certificates netbase, ENV PYTHON_VERSION, CMD ["python3"]):
#   Debian 12 bookworm, apt from deb.debian.org; python3 and pip on /usr/local/bin, packages under
#   /usr/local/lib/python3.11/site-packages (a venv at /usr/local: no PEP 668 "externally managed" refusal, as in
#   the real image); ENV PATH, LANG, PYTHON_VERSION; CMD python3.
# What differs: Python 3.11.2 from Debian instead of python.org's latest 3.11.x build; pip from Debian's ensurepip.
#
# Usage: docker/standin/python_slim.sh TAG [MIRROR]   (root; debootstrap, apt-installed if missing; a docker daemon)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib/standin.sh
source "$here/lib/standin.sh"
standin_usage "$0" "$@"
standin_need_tools # debootstrap & co. on a fresh machine (apt-get, as root)
tag=$1
mirror=${2:-$STANDIN_DEFAULT_MIRROR}
root=$(mktemp -d /var/tmp/kit-standin.XXXXXX)
trap 'rm -rf "$root"' EXIT

standin_rootfs "$root" "$mirror" ""
version=$(standin_python_version "$root")
cat >"$root/etc/retool-kit-standin.json" <<JSON
{"stand_in_for": "$tag", "made_by": "scripts/test_images.sh (docker/standin/python_slim.sh)",
 "reproduces": "Debian 12 bookworm; python3 $version and pip on /usr/local/bin, site-packages under /usr/local/lib/python3.11; ENV PATH, LANG, PYTHON_VERSION; CMD python3",
 "differs": "Debian's Python $version, not python.org's build; this machine's extra CAs (if any) trusted, PIP_CERT set"}
JSON
standin_cas "$root"
standin_import "$root" "$tag" --change "ENV PYTHON_VERSION=$version" --change 'CMD ["python3"]' "${STANDIN_CA_CHANGES[@]}"
echo "$tag"
