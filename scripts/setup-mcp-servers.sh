#!/usr/bin/env bash
# Real MCP servers from the package registries, for the MCP tests and the
# e2e: `mcp-server-time` (PyPI) in a venv and `@modelcontextprotocol/server-everything`
# (npm), pinned, installed once per machine under $HEARTH_MCP_DIR
# (default ~/.cache/hearth/mcp). Prints that folder.
set -euo pipefail
dir="${HEARTH_MCP_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/hearth/mcp}"
TIME_VERSION=2026.10.19
EVERYTHING_VERSION=2026.8.31
mkdir -p "$dir"
if [ ! -x "$dir/venv/bin/mcp-server-time" ] || ! "$dir/venv/bin/pip" show mcp-server-time 2>/dev/null | grep -qx "Version: $TIME_VERSION"; then
  python3 -m venv "$dir/venv"
  "$dir/venv/bin/pip" install -q --disable-pip-version-check "mcp-server-time==$TIME_VERSION" >&2
fi
everything="$dir/npm/node_modules/@modelcontextprotocol/server-everything"
if ! grep -q "\"version\": \"$EVERYTHING_VERSION\"" "$everything/package.json" 2>/dev/null; then
  mkdir -p "$dir/npm"
  # A cache of its own: on a fresh machine the agents' install (scripts/setup-agents.sh)
  # fills the shared one at the same time, and npm failed here then. Errors are shown,
  # and a failed install is tried once more.
  install() { (cd "$dir/npm" && npm install --loglevel=error --no-audit --no-fund --cache "$dir/npm-cache" --prefix . \
    "@modelcontextprotocol/server-everything@$EVERYTHING_VERSION" >&2); }
  install || { echo "npm install failed; trying again" >&2; sleep 5; install; }
fi
echo "$dir"
