#!/usr/bin/env bash
# Installs llama-cpp-python (the reference engine) into a venv, once per machine.
# It builds llama.cpp from source (10-20 minutes on 2 cores). AMX is off and the
# ISA is pinned to AVX2 because the native build segfaults here (shared/NOTES.md).
set -euo pipefail
venv="${LLAMACPP_VENV:-$HOME/.cache/hearth/llama-venv}"
# The server's packages (the `[server]` extra) for bench/api_vs_llamacpp.py and the remote-endpoint tests.
server_packages=(fastapi uvicorn sse-starlette pydantic-settings starlette-context)
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import llama_cpp" 2>/dev/null; then
  "$venv/bin/python" -c "import llama_cpp.server.app" 2>/dev/null || "$venv/bin/pip" install --quiet "${server_packages[@]}" >&2
  echo "$venv"
  exit 0
fi
python3 -m venv "$venv"
CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF" \
  "$venv/bin/pip" install --quiet llama-cpp-python==0.3.36 numpy jinja2 "${server_packages[@]}" >&2
echo "$venv"
