#!/usr/bin/env bash
# Runs the end-to-end suite: the built app under Xvfb through tauri-driver.
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
export PATH="$HOME/.cargo/bin:$PATH"
# --test-force-exit: a stray handle (a driver that will not die) must not hang CI.
tests/e2e/headless.sh node --test --test-concurrency=1 --test-force-exit tests/e2e/
