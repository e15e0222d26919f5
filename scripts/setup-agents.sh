#!/usr/bin/env bash
# The coding agents Hearth's API is tested with, pinned, from npm: Codex
# (`@openai/codex`, the Responses API), Claude Code
# (`@anthropic-ai/claude-code`, the Messages API), opencode (`opencode-ai`)
# and Qwen Code (`@qwen-code/qwen-code`), both chat completions. Installed once per
# machine under $HEARTH_AGENTS_DIR (default ~/.cache/hearth/agents); the
# agents' tests (crates/server/tests/agents.rs) run them from there.
set -euo pipefail
dir="${HEARTH_AGENTS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/hearth/agents}"
CODEX=0.171.0
CLAUDE_CODE=2.1.332
OPENCODE=1.18.33
QWEN_CODE=0.24.4
installed() { # PACKAGE VERSION
  node -e "process.exit(require('$dir/node_modules/$1/package.json').version === '$2' ? 0 : 1)" 2>/dev/null
}
if ! installed @openai/codex $CODEX || ! installed @anthropic-ai/claude-code $CLAUDE_CODE \
  || ! installed opencode-ai $OPENCODE || ! installed @qwen-code/qwen-code $QWEN_CODE; then
  mkdir -p "$dir"
  [ -f "$dir/package.json" ] || echo '{"name": "hearth-agents", "private": true}' >"$dir/package.json"
  # A cache of its own, apart from the MCP servers' install running beside it.
  install() { (cd "$dir" && npm install --loglevel=error --no-audit --no-fund --cache "$dir/npm-cache" --save-exact \
    "@openai/codex@$CODEX" "@anthropic-ai/claude-code@$CLAUDE_CODE" "opencode-ai@$OPENCODE" "@qwen-code/qwen-code@$QWEN_CODE" >&2); }
  install || { echo "npm install failed; trying again" >&2; sleep 5; install; }
fi
# Claude Code's installer replaces its stub with the native binary; a stub left means it failed.
"$dir/node_modules/.bin/claude" --version >/dev/null
for agent in codex opencode qwen; do "$dir/node_modules/.bin/$agent" --version >/dev/null; done
echo "$dir"
