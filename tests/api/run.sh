#!/usr/bin/env bash
# Runs the `openai` and `anthropic` clients' tests against `hearth-cli serve` on the default
# model. Needs the CLI built (`cargo test --workspace --no-run` builds it) and the model fetched.
set -euo pipefail
cd "$(dirname "$0")/../.."
TARGET="${CARGO_TARGET_DIR:-$PWD/target}"
VENV="$HOME/.cache/hearth/api-venv"
OPENAI_VERSION=3.51.0
ANTHROPIC_VERSION=2.17.0
if ! "$VENV/bin/python" -c "import openai, anthropic, sys; sys.exit(openai.__version__ != '$OPENAI_VERSION' or anthropic.__version__ != '$ANTHROPIC_VERSION')" 2>/dev/null; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q "openai==$OPENAI_VERSION" "anthropic==$ANTHROPIC_VERSION"
fi
LOG=$(mktemp)
KEY="test-key-$RANDOM"
# Under a desktop's default descriptor limit, which idle connections must not exhaust.
(ulimit -n 1024 && exec "$TARGET/debug/hearth-cli" serve --port 0 --api-key "$KEY") >"$LOG" 2>&1 &
SERVER=$!
# The tests' status, not the stopped server's, is the script's.
trap 'status=$?; kill $SERVER 2>/dev/null || true; wait $SERVER 2>/dev/null || true; rm -f "$LOG"; exit $status' EXIT
for _ in $(seq 600); do
  grep -q "^serving .* on http" "$LOG" && break
  kill -0 $SERVER 2>/dev/null || { cat "$LOG" >&2; exit 1; }
  sleep 0.1
done
URL=$(sed -n 's/^serving .* on \(http[^ ]*\)$/\1/p' "$LOG")
[ -n "$URL" ] || { echo "hearth-cli serve did not start" >&2; cat "$LOG" >&2; exit 1; }
export HEARTH_API_URL="$URL" HEARTH_API_KEY="$KEY"
"$VENV/bin/python" tests/api/test_openai_client.py
"$VENV/bin/python" tests/api/test_agent_apis.py
