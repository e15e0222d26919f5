#!/usr/bin/env bash
# Runs the end-to-end suite: the built app under Xvfb through tauri-driver.
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
export PATH="$HOME/.cargo/bin:$PATH"
if [ -z "${DISPLAY:-}" ]; then
  display=":$(( 90 + RANDOM % 9 ))"
  Xvfb "$display" -screen 0 1280x800x24 -nolisten tcp >/dev/null 2>&1 &
  xvfb=$!
  trap 'kill $xvfb 2>/dev/null || true' EXIT
  export DISPLAY="$display"
  sleep 1
fi
# A D-Bus session, as a desktop has, for the single-instance check.
session=()
if [ -z "${DBUS_SESSION_BUS_ADDRESS:-}" ] && command -v dbus-run-session >/dev/null; then
  session=(dbus-run-session --)
fi
# --test-force-exit: a stray handle (a driver that will not die) must not hang CI.
"${session[@]}" node --test --test-concurrency=1 --test-force-exit tests/e2e/
