#!/usr/bin/env bash
# A CUDA compiler without a GPU: NVIDIA's CUDA 13.0 toolkit wheels from PyPI
# (nvcc, NVVM, its headers, the runtime's headers and CCCL), about 300 MB,
# installed once per machine into a venv under $HEARTH_CUDA_DIR (default
# ~/.cache/hearth/cuda). Prints the toolkit's root (its bin/nvcc).
#
# Pinned to CUDA 13.0 because PTX built by a newer toolkit does not load on
# an older driver: the lent H200 has driver 580, which is CUDA 13.0. cudarc
# takes its CUDA version from this nvcc. CUDA 12's nvcc wheel has no driver
# program, so 13 is the oldest that works this way. x86-64 Linux only.
#
# `--link` also installs what linking a CUDA build needs (bench/device.sh):
# cuBLAS, cuRAND and NVRTC from the same CUDA 13.0.2 set (about 550 MB more),
# plain-name links to them, and a link stub for the driver's libcuda (made
# from the functions cudarc declares), which the GPU machine's driver
# replaces at run time.
set -euo pipefail
dir="${HEARTH_CUDA_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/hearth/cuda}"
PINS=(nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85)
if [ "${1:-}" = --link ]; then
  PINS+=(nvidia-cublas==13.1.0.3 nvidia-curand==10.4.0.35 nvidia-cuda-nvrtc==13.0.88)
fi
if [ "$(uname -s)-$(uname -m)" != Linux-x86_64 ]; then
  echo "PyPI's CUDA toolkit wheels are for x86-64 Linux; this is $(uname -s)-$(uname -m)" >&2
  exit 3
fi
stamp="$dir/pins"
# The stamp lists the pins installed, one a line: install when one is missing.
missing=0
for pin in "${PINS[@]}"; do grep -qxF "$pin" "$stamp" 2>/dev/null || missing=1; done
if [ $missing = 1 ]; then
  mkdir -p "$dir"
  [ -x "$dir/venv/bin/pip" ] || python3 -m venv "$dir/venv"
  "$dir/venv/bin/pip" install -q --disable-pip-version-check "${PINS[@]}" >&2
  printf '%s\n' "${PINS[@]}" > "$stamp"
fi
root=$(ls -d "$dir"/venv/lib/python3*/site-packages/nvidia/cu13 | head -1)
case "$("$root/bin/nvcc" --version)" in
  *"release 13.0"*) ;;
  *) echo "$root/bin/nvcc is not CUDA 13.0" >&2; exit 1 ;;
esac
if [ "${1:-}" = --link ]; then
  # The linker looks for plain names; the wheels hold versioned ones.
  for lib in cudart cublas cublasLt curand nvrtc; do
    so=$(cd "$root/lib" && ls "lib$lib.so."* | sort | head -1)
    ln -sf "$so" "$root/lib/lib$lib.so"
  done
  # The stub holds every driver function the locked cudarc declares.
  repo="$(cd "$(dirname "$0")/.." && pwd)"
  cudarc=$(grep -A1 '^name = "cudarc"$' "$repo/Cargo.lock" | sed -n 's/^version = "\(.*\)"$/\1/p')
  if [ "$(cat "$root/lib/stubs/cudarc-version" 2>/dev/null)" != "$cudarc" ]; then
    (cd "$repo" && cargo fetch --locked -q)
    sys=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/"cudarc-$cudarc"/src/driver/sys/mod.rs | head -1)
    mkdir -p "$root/lib/stubs"
    grep -oE '^ +fn cu[A-Za-z0-9_]+\(' "$sys" | sed -E 's/^ +fn (cu[A-Za-z0-9_]+)\(/int \1(void) { return 999; }/' | sort -u > "$dir/libcuda-stub.c"
    cc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$root/lib/stubs/libcuda.so" "$dir/libcuda-stub.c"
    echo "$cudarc" > "$root/lib/stubs/cudarc-version"
  fi
  # So that the build starts here too (for work that needs no GPU).
  ln -sf libcuda.so "$root/lib/stubs/libcuda.so.1"
fi
echo "$root"
