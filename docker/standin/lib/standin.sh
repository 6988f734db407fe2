# shellcheck shell=bash
# Shared steps of the stand-in bases (sourced by docker/standin/*.sh; only scripts/test_images.sh runs those):
# a Debian bookworm root filesystem from Debian's mirror with Python 3.11 as a venv at /usr/local, this machine's
# extra CAs, the stand-in marker, and `docker import` under a tag with the stand-in label.

# The host commands the stand-in builds call (this file and docker/standin/*.sh; cann_stub.sh runs inside the image),
# each as COMMAND:PACKAGE, the Debian/Ubuntu package that brings it. A fresh machine lacks debootstrap (issue 44:
# `debootstrap: command not found` right after scripts/test_images.sh had installed docker.io for its daemon).
# tests/docker/test_issue44_standin_tools.py holds this list to the commands the scripts call.
STANDIN_TOOLS=(debootstrap:debootstrap chroot:coreutils mktemp:coreutils cp:coreutils rm:coreutils tail:coreutils
  cat:coreutils dirname:coreutils sort:coreutils id:coreutils tar:tar awk:mawk docker:docker.io)
# debootstrap checks bookworm's Release file against Debian's archive key: a package of its own on Ubuntu.
STANDIN_KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg

# standin_need_tools: the packages of the STANDIN_TOOLS missing here, and Debian's archive keyring, installed with
# apt-get as test_images.py installs docker.io (as root); without root or apt-get, one line naming them, exit 2.
standin_need_tools() {
  local pair missing=()
  for pair in "${STANDIN_TOOLS[@]}"; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}")
  done
  [[ -f $STANDIN_KEYRING ]] || missing+=(debian-archive-keyring)
  ((${#missing[@]} > 0)) || return 0
  mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
  if [[ $(id -u) != 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
    echo "stand-in: error: ${missing[*]} missing (install them: as root with apt-get, this script does)" >&2
    exit 2
  fi
  echo "stand-in: installing ${missing[*]} (apt)" >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >&2
}

# standin_rootfs ROOT MIRROR EXTRA_PACKAGES: debootstrap bookworm (minbase) + python3 made the /usr/local Python.
standin_rootfs() {
  local root=$1 mirror=$2 extra=$3
  debootstrap --variant=minbase --include="ca-certificates,netbase,tzdata,python3,python3-venv${extra:+,$extra}" \
    bookworm "$root" "$mirror" >"$root.log" 2>&1 || {
    tail -20 "$root.log" >&2
    echo "stand-in: debootstrap of bookworm from $mirror failed (log above)" >&2
    return 1
  }
  rm -f "$root.log"
  chroot "$root" /usr/bin/python3 -m venv /usr/local
  chroot "$root" /usr/local/bin/python3 -m pip --version >/dev/null
}

# standin_cas ROOT: trust this machine's own extra CAs inside (a TLS-intercepting egress proxy signs PyPI's
# certificate with them: without them pip in the build fails with CERTIFICATE_VERIFY_FAILED). A site-local fact,
# not the real base's. Sets the array STANDIN_CA_CHANGES (docker import --change ENV lines for pip and requests).
standin_cas() {
  local root=$1 bundle=/etc/ssl/certs/ca-certificates.crt
  # shellcheck disable=SC2034  # read by the sourcing script
  STANDIN_CA_CHANGES=()
  if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
    chroot "$root" update-ca-certificates >/dev/null
    # shellcheck disable=SC2034
    STANDIN_CA_CHANGES=(--change "ENV PIP_CERT=$bundle" --change "ENV REQUESTS_CA_BUNDLE=$bundle"
      --change "ENV SSL_CERT_FILE=$bundle")
  fi
}

# standin_import ROOT TAG [docker import --change ...]: the root as image TAG, labelled a stand-in.
standin_import() {
  local root=$1 tag=$2
  shift 2
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb
  tar -C "$root" -c . | docker import \
    --change 'ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'LABEL retool-kit.stand-in="made by scripts/test_images.sh; not the real base"' \
    "$@" - "$tag" >/dev/null
}

# standin_python_version ROOT: the Python the root carries (e.g. 3.11.2).
standin_python_version() {
  chroot "$1" /usr/local/bin/python3 -c 'import platform; print(platform.python_version())'
}

# standin_shared_root MIRROR: the Debian root both accelerator stand-ins build on (git for setup_verl.sh, as the
# real bases have it), imported once and reused, so the a2 and a3 stand-ins share every layer; prints its tag.
standin_shared_root() {
  local mirror=$1 tag=retool-kit-standin/bookworm-python:3.11-git root
  if ! docker image inspect "$tag" >/dev/null 2>&1; then
    root=$(mktemp -d /var/tmp/kit-standin.XXXXXX)
    standin_rootfs "$root" "$mirror" git >&2 || {
      rm -rf "$root"
      return 1
    }
    standin_cas "$root"
    standin_import "$root" "$tag" "${STANDIN_CA_CHANGES[@]}"
    rm -rf "$root"
  fi
  echo "$tag"
}

# Debian's mirror, unless a stand-in script is given another as its second argument.
# shellcheck disable=SC2034  # read by the sourcing scripts
STANDIN_DEFAULT_MIRROR=http://deb.debian.org/debian

# standin_usage SCRIPT ARGS...: a stand-in script's --help (its header comment) and exit 0; with no TAG, the same and
# exit 2; otherwise nothing.
standin_usage() {
  local script=$1
  shift
  if [[ ${1:-} == -h || ${1:-} == --help || $# -lt 1 ]]; then
    awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$script"
    [[ $# -ge 1 ]] && exit 0 || exit 2
  fi
}

# standin_py_pin NAME PY_PINS: NAME's spec among the stack's pinned packages (e.g. numpy==2.2.6), empty when unpinned.
standin_py_pin() {
  local spec
  # shellcheck disable=SC2086 # PY_PINS: a space-separated list of requirement specs (pins.env), split on purpose
  for spec in $2; do
    [[ ${spec%%==*} == "$1" ]] && echo "$spec" && return 0
  done
  return 0
}
