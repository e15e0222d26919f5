"""Records llama.cpp's first 32 greedy tokens for chat prompts, on the prompt ids
hearth produces, with llama.cpp's default f16 KV cache (as Hearth keeps its
own). Also checks hearth against them now.

    python bench/record_greedy.py [MODEL] [OUT.json]
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
import llamacpp_ref  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = sys.argv[1] if len(sys.argv) > 1 else os.path.expanduser("~/.cache/hearth/models/SmolLM2-135M-Instruct.Q4_1.gguf")
OUT = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "crates/engine/tests/data/greedy_smollm2.json")
CLI = os.environ.get("HEARTH_CLI", os.path.join(ROOT, "target/release/hearth-cli"))
PROMPTS = [
    "What is 2 + 2?",
    "What is the capital of France?",
    "Write a haiku about autumn.",
    "Explain what a CPU cache is in one sentence.",
    "List three colours.",
    "Translate 'good morning' into Spanish.",
    "Write a Python function that reverses a string.",
    "Who wrote Romeo and Juliet?",
]
N = 32

llm = llamacpp_ref.load(MODEL, threads=2)
rows, agree = [], 0
for p in PROMPTS:
    h = json.loads(subprocess.check_output([CLI, "generate", "--model", MODEL, "--prompt", p, "--temperature", "0", "--max-tokens", str(N), "--json", "--threads", "2"]))
    gaps = []
    ref = llamacpp_ref.greedy(llm, h["prompt_token_ids"], N, stop_ids=(2,), gaps=gaps)
    ok = ref == h["generated_token_ids"]
    agree += ok
    print(("agree " if ok else "DIFFER") + f" {p!r}: llama.cpp {ref[:12]}..., hearth {h['generated_token_ids'][:12]}...")
    rows.append({"prompt": p, "prompt_ids": h["prompt_token_ids"], "llama_cpp_greedy": ref, "llama_cpp_top2_gap": [round(g, 4) for g in gaps]})
with open(OUT, "w") as f:
    json.dump({"model": os.path.basename(MODEL), "kv_cache": "f16", "max_tokens": N, "cases": rows}, f, indent=1)
print(f"{agree}/{len(PROMPTS)} prompts agree; wrote {OUT}")
