#!/usr/bin/env bash
# Runs a command as on a desktop: under Xvfb when there is no display, and
# in a D-Bus session (the single-instance check meets other launches there).
set -euo pipefail
if [ -z "${DISPLAY:-}" ]; then
  display=":$(( 90 + RANDOM % 9 ))"
  Xvfb "$display" -screen 0 1280x800x24 -nolisten tcp >/dev/null 2>&1 &
  xvfb=$!
  trap 'kill $xvfb 2>/dev/null || true' EXIT
  export DISPLAY="$display"
  sleep 1
fi
session=()
if [ -z "${DBUS_SESSION_BUS_ADDRESS:-}" ] && command -v dbus-run-session >/dev/null; then
  session=(dbus-run-session --)
fi
"${session[@]}" "$@"
