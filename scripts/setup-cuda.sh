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
set -euo pipefail
dir="${HEARTH_CUDA_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/hearth/cuda}"
PINS=(nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85)
if [ "$(uname -s)-$(uname -m)" != Linux-x86_64 ]; then
  echo "PyPI's CUDA toolkit wheels are for x86-64 Linux; this is $(uname -s)-$(uname -m)" >&2
  exit 3
fi
stamp="$dir/pins"
if [ "$(cat "$stamp" 2>/dev/null)" != "${PINS[*]}" ]; then
  rm -rf "$dir/venv"
  mkdir -p "$dir"
  python3 -m venv "$dir/venv"
  "$dir/venv/bin/pip" install -q --disable-pip-version-check "${PINS[@]}" >&2
  echo "${PINS[*]}" > "$stamp"
fi
root=$(echo "$dir"/venv/lib/python3*/site-packages/nvidia/cu13)
"$root/bin/nvcc" --version | grep -q "release 13.0" || { echo "$root/bin/nvcc is not CUDA 13.0" >&2; exit 1; }
echo "$root"
