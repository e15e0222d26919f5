"""Constrained decoding against llama.cpp's: the same model, prompt and
threads, a reply under "any JSON object" (llama.cpp: its JSON grammar,
`LlamaGrammar.from_json_schema('{"type": "object"}')`; Hearth: llguidance,
`hearth-cli bench-grammar`), each against its own unconstrained reply.

    ~/.cache/hearth/llama-native-venv/bin/python bench/grammar_vs_llamacpp.py [--model M] [--threads 2] [--gen-tokens 128]

Greedy, so both engines write until the token limit or the object ends;
the figures are milliseconds per generated token, best of --repeats.
"""
import argparse
import json
import os
import subprocess
import time

import llama_cpp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ap = argparse.ArgumentParser()
ap.add_argument("--model", default=os.path.expanduser("~/.cache/hearth/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--gen-tokens", type=int, default=128)
ap.add_argument("--repeats", type=int, default=3)
ap.add_argument("--cli", default=os.path.join(ROOT, "target/release/hearth-cli"))
args = ap.parse_args()

hearth = json.loads(subprocess.check_output([
    args.cli, "bench-grammar", "--model", args.model, "--threads", str(args.threads),
    "--gen-tokens", str(args.gen_tokens), "--repeats", str(args.repeats),
]))

llm = llama_cpp.Llama(model_path=args.model, n_ctx=1024, n_threads=args.threads, n_threads_batch=args.threads, verbose=False)
grammar = llama_cpp.LlamaGrammar.from_json_schema(json.dumps({"type": "object"}), verbose=False)
messages = [{"role": "user", "content": "Describe a city as a JSON object."}]


def run(constrained):
    best, n = float("inf"), 0
    for _ in range(args.repeats):
        t = time.perf_counter()
        out = llm.create_chat_completion(messages=messages, temperature=0, max_tokens=args.gen_tokens,
                                         grammar=grammar if constrained else None)
        elapsed = time.perf_counter() - t
        n = out["usage"]["completion_tokens"]
        # Prefill is the same both ways (the prompt is cached after the first run); per generated token.
        best = min(best, elapsed / max(n, 1))
    return n, best * 1e3


lf, lb = run(False), run(True)
h_free, h_bound = hearth["unconstrained"]["ms_per_token"], hearth["constrained"]["ms_per_token"]
print(f"model {os.path.basename(args.model)}, {args.threads} threads, greedy, up to {args.gen_tokens} tokens")
print("| engine | unconstrained ms/token | JSON object ms/token | grammar's cost |")
print("|---|---|---|---|")
print(f"| Hearth (llguidance) | {h_free:.2f} | {h_bound:.2f} | {100 * (h_bound / h_free - 1):+.1f}% |")
print(f"| llama.cpp (GBNF) | {lf[1]:.2f} | {lb[1]:.2f} | {100 * (lb[1] / lf[1] - 1):+.1f}% |")
print(f"Hearth's mask alone: {hearth['mask_alone_ms_per_token'] * 1e3:.1f} µs/token; first compile (the token trie) {hearth['grammar_compile_first_s'] * 1e3:.0f} ms, then {hearth['grammar_compile_s'] * 1e3:.2f} ms per grammar")
print(f"llama.cpp wrote {lb[0]} tokens constrained, {lf[0]} free; Hearth {hearth['constrained']['tokens']} and {hearth['unconstrained']['tokens']}")
