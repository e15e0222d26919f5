"""Hearth against llama.cpp on the same GGUF, prompt ids and thread count, in one run.

    bench/setup-llamacpp.sh                      # once per machine
    ~/.cache/hearth/llama-venv/bin/python bench/vs_llamacpp.py [--threads 1 2] [--prompt-tokens 128] [--gen-tokens 64]
    ... bench/vs_llamacpp.py --threads 2 --busy 2    # under contention: two busy loops share the cores

Prints prefill and decode tokens/s for both and the ratio hearth / llama.cpp.
Engines alternate (--rounds) so that machine noise hits both alike; each
figure is the best over all rounds and repeats.
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
import llamacpp_ref  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ap = argparse.ArgumentParser()
ap.add_argument("--model", default=os.path.expanduser("~/.cache/hearth/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
ap.add_argument("--threads", type=int, nargs="+", default=[2, 1])
ap.add_argument("--prompt-tokens", type=int, default=128)
ap.add_argument("--gen-tokens", type=int, default=64)
ap.add_argument("--repeats", type=int, default=3)
ap.add_argument("--rounds", type=int, default=3, help="alternate the engines this many times; each figure is the best over all rounds")
ap.add_argument("--busy", type=int, default=0, help="busy-loop processes to run alongside (a desktop is never idle)")
ap.add_argument("--flash-attn", action="store_true", help="llama.cpp with flash attention on (its tiled attention, as long contexts are run)")
ap.add_argument("--cli", default=os.environ.get("HEARTH_CLI", os.path.join(ROOT, "target/release/hearth-cli")))
args = ap.parse_args()

busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
rows = []
try:
    for threads in args.threads:
        llm = llamacpp_ref.load(args.model, threads, n_ctx=args.prompt_tokens + args.gen_tokens + 16, flash_attn=args.flash_attn)
        hp = hd = lp = ld = 0.0
        for _ in range(args.rounds):
            h = json.loads(subprocess.check_output([
                args.cli, "bench", "--model", args.model, "--threads", str(threads), "--prompt-tokens", str(args.prompt_tokens),
                "--gen-tokens", str(args.gen_tokens), "--repeats", str(args.repeats), "--json"]))
            p, d = llamacpp_ref.bench(llm, h["prompt_token_ids"], args.gen_tokens, args.repeats)
            hp, hd = max(hp, h["prefill_tokens_per_s"]), max(hd, h["decode_tokens_per_s"])
            lp, ld = max(lp, p), max(ld, d)
        del llm
        rows.append((threads, hp, lp, hd, ld, h.get("peak_rss_bytes")))
finally:
    for p in busy:
        p.kill()

print(f"model {os.path.basename(args.model)}, prompt {args.prompt_tokens} tokens, {args.gen_tokens} generated, best of {args.repeats} x {args.rounds} alternating rounds, {args.busy} busy loops alongside, llama.cpp flash attention {'on' if args.flash_attn else 'off'}")
print("| threads | prefill hearth | prefill llama.cpp | ratio | decode hearth | decode llama.cpp | ratio | hearth peak RSS |")
print("|---|---|---|---|---|---|---|---|")
for t, hp, lp, hd, ld, rss in rows:
    rss_s = f"{rss / 2**20:.0f} MiB" if rss else "n/a"
    print(f"| {t} | {hp:.1f} tok/s | {lp:.1f} tok/s | {hp / lp:.2f}x | {hd:.1f} tok/s | {ld:.1f} tok/s | {hd / ld:.2f}x | {rss_s} |")
