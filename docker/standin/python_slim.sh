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
# Usage: docker/standin/python_slim.sh TAG [MIRROR]   (root; needs debootstrap and a running docker daemon)
set -euo pipefail

if [[ ${1:-} == -h || ${1:-} == --help || $# -lt 1 ]]; then
  sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
  [[ $# -ge 1 ]] && exit 0 || exit 2
fi
tag=$1
mirror=${2:-http://deb.debian.org/debian}
root=$(mktemp -d /var/tmp/kit-standin.XXXXXX)
trap 'rm -rf "$root"' EXIT

debootstrap --variant=minbase --include=ca-certificates,netbase,tzdata,python3,python3-venv \
  bookworm "$root" "$mirror" >"$root.log" 2>&1 || {
  tail -20 "$root.log" >&2
  echo "python_slim.sh: debootstrap of bookworm from $mirror failed (log above)" >&2
  exit 1
}
rm -f "$root.log"
chroot "$root" /usr/bin/python3 -m venv /usr/local
chroot "$root" /usr/local/bin/python3 -m pip --version >/dev/null
version=$(chroot "$root" /usr/local/bin/python3 -c 'import platform; print(platform.python_version())')
cat >"$root/etc/retool-kit-standin.json" <<JSON
{"stand_in_for": "$tag", "made_by": "scripts/test_images.sh (docker/standin/python_slim.sh)",
 "reproduces": "Debian 12 bookworm; python3 $version and pip on /usr/local/bin, site-packages under /usr/local/lib/python3.11; ENV PATH, LANG, PYTHON_VERSION; CMD python3",
 "differs": "Debian's Python $version, not python.org's build; this machine's extra CAs (if any) trusted, PIP_CERT set"}
JSON
# This machine's own extra CAs (a TLS-intercepting egress proxy signs PyPI's certificate with them): without them pip
# in the build fails with CERTIFICATE_VERIFY_FAILED. A site-local fact, not the real base's; pip and requests use
# certifi's bundle unless told, hence the ENV below.
ca_env=()
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
  chroot "$root" update-ca-certificates >/dev/null
  bundle=/etc/ssl/certs/ca-certificates.crt
  ca_env=(--change "ENV PIP_CERT=$bundle" --change "ENV REQUESTS_CA_BUNDLE=$bundle" --change "ENV SSL_CERT_FILE=$bundle")
fi
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb
tar -C "$root" -c . | docker import \
  --change 'ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change "ENV PYTHON_VERSION=$version" \
  --change 'LABEL retool-kit.stand-in="made by scripts/test_images.sh; not the real base"' \
  --change 'CMD ["python3"]' "${ca_env[@]}" \
  - "$tag" >/dev/null
echo "$tag"
