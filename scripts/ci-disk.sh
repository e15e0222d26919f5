#!/usr/bin/env bash
# Keeps a reused CI target from filling the disk. A clean clone rebuilds the
# workspace's crates anyway, so their old artifacts (one set per past run, test
# binaries of 100–200 MB each), incremental state and half-written objects of a
# failed link are dropped; the dependencies, the slow part, stay. Where the disk
# is short even so, the whole target goes: a cold build fits the budget, a full
# disk fails the run.
set -euo pipefail
target="$1"
need_gb="${HEARTH_CI_FREE_GB:-25}"

free_gb() {
  local dir="$1"
  while [ ! -d "$dir" ]; do dir="$(dirname "$dir")"; done
  df -Pk "$dir" | awk 'NR==2 { print int($4 / 1048576) }'
}

echo "disk before the build: $(free_gb "$target") GB free where the target lives"
if [ -d "$target" ]; then
  for profile in "$target"/debug "$target"/release; do
    [ -d "$profile" ] || continue
    rm -rf "$profile/incremental"
    # Workspace crates and their test and bench binaries: file names are the
    # target names with '-' as '_' plus a hash.
    find "$profile/deps" "$profile/build" "$profile/.fingerprint" -maxdepth 1 \
      \( -name 'hearth*' -o -name 'libhearth*' -o -name '*.rcgu.o' \) \
      -exec rm -rf {} + 2>/dev/null || true
  done
  # Test binaries of the workspace carry their test file's name; the
  # workspace's own tests/ directories name them.
  for t in crates/*/tests/*.rs src-tauri/tests/*.rs crates/*/benches/*.rs; do
    [ -f "$t" ] || continue
    name="$(basename "$t" .rs)"
    for profile in "$target"/debug "$target"/release; do
      [ -d "$profile/deps" ] || continue
      find "$profile/deps" -maxdepth 1 -name "${name}-*" -exec rm -rf {} + 2>/dev/null || true
    done
  done
  if [ "$(free_gb "$target")" -lt "$need_gb" ]; then
    echo "under ${need_gb} GB free: dropping the whole reused target ($target)"
    rm -rf "$target"
  fi
fi
echo "disk at the build's start: $(free_gb "$target") GB free"
