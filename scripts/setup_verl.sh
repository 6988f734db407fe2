#!/usr/bin/env bash
# verl at the kit's pin with the kit's patch series applied by `git am`.
# Idempotent: patches already in the tree (same patch-id) are skipped; a patch that does not apply
# leaves the tree exactly as it was. The last line on success is always `verl <version>: N patches applied`.
set -euo pipefail

KIT_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=lib/stack.sh
source "$KIT_ROOT/scripts/lib/stack.sh"
user_patch_dir=${KIT_PATCH_DIR:-}
# --stack picks the pins (pins.env, through platforms/stacks.py) and the series: patches/ for the reference stack,
# patches/<stack>/ for the other; a KIT_PATCH_DIR set before this replaces the series.
kit_use_stack "$(kit_stack_option "$@")" || exit 2

PATCH_DIR="${user_patch_dir:-$KIT_PATCH_DIR}"
PYTHON="${PYTHON:-python3}"

usage() {
  cat <<EOF
Usage: scripts/setup_verl.sh [--stack $(echo "$KIT_STACKS" | tr ' ' '|')] [--source git|sdist] [--repo URL|PATH]
                             [--sdist FILE] [--dest DIR] [--install] [--check] [--help]

Builds verl $VERL_VERSION with the kit's patch series ($PATCH_DIR) applied by git am.

  --stack NAME     which stack's verl and series ($KIT_DEFAULT_STACK, the reference: patches/*.patch; 0.9.1: verl 0.9.1
                   with patches/0.9.1/*.patch); default: KIT_STACK, else the stack of the active venv's verl, else
                   $KIT_DEFAULT_STACK. Shown above: stack $KIT_STACK. KIT_PATCH_DIR, when set, replaces the series.

  --source git     (default) clone --repo (default $VERL_GIT_URL) into --dest, or reuse the git
                   checkout already at --dest / --repo PATH, and work on branch retool-kit at $VERL_GIT_TAG.
  --source sdist   for CI and offline mirrors: download the verl==$VERL_VERSION sdist from the configured
                   package index (or take --sdist FILE), verify its sha256, unpack, git init, commit it as
                   the base (tagged $VERL_GIT_TAG), then git am the series.
  --repo URL|PATH  where to clone from (git source). A local checkout given without --dest is patched in place;
                   a PATH must be a git repository.
  --sdist FILE     use this verl-$VERL_VERSION.tar.gz instead of downloading it: no network needed (implies
                   --source sdist). retool-bundle create puts it in BUNDLE/sdist/.
  --dest DIR       the tree to create or reuse (default: $KIT_VERL_TREE).
  --install        pip-install the patched tree into the active Python (\$PYTHON, default python3), without
                   verl's top-level tests/ and scripts/ packages, with the pins of pins.env as constraints.
  --check          apply the series in a scratch copy of --dest (of --repo when it is given without --dest)
                   and report; nothing is modified.
  -h, --help       this help.

Exit status: 0 on success (also when the tree was already patched); 2 for wrong input (an unknown option or
value, a --repo path that is not a git repository, a tree that is not verl $VERL_VERSION at $VERL_GIT_TAG); 1 when a
patch does not apply (the tree is left as it was), a clone or download fails, or the sdist checksum is wrong.
EOF
}

# The kit's exit codes (platforms/cli_errors.py): 1 a step failed, 2 the input is wrong; one line either way.
die() { echo "setup_verl: error: $*" >&2; exit 1; }
die_usage() { echo "setup_verl: error: $*" >&2; exit 2; }
log() { echo "setup_verl: $*"; }

need_value() { # $1: option, $2: the number of words left, $3: what it takes
  (($2 >= 2)) || die_usage "$1 needs $3 (see --help)"
}

is_url() { [[ $1 == *://* || $1 =~ ^[^/]+: ]]; } # scheme://... or scp-like host:path: git clone's business

check_repo() { # --repo PATH: a git repository (a checkout or a bare one), checked before anything is built
  is_url "$1" && return 0
  [[ -e $1 ]] || die_usage "--repo $1: no such folder (give a verl git checkout, or a URL to clone from)"
  [[ -e $1/.git || (-f $1/HEAD && -d $1/objects) ]] ||
    die_usage "--repo $1 is not a git repository (give a verl git checkout, or a URL to clone from)"
}

source_kind=git source_given=0 repo="" sdist="" dest="" dest_given=0 install=0 check=0
while (($#)); do
  case "$1" in
    --stack) need_value "$1" $# "a stack name"; shift 2 ;; # read above (kit_use_stack)
    --stack=*) shift ;;
    --source) need_value "$1" $# "git or sdist"; source_kind=$2; source_given=1; shift 2 ;;
    --repo) need_value "$1" $# "a URL or path"; repo=$2; shift 2 ;;
    --sdist) need_value "$1" $# "a file"; sdist=$2; shift 2 ;;
    --dest) need_value "$1" $# "a directory"; dest=$2; dest_given=1; shift 2 ;;
    --install) install=1; shift ;;
    --check) check=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) die_usage "unknown argument: $1 (see --help)" ;;
  esac
done
[[ $source_kind == git || $source_kind == sdist ]] || die_usage "--source must be git or sdist, not '$source_kind'"
if [[ -n $sdist ]]; then # checked before anything is built; a local sdist means no network (issue 33, bare metal)
  [[ $source_kind == sdist || $source_given == 0 ]] || die_usage "--sdist goes with --source sdist, not --source git"
  source_kind=sdist
  [[ -f $sdist && -r $sdist ]] ||
    die_usage "--sdist $sdist: no such file (give verl-$VERL_VERSION.tar.gz, e.g. BUNDLE/sdist/ of retool-bundle create)"
fi
[[ -z $repo ]] || check_repo "$repo"
if [[ -z $dest ]]; then
  if [[ $source_kind == git && -n $repo && -e $repo/.git ]]; then dest=$repo; else dest=$KIT_VERL_TREE; fi
fi

shopt -s nullglob
patches=("$PATCH_DIR"/*.patch)
shopt -u nullglob
((${#patches[@]})) || die "no patches in $PATCH_DIR"

# --- making the base tree ---------------------------------------------------------------------------

make_sdist_tree() { # $1: target directory (must not exist)
  local target=$1 tarball=$sdist tmp
  tmp=$(mktemp -d)
  if [[ -z $tarball ]]; then
    log "downloading the verl==$VERL_VERSION sdist from the package index (--sdist FILE: no network needed)"
    # Two retries (a passing network hiccup) and a short timeout: offline, pip's default of 5 retries (15 s timeouts,
    # longer with the user's PIP_DEFAULT_TIMEOUT) looked like a hang; the one line below says how to give the file.
    "$PYTHON" -m pip download --quiet --retries 2 --timeout 15 --no-deps --no-binary verl \
      -d "$tmp" "verl==$VERL_VERSION" >"$tmp/pip.log" 2>&1 || {
      rm -rf "$tmp"
      die "could not download the verl==$VERL_VERSION sdist from the package index (offline?); give the file with" \
        "--sdist FILE (retool-bundle create puts it in BUNDLE/sdist/verl-$VERL_VERSION.tar.gz)"
    }
    tarball=$tmp/verl-$VERL_VERSION.tar.gz
  fi
  [[ -f $tarball ]] || { rm -rf "$tmp"; die "sdist not found: $tarball"; }
  local sum
  sum=$(sha256sum "$tarball" | cut -d' ' -f1)
  [[ $sum == "$VERL_SDIST_SHA256" ]] ||
    { rm -rf "$tmp"; die "sha256 mismatch for $tarball: got $sum, pins.env expects $VERL_SDIST_SHA256"; }
  log "sdist sha256 ok ($sum)"
  mkdir -p "$target"
  tar -xzf "$tarball" -C "$target" --strip-components=1
  rm -rf "$tmp"
  # Fixed identity and dates: every machine gets the same base commit id.
  (
    cd "$target"
    export GIT_AUTHOR_DATE="2025-11-14T00:00:00Z" GIT_COMMITTER_DATE="2025-11-14T00:00:00Z"
    git init --quiet
    ensure_identity .
    git add --all
    git commit --quiet --no-gpg-sign -m "verl $VERL_VERSION (PyPI sdist)"
    git tag "$VERL_GIT_TAG"
    git checkout --quiet -b retool-kit
  )
  log "base tree at $target ($VERL_GIT_TAG = $(git -C "$target" rev-parse --short HEAD))"
}

make_git_tree() { # $1: target directory (must not exist)
  local url=${repo:-$VERL_GIT_URL}
  log "cloning $url into $1"
  git clone --quiet "$url" "$1" || die "git clone of $url failed"
}

ensure_identity() { # $1: tree. git am and its --abort need a committer; CI machines have none.
  if [[ -z $(git -C "$1" config user.email || true) ]]; then
    git -C "$1" config --local user.name "retool-kit"
    git -C "$1" config --local user.email "retool-kit@localhost"
  fi
}

ensure_base() { # $1: tree, $2: its name in messages (what the user gave). Puts a clean tree on a branch that
  # contains the pinned tag; a tree that is not verl at the pin is the wrong folder: exit 2.
  local tree=$1 shown=${2:-$1}
  ensure_identity "$tree"
  git -C "$tree" rev-parse --verify --quiet "$VERL_GIT_TAG^{commit}" >/dev/null ||
    git -C "$tree" fetch --quiet --tags >/dev/null 2>&1 || true
  git -C "$tree" rev-parse --verify --quiet "$VERL_GIT_TAG^{commit}" >/dev/null ||
    die_usage "$shown has no tag $VERL_GIT_TAG (is it a verl checkout?)"
  if ! git -C "$tree" merge-base --is-ancestor "$VERL_GIT_TAG" HEAD; then
    [[ -z $(git -C "$tree" status --porcelain --untracked-files=no) ]] ||
      die "$tree has uncommitted changes and is not based on $VERL_GIT_TAG; commit or stash them first"
    log "checking out $VERL_GIT_TAG as branch retool-kit"
    git -C "$tree" checkout --quiet -B retool-kit "$VERL_GIT_TAG"
  fi
  local version
  version=$(tr -d '[:space:]' <"$tree/verl/version/version" 2>/dev/null || true)
  [[ $version == "$VERL_VERSION" ]] || die_usage "$shown is verl ${version:-(no version file)}, the kit pins $VERL_VERSION"
}

# --- applying the series ------------------------------------------------------------------------------

patch_id_of_file() { git patch-id --stable <"$1" | cut -d' ' -f1; }
subject_of_file() { git mailinfo /dev/null /dev/null <"$1" | sed -n 's/^Subject: //p'; }

apply_series() { # $1: tree
  local tree=$1 applied_ids applied_subjects
  applied_ids=$(git -C "$tree" log --format=%H "$VERL_GIT_TAG..HEAD" |
    while read -r c; do git -C "$tree" show "$c" | git patch-id --stable | cut -d' ' -f1; done)
  applied_subjects=$(git -C "$tree" log --format=%s "$VERL_GIT_TAG..HEAD")
  local todo=() p
  for p in "${patches[@]}"; do
    if grep -qxF "$(patch_id_of_file "$p")" <<<"$applied_ids"; then
      continue
    fi
    if grep -qxF "$(subject_of_file "$p")" <<<"$applied_subjects"; then
      die "$tree carries an older version of $(basename "$p"); make a fresh tree (remove $tree) and run again"
    fi
    todo+=("$p")
  done
  if ((${#todo[@]} == 0)); then
    log "$tree is already patched: all ${#patches[@]} patches present"
    return 0
  fi
  [[ -z $(git -C "$tree" status --porcelain --untracked-files=no) ]] ||
    die "$tree has uncommitted changes; git am needs a clean tree"
  log "applying ${#todo[@]} of ${#patches[@]} patches to $tree"
  local out
  if ! out=$(git -C "$tree" am --quiet --no-gpg-sign "${todo[@]}" 2>&1); then
    local failed_patch failed_file
    failed_patch=$(sed -n 's/^Patch failed at \([0-9]*\) .*/\1/p' <<<"$out" | head -n1)
    failed_file=$(sed -n -e 's/^error: patch failed: \(.*\):[0-9]*$/\1/p' -e 's/^error: \(.*\): does not exist in index$/\1/p' \
      -e 's/^error: \(.*\): patch does not apply$/\1/p' <<<"$out" | head -n1)
    git -C "$tree" am --abort >/dev/null 2>&1 || true
    echo "$out" >&2
    local name=${todo[0]}
    [[ -n $failed_patch ]] && name=${todo[$((10#$failed_patch - 1))]:-${todo[0]}}
    die "patch $(basename "$name") does not apply to $tree (failing file: ${failed_file:-unknown}); the tree was left as it was"
  fi
  for p in "${todo[@]}"; do log "  applied $(basename "$p")"; done
}

# --- installing -----------------------------------------------------------------------------------------

install_tree() { # $1: tree
  local tree=$1 stage constraints
  stage=$(mktemp -d)
  constraints=$stage/constraints.txt
  # shellcheck disable=SC2086 # PY_PINS is a space-separated list of requirement specs
  printf '%s\n' $PY_PINS >"$constraints"
  git -C "$tree" archive --format=tar HEAD | tar -x -C "$stage"
  # verl's wheel installs top-level `tests` and `scripts` packages that clash with everyone's.
  rm -rf "$stage/tests" "$stage/scripts" "$stage/verl.egg-info"
  # Record the series in the package (version/* is package data) so a doctor can tell what it carries.
  for p in "${patches[@]}"; do
    printf '%s %s %s\n' "$(patch_id_of_file "$p")" "$(basename "$p")" "$(subject_of_file "$p")"
  done >"$stage/verl/version/kit_patches"
  log "installing patched verl into $("$PYTHON" -c 'import sys; print(sys.prefix)')"
  "$PYTHON" -m pip uninstall --quiet --yes verl >/dev/null 2>&1 || true
  # shellcheck disable=SC2086
  if ! "$PYTHON" -m pip install -c "$constraints" "$stage" $VERL_UNDECLARED_DEPS >"$stage/pip.log" 2>&1; then
    tail -n 40 "$stage/pip.log" >&2
    rm -rf "$stage"
    die "pip install of the patched tree failed (last lines above)"
  fi
  rm -rf "$stage"
  "$PYTHON" - <<'EOF' || die "the installed verl is not the patched tree, or it still ships tests/ or scripts/"
import importlib.metadata as md, pathlib, verl
top = (md.distribution("verl").read_text("top_level.txt") or "").split()
assert top == ["verl"], top
assert (pathlib.Path(verl.__file__).parent / "version" / "kit_patches").is_file()
EOF
}

# --- main -----------------------------------------------------------------------------------------------

work=$dest
shown=$dest # the tree as the user named it: --check works on a scratch copy
scratch=""
cleanup() { [[ -n $scratch ]] && rm -rf "$scratch"; return 0; }
trap cleanup EXIT
if ((check)); then
  scratch=$(mktemp -d)
  work=$scratch/verl
  # What is checked: --dest, or the --repo given without --dest (a URL or a bare repository is cloned below),
  # never a build/verl the command line did not name.
  [[ $source_kind == git && -n $repo && $dest_given == 0 ]] && shown=$repo
  if [[ -e $shown/.git ]]; then
    git clone --quiet --no-hardlinks "$shown" "$work"
    git -C "$work" checkout --quiet -B retool-kit "$(git -C "$shown" rev-parse HEAD)"
  fi
fi

if [[ ! -e $work/.git ]]; then
  [[ -e $work ]] && die_usage "$work exists but is not a git tree"
  mkdir -p "$(dirname "$work")"
  if [[ $source_kind == sdist ]]; then make_sdist_tree "$work"; else make_git_tree "$work"; fi
fi
ensure_base "$work" "$shown"
apply_series "$work"

if ((check)); then
  log "check only: the series applies to a scratch copy of ${shown}; nothing was changed"
elif ((install)); then
  install_tree "$work"
fi
echo "verl $VERL_VERSION: ${#patches[@]} patches applied"
