"""Hearth's logits against llama.cpp's on the same token ids, per file.

    ~/.cache/hearth/llama-venv/bin/python bench/agree.py [MODEL.gguf ...] [--positions 512]

For each file: tokenizes a fixed English text (this repository's
ARCHITECTURE.md) with llama.cpp, feeds the first N ids to both engines
teacher-forced in one prefill (both with f16 KV caches, llama.cpp's default
and Hearth's), and prints the mean KL divergence KL(llama.cpp || Hearth), top-1
agreement, and the largest difference in the log-probability of the actual
next token. Defaults to the default model, its quantized copies
(bench/quantize_copies.py) and the Gemma 3 file.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import llamacpp_ref  # noqa: E402
import llama_cpp  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE = os.path.expanduser("~/.cache/hearth/models")
ap = argparse.ArgumentParser()
ap.add_argument("models", nargs="*")
ap.add_argument("--positions", type=int, default=512)
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--cli", default=os.environ.get("HEARTH_CLI", os.path.join(ROOT, "target/release/hearth-cli")))
args = ap.parse_args()
models = args.models or (
    [os.path.join(CACHE, "SmolLM2-135M-Instruct.Q4_1.gguf")]
    + sorted(glob.glob(os.path.join(CACHE, "quants", "*.gguf")))
    + [os.path.join(CACHE, "gemma-3-270m-q4_k_m.gguf")]
)
text = open(os.path.join(ROOT, "ARCHITECTURE.md"), encoding="utf-8").read()


def log_softmax(x):
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


print(f"llama.cpp: {llama_cpp.llama_cpp.llama_print_system_info().decode().strip()}")
print(f"{args.positions} positions teacher-forced, {args.threads} threads, f16 KV caches")
print("| file | mean KL | top-1 agreement | largest next-token log-prob difference |")
print("|---|---|---|---|")
for model in models:
    llm = llamacpp_ref.load(model, args.threads, n_ctx=args.positions + 16, logits_all=True)
    ids = llm.tokenize(text.encode(), add_bos=True, special=False)[: args.positions]
    llm.reset()
    llm.eval(ids)
    base = log_softmax(np.array(llm.scores[: len(ids)]))
    del llm
    with tempfile.TemporaryDirectory() as tmp:
        idf, out = os.path.join(tmp, "ids.json"), os.path.join(tmp, "h.npy")
        json.dump(ids, open(idf, "w"))
        subprocess.check_call([args.cli, "score", "--model", model, "--threads", str(args.threads), "--ids-file", idf, "--out", out])
        hearth = np.load(out).astype(np.float64)
    p = np.exp(base)
    kl = (p * (base - hearth)).sum(axis=-1)
    top1 = (base.argmax(axis=-1) == hearth.argmax(axis=-1)).mean()
    nxt = np.array(ids[1:])
    diff = np.abs(base[np.arange(len(ids) - 1), nxt] - hearth[np.arange(len(ids) - 1), nxt]).max()
    print(f"| {os.path.basename(model)} | {kl.mean():.2e} | {100 * top1:.1f}% | {diff:.3f} |", flush=True)
