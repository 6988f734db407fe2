# shellcheck shell=bash
# Free disk during the test run, where the venvs and models (the repo) and pytest's temporary folders (TMPDIR) live.
# Sourced by scripts/test.sh. CI's machine has run out of disk in phase 2 twice (6626a20, and 348308f: "No space left
# on device" building .venv-0.9.1 beside phase 1), its free space differs run to run, and CI shows only the tail of
# the log: so each phase's lowest free space (sampled every KIT_DISK_SAMPLE_S seconds in the background, default 5)
# is kept, and disk_summary prints them all in one line at the end (docs/testing.md, "Disk").

KIT_DISK_SAMPLE_S=${KIT_DISK_SAMPLE_S:-5}
_kit_disk_lows=()  # "label: N GB" per phase, in order
_kit_disk_watch_pid=""
_kit_disk_low_file=""

_kit_df_kb() { df -Pk "$1" | awk 'NR == 2 {print $4}'; } # free KB on $1's filesystem

_kit_disk_free_kb() {
  # The smaller free space of the repo's and TMPDIR's filesystems (the same one on CI's machine).
  local repo tmp
  repo=$(_kit_df_kb "$KIT_ROOT")
  tmp=$(_kit_df_kb "${TMPDIR:-/tmp}")
  echo $((repo < tmp ? repo : tmp))
}

#: The free space one more stack's venv needs beside a phase of tests (GB, KIT_TEST_VENV_ROOM_GB to change). Measured on
#: a fresh clone (docs/measurements/ci.yaml): .venv-0.9.1 took 6.5 GB, and beside it phase 2 peaked 3.5 GB above its
#: start; 2 GB to spare, which also covers the build's own peak beside phase 1 (pip's downloads: 2.6 GB while .venv
#: was built; phase 1's own peak: 0.5 GB).
KIT_TEST_VENV_ROOM_GB=${KIT_TEST_VENV_ROOM_GB:-12}

disk_has_room() {
  # Whether the disk has room for $1 more venvs beside a phase (KIT_TEST_VENV_ROOM_GB each).
  (($(_kit_disk_free_kb) >= $1 * KIT_TEST_VENV_ROOM_GB * 1048576))
}

disk_room_line() {
  # Why (not): "N GB free, M more venv(s) need K GB beside a phase (KIT_TEST_VENV_ROOM_GB each)".
  echo "$(_kit_gb "$(_kit_disk_free_kb)") GB free, $1 more venv(s) need $(($1 * KIT_TEST_VENV_ROOM_GB)) GB beside a" \
    "phase (KIT_TEST_VENV_ROOM_GB=$KIT_TEST_VENV_ROOM_GB each; docs/testing.md, \"Disk\")"
}

_kit_gb() { awk -v kb="$1" 'BEGIN {printf "%.1f", kb / 1048576}'; }

disk_free() {
  # One line: free space for the repo and in TMPDIR now ($1: when).
  local tmp=${TMPDIR:-/tmp}
  echo "== disk ($1): $(_kit_gb "$(_kit_df_kb "$KIT_ROOT")") GB free for the repo, $(_kit_gb "$(_kit_df_kb "$tmp")")" \
    "GB in $tmp"
}

disk_watch_start() {
  # Sample the free space in the background until disk_watch_stop; the lowest seen is kept in a file.
  _kit_disk_low_file=$(mktemp)
  _kit_disk_free_kb >"$_kit_disk_low_file"
  (
    low=$(cat "$_kit_disk_low_file")
    while sleep "$KIT_DISK_SAMPLE_S"; do
      free=$(_kit_disk_free_kb) || continue
      if ((free < low)); then
        low=$free
        echo "$low" >"$_kit_disk_low_file"
      fi
    done
  ) &
  _kit_disk_watch_pid=$!
}

disk_watch_stop() {
  # Stop the sampler; record "$1: <lowest> GB" (with one last sample) for disk_summary and print it.
  local low now
  [[ -n $_kit_disk_watch_pid ]] || return 0
  kill "$_kit_disk_watch_pid" 2>/dev/null || true
  wait "$_kit_disk_watch_pid" 2>/dev/null || true
  _kit_disk_watch_pid=""
  low=$(cat "$_kit_disk_low_file")
  now=$(_kit_disk_free_kb)
  ((now < low)) && low=$now
  rm -f "$_kit_disk_low_file"
  _kit_disk_lows+=("$1: $(_kit_gb "$low")")
  echo "== disk: the lowest free space during $1: $(_kit_gb "$low") GB"
}

disk_summary() {
  # Every phase's lowest free space in one line ($1: the free space at the start, in KB).
  local joined
  joined=$(printf '%s, ' "${_kit_disk_lows[@]}")
  echo "== disk: $(_kit_gb "$1") GB free at the start; the lowest (GB) during ${joined%, }"
}
