#!/usr/bin/env bash
# Installs llama-cpp-python (the reference engine) into a venv, once per machine.
# It builds llama.cpp from source (10-20 minutes on 2 cores).
#
#   bench/setup-llamacpp.sh            # AVX2 build (AMX off): the tests' peer, and the reference on AVX2 CPUs
#   bench/setup-llamacpp.sh --native   # built for this CPU (AVX-512 where it has it; AMX off): the reference on AVX-512 CPUs
#
# AMX is off in both because the native AMX code segfaults here (shared/NOTES.md).
# Prints the venv's path.
set -euo pipefail
amx_off="-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
if [ "${1:-}" = "--native" ]; then
  venv="${LLAMACPP_NATIVE_VENV:-$HOME/.cache/hearth/llama-native-venv}"
  cmake_args="-DGGML_NATIVE=ON $amx_off"
else
  venv="${LLAMACPP_VENV:-$HOME/.cache/hearth/llama-venv}"
  cmake_args="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF $amx_off"
fi
# The server's packages (the `[server]` extra) for bench/api_vs_llamacpp.py and the remote-endpoint tests.
server_packages=(fastapi uvicorn sse-starlette pydantic-settings starlette-context)
# The gguf package reads the test files' tensors for references computed
# without llama.cpp (crates/engine/tests/reference/).
gguf_package=gguf==0.19.0
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import llama_cpp" 2>/dev/null; then
  "$venv/bin/python" -c "import llama_cpp.server.app" 2>/dev/null || "$venv/bin/pip" install --quiet "${server_packages[@]}" >&2
  "$venv/bin/python" -c "import gguf" 2>/dev/null || "$venv/bin/pip" install --quiet "$gguf_package" >&2
  echo "$venv"
  exit 0
fi
python3 -m venv "$venv"
# Every core: cmake's default for a Makefile build is one job at a time.
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"
# --no-cache-dir: pip would otherwise reuse a wheel built with the other flags.
CMAKE_ARGS="$cmake_args" "$venv/bin/pip" install --quiet --no-cache-dir llama-cpp-python==0.3.36 numpy jinja2 "$gguf_package" "${server_packages[@]}" >&2
echo "$venv"
