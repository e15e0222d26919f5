"""Hearth's OpenAI API against llama.cpp's (llama-cpp-python's server) and
against hearth-cli, on the same GGUF and thread count, in one run.

    bench/setup-llamacpp.sh                 # once per machine (llama-cpp-python, with its server's packages)
    cargo build --release -p hearth-cli
    ~/.cache/hearth/llama-venv/bin/python bench/api_vs_llamacpp.py [--threads 2] [--gen-tokens 128] [--clients 8]

Prints, as Markdown rows:
- streamed decode tok/s through /v1/chat/completions for both servers, and
  Hearth's API over `hearth-cli generate` on the same prompt (the API's
  overhead: 1.00 is none);
- the total tok/s of N clients streaming at once;
- a second turn's time to first token after a long first turn, with the
  prefix cached (the turn before on the same server) and cold (the same
  request on a server that has not seen it).
Every request is greedy, so both servers produce text of similar length.
"""
import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
from urllib.parse import urlparse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ap = argparse.ArgumentParser()
ap.add_argument("--model", default=os.path.expanduser("~/.cache/hearth/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--gen-tokens", type=int, default=128)
ap.add_argument("--clients", type=int, default=8)
ap.add_argument("--client-tokens", type=int, default=64)
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--cli", default=os.environ.get("HEARTH_CLI", os.path.join(ROOT, "target/release/hearth-cli")))
args = ap.parse_args()

STORY = "Write a very long story about a dragon who learns to bake bread."
# About 1,000 tokens of history for the second-turn figure.
HISTORY = " ".join(f"Note {i}: the lighthouse keeper counted {i * 7} ships, logged the weather, and polished the lamp before dusk." for i in range(40))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_hearth():
    p = subprocess.Popen([args.cli, "serve", "--model", args.model, "--threads", str(args.threads), "--port", "0"], stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    url = line.rsplit(" on ", 1)[1].strip()
    return p, url


def start_llamacpp():
    port = free_port()
    p = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", args.model, "--n_threads", str(args.threads), "--n_threads_batch", str(args.threads),
         "--n_ctx", "4096", "--port", str(port), "--host", "127.0.0.1",
         # Its default lets a new request cut off the one streaming; Hearth's queue never does.
         "--interrupt_requests", "False"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/v1"
    for _ in range(600):
        try:
            http.client.HTTPConnection("127.0.0.1", port, timeout=1).request("GET", "/v1/models")
            break
        except OSError:
            time.sleep(0.1)
    return p, url


def stream(url, messages, max_tokens):
    """Streams one greedy chat reply: (time to first token, decode tok/s, tokens, usage)."""
    u = urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    body = {"model": "m", "messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    t0 = time.perf_counter()
    conn.request("POST", u.path + "/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse()
    first = last = None
    chunks, usage, timings = 0, None, None
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        c = json.loads(line[6:])
        if c.get("usage"):
            usage = c["usage"]
        if c.get("timings"):
            timings = c["timings"]
        if c.get("choices") and c["choices"][0]["delta"].get("content"):
            now = time.perf_counter()
            first = first or now
            last = now
            chunks += 1
    conn.close()
    # llama-cpp-python sends one chunk per token and may omit usage; Hearth sends tokens in 50 ms batches with usage.
    tokens = usage["completion_tokens"] if usage else chunks
    decode = (tokens - 1) / (last - first) if last and last > first else 0.0
    if first is None:
        raise RuntimeError(f"no text streamed from {url}: status {r.status}")
    if timings:
        ENGINE_SIDE.append(timings["predicted_per_second"])
    return first - t0, decode, tokens, usage


ENGINE_SIDE = []


def user(text):
    return [{"role": "user", "content": text}]


def concurrent(url):
    results = [None] * args.clients

    def one(i):
        results[i] = stream(url, user(f"Count from {i} to {i + 40}, one number per line."), args.client_tokens)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(args.clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(r[2] for r in results) / (time.perf_counter() - t0)


def second_turn(url, nonce):
    """Turn 2's TTFT after turn 1 on the same server, and turn 2 alone on a cold prefix."""
    first_q = f"[{nonce}] {HISTORY}\nSummarise these notes in one line."
    _, _, _, _ = stream(url, user(first_q), 16)
    # Both servers are greedy, so turn 1's reply is the same each time: ask for it once more from the cache.
    reply = whole(url, user(first_q), 16)
    turn2 = user(first_q) + [{"role": "assistant", "content": reply}, {"role": "user", "content": "How many ships in all?"}]
    warm, _, _, usage_warm = stream(url, turn2, 8)
    cold_q = [dict(m) for m in turn2]
    cold_q[0]["content"] = f"[{nonce}-cold] " + cold_q[0]["content"]
    cold, _, _, usage_cold = stream(url, cold_q, 8)
    return warm, cold, usage_warm, usage_cold


def whole(url, messages, max_tokens):
    u = urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    conn.request("POST", u.path + "/chat/completions", json.dumps({"model": "m", "messages": messages, "max_tokens": max_tokens, "temperature": 0}), {"Content-Type": "application/json"})
    r = json.loads(conn.getresponse().read())
    conn.close()
    return r["choices"][0]["message"]["content"]


def cli_decode():
    out = subprocess.check_output([args.cli, "generate", "--model", args.model, "--threads", str(args.threads), "--prompt", STORY,
                                   "--temperature", "0", "--max-tokens", str(args.gen_tokens), "--json"])
    return json.loads(out)["decode_tokens_per_s"]


best = {"hearth": 0.0, "llama": 0.0, "cli": 0.0, "hearth_n": 0.0, "llama_n": 0.0}
turns = {}
for rnd in range(args.rounds):
    for name, start in (("hearth", start_hearth), ("llama", start_llamacpp)):
        proc, url = start()
        try:
            stream(url, user("Hi"), 4)  # warm up
            ENGINE_SIDE.clear()
            _, decode, tokens, _ = stream(url, user(STORY), args.gen_tokens)
            best[name] = max(best[name], decode)
            if name == "hearth" and ENGINE_SIDE:
                best["engine"] = max(best.get("engine", 0.0), ENGINE_SIDE[0])
            best[name + "_n"] = max(best[name + "_n"], concurrent(url))
            warm, cold, uw, uc = second_turn(url, f"{name}-{rnd}-{time.time()}")
            prev = turns.get(name)
            turns[name] = (min(warm, prev[0]) if prev else warm, min(cold, prev[1]) if prev else cold, uw, uc)
        finally:
            proc.terminate()
            proc.wait()
    best["cli"] = max(best["cli"], cli_decode())

print(f"model {os.path.basename(args.model)}, {args.threads} threads, greedy, best of {args.rounds} alternating rounds")
print("| figure | Hearth API | llama.cpp server | ratio |")
print("|---|---|---|---|")
print(f"| decode, one client streaming {args.gen_tokens} tokens | {best['hearth']:.1f} tok/s | {best['llama']:.1f} tok/s | {best['hearth'] / best['llama']:.2f}x |")
print(f"| {args.clients} clients at once, {args.client_tokens} tokens each: total | {best['hearth_n']:.1f} tok/s | {best['llama_n']:.1f} tok/s | {best['hearth_n'] / best['llama_n']:.2f}x |")
hw, hc, huw, huc = turns["hearth"]
lw, lc, _, _ = turns["llama"]
print(f"| second turn ({huw['prompt_tokens']} prompt tokens), time to first token, prefix cached | {hw * 1e3:.0f} ms ({huw['prompt_tokens_details']['cached_tokens']} cached) | {lw * 1e3:.0f} ms | {lw / hw:.2f}x faster |")
print(f"| the same turn, cold | {hc * 1e3:.0f} ms ({huc['prompt_tokens_details']['cached_tokens']} cached) | {lc * 1e3:.0f} ms | {lc / hc:.2f}x faster |")
print()
print(f"API overhead: Hearth API decode {best['hearth']:.1f} tok/s / hearth-cli generate {best['cli']:.1f} tok/s = {best['hearth'] / best['cli']:.2f}"
      f" (inside the server's engine: {best.get('engine', 0):.1f} tok/s)")
