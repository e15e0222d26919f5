#!/usr/bin/env bash
# The official Hugging Face client (`huggingface_hub`, PyPI, pinned) in a venv,
# once per machine, for the Hub tests' cross-check: it downloads the same
# files from the same local server into the same cache as Hearth.
# Installed under $HEARTH_HUB_CLIENT_DIR (default ~/.cache/hearth/hub-client);
# prints the venv's python.
set -euo pipefail
dir="${HEARTH_HUB_CLIENT_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/hearth/hub-client}"
VERSION=2.4.0
if ! "$dir/venv/bin/pip" show huggingface_hub 2>/dev/null | grep -qx "Version: $VERSION"; then
  python3 -m venv "$dir/venv"
  "$dir/venv/bin/pip" install -q --disable-pip-version-check "huggingface_hub==$VERSION" >&2
fi
echo "$dir/venv/bin/python"
