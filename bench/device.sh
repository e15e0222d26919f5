#!/usr/bin/env bash
# The GPU check, prepared here and run there in one call (issue 34).
#
#   bench/device.sh build       # here: the CUDA build and what it needs there, under target/device/
#   bench/device.sh check ...   # there: writes the models, runs `hearth-cli device-check`
#   bench/device.sh rehearse    # here: `check` against the CPU build's graph pass, at small sizes
#
# The GPU machine has no Rust, no network and room for 64 MiB of carried
# files (the working tree is about 5 MB of it). So `build` makes a release
# hearth-cli with CUDA here (nvcc and the link libraries from PyPI's CUDA
# 13.0 wheels, scripts/setup-cuda.sh --link; a link stub stands in for the
# driver's libcuda), stripped and xz-compressed (66 MB of it, mostly
# candle's kernels, comes to 10 MB; `check` unpacks it with Python's lzma),
# and the vocabularies of the default model and Gemma 3 as tokenizer-only
# files (1.8 and 6.5 MB). The CUDA libraries
# themselves (cuBLAS alone is 540 MB) are not carried: the GPU image's
# PyTorch has the same CUDA 13.0 set, and `check` puts it on the library path.
#
# `check` prints one JSON line per figure (see crates/cli/src/device_check.rs):
# bandwidth, greedy against the CPU, speed against the bandwidth bound,
# Generate 4 against one, two conversations against one, a stopped prefill.
# The models are random-weight files written there: the default model's and
# Gemma 3 270M's shapes and vocabularies, Qwen 3.5-shaped hybrids (dense
# and with experts), gpt-oss (MXFP4 experts), DeepSeek V2 (latent
# attention), LFM2 and Phi-3 shapes, for greedy; a 1.1B Q4_K file for speed. The real
# default and Gemma 3 files (100 and 250 MB) are compared too where they are
# found (HEARTH_MODEL_DIR), which on the GPU machine they are not.
#
# With the device tool: carry target/device, run `bash bench/device.sh check`.
set -euo pipefail
cd "$(dirname "$0")/.."
PAYLOAD=${HEARTH_DEVICE_PAYLOAD:-target/device}
# Where scripts/fetch-model.sh and fetch-gemma.sh keep the real files.
MODELS=${HEARTH_MODEL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/hearth/models}
LIMIT=$((64 * 1024 * 1024))

vocabularies() { # CLI: the tokenizers alone, from the real files here
  "$1" write-vocab --from "$MODELS/SmolLM2-135M-Instruct.Q4_1.gguf" --out "$PAYLOAD/smollm2.vocab.gguf"
  "$1" write-vocab --from "$MODELS/gemma-3-270m-q4_k_m.gguf" --out "$PAYLOAD/gemma3.vocab.gguf"
}

case "${1:-}" in
  build)
    scripts/fetch-model.sh >/dev/null
    scripts/fetch-gemma.sh >/dev/null
    cuda=$(scripts/setup-cuda.sh --link)
    # No GPU here to ask: PTX for the H200's compute capability, 9.0.
    CUDA_COMPUTE_CAP=90 PATH="$cuda/bin:$PATH" CUDA_HOME="$cuda" CUDA_PATH="$cuda" \
      CARGO_PROFILE_RELEASE_DEBUG=false CARGO_PROFILE_RELEASE_STRIP=true \
      cargo build --release -p hearth-cli --features cuda --target-dir target/cuda-release
    built=target/cuda-release/release/hearth-cli
    rm -rf "$PAYLOAD" && mkdir -p "$PAYLOAD"
    # Writing a vocabulary needs no GPU: the CUDA build does it here, on the
    # libcuda stub (which it never calls), as a first test that it starts.
    LD_LIBRARY_PATH="$cuda/lib:$cuda/lib/stubs" vocabularies "$built"
    xz -T2 -6 -c "$built" > "$PAYLOAD/hearth-cli.xz"
    echo "libraries the build asks for at start:" >&2
    readelf -d "$built" | grep NEEDED >&2
    size=$(du -sb "$PAYLOAD" | cut -f1)
    tree=$(git ls-files -z | xargs -0 stat -c %s 2>/dev/null | awk '{ n += $1 } END { print n + 0 }')
    echo "payload: $((size / 1024 / 1024)) MiB in $PAYLOAD, the working tree $((tree / 1024 / 1024)) MiB, of 64 MiB" >&2
    [ $((size + tree)) -le $LIMIT ] || { echo "the payload does not fit in 64 MiB" >&2; exit 1; }
    ;;
  check)
    shift
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    CLI=${HEARTH_CLI:-$work/hearth-cli}
    if [ -z "${HEARTH_CLI:-}" ]; then
      python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
        "$PAYLOAD/hearth-cli.xz" "$CLI"
      chmod +x "$CLI"
    fi
    # The GPU image's CUDA 13.0 libraries (PyTorch's wheels) and the driver's.
    for dir in /opt/torch/.venv/lib/python3*/site-packages/nvidia/cu13/lib /usr/local/nvidia/lib64 /usr/local/cuda/lib64; do
      [ -d "$dir" ] && LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$dir"
    done
    export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}"
    # The default model's shape (SmolLM2-135M) for greedy; the speed file
    # the CLI's default shape (a 1.1B llama, Q4_K), or a small one.
    "$CLI" write-random-model --out "$work/smollm2-shape.gguf" --tokenizer-from "$PAYLOAD/smollm2.vocab.gguf" \
      --layers 30 --embd 576 --ffn 1536 --heads 9 --kv-heads 3 --dtype q4_1
    if [ -n "${HEARTH_DEVICE_SMALL:-}" ]; then
      "$CLI" write-random-model --out "$work/speed.gguf" --tokenizer-from "$PAYLOAD/smollm2.vocab.gguf" \
        --layers 4 --embd 512 --ffn 1024 --heads 8 --kv-heads 2 --dtype q4_k
    else
      "$CLI" write-random-model --out "$work/speed.gguf" --tokenizer-from "$PAYLOAD/smollm2.vocab.gguf"
    fi
    "$CLI" write-random-model --family gemma3 --out "$work/gemma3-shape.gguf" --tokenizer-from "$PAYLOAD/gemma3.vocab.gguf" \
      --layers 18 --embd 640 --ffn 2048 --heads 4 --kv-heads 1 --head-dim 256 --dtype q8_0
    # Qwen 3.5's hybrid (Gated DeltaNet layers, every fourth gated
    # attention with partial RoPE), dense and with experts beside a shared
    # one: the recurrence is the graph's host fallback.
    if [ -n "${HEARTH_DEVICE_SMALL:-}" ]; then
      hybrid=(--layers 4 --embd 256 --ffn 512 --heads 4 --kv-heads 2 --head-dim 64 --rope-dims 16
        --ssm-state 32 --ssm-k-heads 4 --ssm-v-heads 8)
    else
      hybrid=(--layers 8 --embd 1024 --ffn 3072 --heads 8 --kv-heads 2 --head-dim 256 --rope-dims 64
        --ssm-state 128 --ssm-k-heads 16 --ssm-v-heads 16)
    fi
    "$CLI" write-random-model --hybrid "${hybrid[@]}" --out "$work/qwen35-shape.gguf" \
      --tokenizer-from "$PAYLOAD/smollm2.vocab.gguf" --dtype q8_0
    "$CLI" write-random-model --hybrid "${hybrid[@]}" --experts 32 --experts-used 4 --expert-ffn 256 \
      --out "$work/qwen35moe-shape.gguf" --tokenizer-from "$PAYLOAD/smollm2.vocab.gguf" --dtype q8_0
    # gpt-oss: sinks, a window on every other layer, biased experts in
    # MXFP4 (which reach candle's kernels as Q8_0 holding the same values).
    if [ -n "${HEARTH_DEVICE_SMALL:-}" ]; then
      oss=(--layers 2 --embd 128 --ffn 128 --heads 4 --kv-heads 2 --head-dim 64 --experts 8 --experts-used 4 --expert-ffn 64)
    else
      oss=(--layers 6 --embd 1024 --ffn 1024 --heads 16 --kv-heads 4 --head-dim 64 --experts 32 --experts-used 4
        --expert-ffn 512)
    fi
    "$CLI" write-random-model --gpt-oss "${oss[@]}" --experts-dtype mxfp4 --dtype q8_0 \
      --out "$work/gpt-oss-shape.gguf" --tokenizer-from "$PAYLOAD/smollm2.vocab.gguf"
    # DeepSeek V2's latent attention (its cache keeps no values), LFM2's
    # short convolution (a host fallback) and Phi-3's fused tensors.
    small=(--layers 4 --embd 512 --ffn 1024 --heads 8 --kv-heads 2 --dtype q8_0
      --tokenizer-from "$PAYLOAD/smollm2.vocab.gguf")
    "$CLI" write-random-model --family deepseek2 "${small[@]}" --experts 16 --experts-used 4 --expert-ffn 256 \
      --out "$work/deepseek2-shape.gguf"
    "$CLI" write-random-model --family lfm2 "${small[@]}" --out "$work/lfm2-shape.gguf"
    "$CLI" write-random-model --family phi3 "${small[@]}" --out "$work/phi3-shape.gguf"
    greedy=(--greedy-model "$work/smollm2-shape.gguf" --greedy-model "$work/gemma3-shape.gguf"
      --greedy-model "$work/qwen35-shape.gguf" --greedy-model "$work/qwen35moe-shape.gguf"
      --greedy-model "$work/gpt-oss-shape.gguf" --greedy-model "$work/deepseek2-shape.gguf"
      --greedy-model "$work/lfm2-shape.gguf" --greedy-model "$work/phi3-shape.gguf")
    for real in "$MODELS/SmolLM2-135M-Instruct.Q4_1.gguf" "$MODELS/gemma-3-270m-q4_k_m.gguf"; do
      [ -f "$real" ] && greedy+=(--greedy-model "$real")
    done
    "$CLI" device-check --device "${HEARTH_DEVICE:-cuda}" "${greedy[@]}" --speed-model "$work/speed.gguf" "$@"
    ;;
  rehearse)
    # Everything `check` does, against the GPU's pass on this CPU.
    cargo build --release -p hearth-cli
    mkdir -p "$PAYLOAD"
    [ -f "$PAYLOAD/gemma3.vocab.gguf" ] || vocabularies target/release/hearth-cli
    HEARTH_CLI=target/release/hearth-cli HEARTH_DEVICE=cpu HEARTH_DEVICE_SMALL=1 CANDLE_NUM_THREADS=1 \
      bash bench/device.sh check --graph --threads 2 --greedy-tokens 16 --prompt-tokens 64 --gen-tokens 8 --repeats 1 \
      --stop-prompt-tokens 200 --stop-chunk 64 --bandwidth-mib 64
    ;;
  *)
    echo "usage: bench/device.sh build | check [device-check flags] | rehearse" >&2
    exit 2
    ;;
esac
