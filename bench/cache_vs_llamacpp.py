"""The next turn of a long conversation: Hearth's saved caches vs llama.cpp's
state save/restore, on the same GGUF, prompt ids and thread count, in one run.

    ~/.cache/hearth/llama-venv/bin/python bench/cache_vs_llamacpp.py --threads 2 --history-tokens 2000

cold: the whole prompt is prefilled. warm: the history is in the cache in
memory; only the new turn runs. restored: the cache is read back from disk
first (Hearth: a fresh process reading its session file; llama.cpp: a second
context loading a state file written by save_state).
"""
import argparse
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
import llamacpp_ref  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ap = argparse.ArgumentParser()
ap.add_argument("--model", default=os.path.expanduser("~/.cache/hearth/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--history-tokens", type=int, default=2000)
ap.add_argument("--cli", default=os.environ.get("HEARTH_CLI", os.path.join(ROOT, "target/release/hearth-cli")))
args = ap.parse_args()

h = json.loads(subprocess.check_output([
    args.cli, "bench-cache", "--model", args.model, "--threads", str(args.threads),
    "--history-tokens", str(args.history_tokens), "--json"]))
history, prompt = h["history_token_ids"], h["prompt_token_ids"]
assert prompt[: len(history)] == history, "the next turn's prompt extends the history"
new = prompt[len(history):]
n_ctx = len(prompt) + 64


def timed(f):
    t = time.perf_counter()
    f()
    return (time.perf_counter() - t) * 1e3


llm = llamacpp_ref.load(args.model, args.threads, n_ctx=n_ctx)
cold = min(timed(lambda: (llm.reset(), llm.eval(prompt))) for _ in range(1))
warm = float("inf")
for _ in range(3):
    llm.reset()
    llm.eval(history)
    warm = min(warm, timed(lambda: llm.eval(new)))
llm.reset()
llm.eval(history)
path = os.path.join(tempfile.mkdtemp(), "state.pkl")
save = float("inf")
for _ in range(3):
    def write():
        with open(path, "wb") as f:
            pickle.dump(llm.save_state(), f)
            f.flush()
            os.fsync(f.fileno())
    save = min(save, timed(write))
size = os.path.getsize(path)
fresh = llamacpp_ref.load(args.model, args.threads, n_ctx=n_ctx)
restored = float("inf")
for _ in range(3):
    def restore():
        with open(path, "rb") as f:
            fresh.load_state(pickle.load(f))
        fresh.eval(new)
    restored = min(restored, timed(restore))

rows = [
    ("cold ttft (ms)", h["cold_ttft_ms"], cold, True),
    ("warm ttft (ms)", h["warm_ttft_ms"], warm, True),
    ("restored ttft (ms)", h["restored_ttft_ms"], restored, True),
    ("save (ms)", h["save_ms"], save, True),
    ("bytes per 1k tokens", h["bytes_per_1k_tokens"], size * 1000 / len(history), True),
]
print(f"history {len(history)} tokens, next turn {len(new)} tokens, {args.threads} threads")
print(f"{'':22} {'hearth':>14} {'llama.cpp':>14} {'speed ratio':>12}")
for name, a, b, lower_better in rows:
    print(f"{name:22} {a:14.1f} {b:14.1f} {b / a:11.2f}x")
print(f"hearth: the next message edited re-read {h['edit_processed_tokens']} of {h['edit_prompt_tokens']} tokens in {h['edit_ttft_ms']:.1f} ms;"
      f" {h['checkpoints']} checkpoints of {h['state_bytes_per_checkpoint'] / 1e6:.1f} MB of recurrent state")
print(f"hearth: warm {h['warm_speedup']:.1f}x and restored {h['restored_speedup']:.1f}x faster than cold; restored/warm {h['restored_over_warm']:.2f}")
print(f"llama.cpp: warm {cold / warm:.1f}x and restored {cold / restored:.1f}x faster than cold; restored/warm {restored / warm:.2f}")
