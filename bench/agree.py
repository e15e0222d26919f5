"""Hearth's logits against llama.cpp's on the same token ids, per file.

    ~/.cache/hearth/llama-venv/bin/python bench/agree.py [MODEL.gguf ...] [--positions 512]
    ~/.cache/hearth/llama-native-venv/bin/python bench/agree.py --other-build ~/.cache/hearth/llama-venv/bin/python

For each file: tokenizes a fixed English text (this repository's
ARCHITECTURE.md) with llama.cpp, feeds the first N ids to both engines
teacher-forced in one prefill (both with f16 KV caches, llama.cpp's default
and Hearth's), and prints the mean KL divergence KL(llama.cpp || Hearth), top-1
agreement, and the largest difference in the log-probability of the actual
next token. Defaults to the default model, its quantized copies
(bench/quantize_copies.py) and the Gemma 3 file.

With `--other-build PYTHON` (the python of a venv holding another build of
llama.cpp, e.g. the AVX2 one beside the native AVX-512 one), it also prints
that build's KL to the first on the same ids: the bar Hearth is held to.
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
ap.add_argument("--other-build", help="python of a venv with another llama.cpp build, compared on the same ids")
ap.add_argument("--dump", nargs=3, metavar=("MODEL", "IDS", "OUT"), help=argparse.SUPPRESS)
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


def llama_log_softmax(model, ids):
    llm = llamacpp_ref.load(model, args.threads, n_ctx=len(ids) + 16, logits_all=True)
    llm.reset()
    llm.eval(ids)
    out = log_softmax(np.array(llm.scores[: len(ids)]))
    del llm
    return out


def kl_row(base, other, ids):
    p = np.exp(base)
    kl = (p * (base - other)).sum(axis=-1)
    top1 = (base.argmax(axis=-1) == other.argmax(axis=-1)).mean()
    nxt = np.array(ids[1:])
    diff = np.abs(base[np.arange(len(ids) - 1), nxt] - other[np.arange(len(ids) - 1), nxt]).max()
    return f"{kl.mean():.2e} | {100 * top1:.1f}% | {diff:.3f}"


if args.dump:
    model, idf, out = args.dump
    np.save(out, llama_log_softmax(model, json.load(open(idf))))
    sys.exit(0)

print(f"llama.cpp: {llama_cpp.llama_cpp.llama_print_system_info().decode().strip()}")
print(f"{args.positions} positions teacher-forced, {args.threads} threads, f16 KV caches")
other = ""
if args.other_build:
    info = subprocess.check_output([args.other_build, "-c", "import llama_cpp; print(llama_cpp.llama_cpp.llama_print_system_info().decode().strip())"], text=True).strip()
    print(f"other build: {info}")
    other = " | other build: mean KL | top-1 | largest difference"
print(f"| file | hearth: mean KL | top-1 agreement | largest next-token log-prob difference{other} |")
print("|---|---|---|---|" + ("---|---|---|" if other else ""))
for model in models:
    llm = llamacpp_ref.load(model, args.threads, n_ctx=args.positions + 16)
    ids = llm.tokenize(text.encode(), add_bos=True, special=False)[: args.positions]
    del llm
    base = llama_log_softmax(model, ids)
    with tempfile.TemporaryDirectory() as tmp:
        idf, out, out2 = os.path.join(tmp, "ids.json"), os.path.join(tmp, "h.npy"), os.path.join(tmp, "o.npy")
        json.dump(ids, open(idf, "w"))
        subprocess.check_call([args.cli, "score", "--model", model, "--threads", str(args.threads), "--ids-file", idf, "--out", out])
        row = f"| {os.path.basename(model)} | {kl_row(base, np.load(out).astype(np.float64), ids)}"
        if args.other_build:
            subprocess.check_call([args.other_build, os.path.abspath(__file__), "--threads", str(args.threads), "--dump", model, idf, out2])
            row += f" | {kl_row(base, np.load(out2).astype(np.float64), ids)}"
    print(row + " |", flush=True)
