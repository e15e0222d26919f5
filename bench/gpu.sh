#!/usr/bin/env bash
# Hearth on a CUDA GPU: decode and prefill tokens/s, and how close decode comes
# to the bandwidth bound (bytes of weights read per token ÷ the device's
# measured read bandwidth).
#
#   bench/gpu.sh [model.gguf]
#
# Needs nvcc (for the bandwidth probe) and either cargo (it builds hearth-cli
# with `--features cuda`) or HEARTH_CLI pointing at such a build. Prints one
# Markdown table row per figure, for BENCHMARKS.md.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-$HOME/.cache/hearth/models/SmolLM2-135M-Instruct.Q4_1.gguf}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

nvidia-smi --query-gpu=name,memory.total,clocks.max.memory --format=csv,noheader || true

# 1. Read bandwidth, measured: every thread streams float4s and keeps a sum.
cat > "$WORK/bandwidth.cu" <<'CU'
#include <cstdio>
#include <cuda_runtime.h>
__global__ void readAll(const float4 *p, size_t n, float *out) {
    float s = 0.f;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float4 v = p[i]; s += v.x + v.y + v.z + v.w;
    }
    if (s == 1234.5f) out[0] = s;  // keeps the loads alive
}
int main() {
    const size_t bytes = 4ull << 30, n = bytes / sizeof(float4);
    float4 *p; float *out;
    if (cudaMalloc(&p, bytes) != cudaSuccess || cudaMalloc(&out, 4) != cudaSuccess) { fprintf(stderr, "cudaMalloc failed\n"); return 1; }
    cudaMemset(p, 0, bytes);
    int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
    readAll<<<sms * 8, 512>>>(p, n, out);
    float best = 1e30f;
    for (int r = 0; r < 10; r++) {
        cudaEventRecord(a); readAll<<<sms * 8, 512>>>(p, n, out); cudaEventRecord(b); cudaEventSynchronize(b);
        float ms; cudaEventElapsedTime(&ms, a, b); if (ms < best) best = ms;
    }
    printf("%.1f\n", bytes / (best / 1e3) / 1e9);
    return 0;
}
CU
nvcc -O3 -o "$WORK/bandwidth" "$WORK/bandwidth.cu"
BANDWIDTH_GBS=$("$WORK/bandwidth")
echo "measured read bandwidth: ${BANDWIDTH_GBS} GB/s"

# 2. Hearth with CUDA.
if [ -z "${HEARTH_CLI:-}" ]; then
    command -v cargo >/dev/null || { echo "no cargo here: build hearth-cli with --features cuda elsewhere and set HEARTH_CLI" >&2; exit 1; }
    cargo build --release -p hearth-cli --features cuda
    HEARTH_CLI=target/release/hearth-cli
fi
"$HEARTH_CLI" bench --device cuda --model "$MODEL" --prompt-tokens 512 --gen-tokens 128 --repeats 3 --json > "$WORK/hearth.json"

python3 - "$WORK/hearth.json" "$BANDWIDTH_GBS" "$MODEL" <<'PY'
import json, os, sys
h = json.load(open(sys.argv[1])); bw = float(sys.argv[2]) * 1e9
assert h["device"] == "cuda", f"ran on {h['device']}, not cuda"
per_token = h["weight_bytes_per_token"]
bound = bw / per_token
print(f"model {os.path.basename(sys.argv[3])}, {per_token / 1e6:.1f} MB of weights per token, bandwidth {bw / 1e9:.0f} GB/s")
print("| prefill tok/s (512) | decode tok/s | bandwidth bound tok/s | share of bound | peak host RSS |")
print("|---|---|---|---|---|")
rss = h.get("peak_rss_bytes") or 0
print(f"| {h['prefill_tokens_per_s']:.0f} | {h['decode_tokens_per_s']:.0f} | {bound:.0f} | {h['decode_tokens_per_s'] / bound:.1%} | {rss / 2**20:.0f} MiB |")
PY
