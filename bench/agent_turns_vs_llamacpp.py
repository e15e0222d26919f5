"""An agent's session, replayed: twenty turns of a growing conversation (a
long system prompt with the agent's tools, then tool calls and their
results) sent whole each turn, as coding agents send them, to Hearth's API
and to llama.cpp's (llama-cpp-python's server, its prompt cache on), on the
same GGUF and thread count, in one run.

    bench/setup-llamacpp.sh                 # once per machine
    cargo build --release -p hearth-cli
    ~/.cache/hearth/llama-venv/bin/python bench/agent_turns_vs_llamacpp.py [--threads 2]

Each turn is one greedy request for one token, so its time is the time to
first token. The conversation is fixed text (the replies are recorded, not
the servers' own), so both servers read the same tokens; the tools are
written into the system prompt as text, since llama-cpp-python's server
takes `tools` only with its own function-calling formats. Prints, per
turn, the prompt's tokens, the tokens each server ran (Hearth: its usage;
llama.cpp: its "prompt eval" log line) and each time; then the totals.
"""
import argparse
import http.client
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from urllib.parse import urlparse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ap = argparse.ArgumentParser()
ap.add_argument("--model", default=os.path.expanduser("~/.cache/hearth/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--turns", type=int, default=20)
ap.add_argument("--n-ctx", type=int, default=8192)
ap.add_argument("--cli", default=os.environ.get("HEARTH_CLI", os.path.join(ROOT, "target/release/hearth-cli")))
args = ap.parse_args()

TOOLS = [
    ("read_file", "Reads a file of the workspace and returns its text with line numbers.", {"path": "string", "offset": "integer", "limit": "integer"}),
    ("write_file", "Writes text to a file of the workspace, replacing what was there.", {"path": "string", "content": "string"}),
    ("run_shell", "Runs a shell command in the workspace and returns its output and exit status.", {"command": "string", "timeout_ms": "integer"}),
    ("search", "Searches the workspace's files for a regular expression and returns the matching lines.", {"pattern": "string", "glob": "string"}),
    ("list_dir", "Lists a folder of the workspace, with each entry's size.", {"path": "string"}),
]
SYSTEM = (
    "You are a coding agent working in the user's repository. Use the tools to read, search and change files; "
    "run the tests after every change; keep changes small and explain them briefly.\n\n# Tools\n"
    + "\n".join(f"## {n}\n{d}\nParameters: {json.dumps({k: {'type': t} for k, t in p.items()})}" for n, d, p in TOOLS)
    + "\n\nCall a tool by answering with one JSON object {\"tool\": NAME, \"arguments\": {...}} and nothing else.\n"
    + "\n".join(f"Rule {i}: prefer the smallest change that makes test {i} pass, and never edit generated files." for i in range(1, 36))
)


def tool_result(turn):
    lines = [f"{i + 1:4d}  fn step_{turn}_{i}(x: u32) -> u32 {{ x.wrapping_mul({i + 3}).rotate_left({turn % 7}) }}" for i in range(8)]
    return "\n".join(lines)


def conversation():
    """The messages of each turn's request: the history so far and the new message."""
    messages = [{"role": "system", "content": SYSTEM},
                {"role": "user", "content": "The tests in crates/engine fail after the last change. Find out why and fix it."}]
    turns = []
    for t in range(args.turns):
        turns.append([dict(m) for m in messages])
        call = {"tool": TOOLS[t % len(TOOLS)][0], "arguments": {"path": f"crates/engine/src/step_{t}.rs"}}
        messages.append({"role": "assistant", "content": json.dumps(call)})
        messages.append({"role": "user", "content": f"Result of {call['tool']}:\n{tool_result(t)}"})
    return turns


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_hearth():
    p = subprocess.Popen([args.cli, "serve", "--model", args.model, "--threads", str(args.threads), "--port", "0"], stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    return p, line.rsplit(" on ", 1)[1].strip(), None


def start_llamacpp():
    port = free_port()
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    p = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", args.model, "--n_threads", str(args.threads), "--n_threads_batch", str(args.threads),
         "--n_ctx", str(args.n_ctx), "--port", str(port), "--host", "127.0.0.1", "--cache", "True", "--interrupt_requests", "False"],
        stdout=subprocess.DEVNULL, stderr=log)
    for _ in range(600):
        try:
            http.client.HTTPConnection("127.0.0.1", port, timeout=1).request("GET", "/v1/models")
            break
        except OSError:
            time.sleep(0.1)
    return p, f"http://127.0.0.1:{port}/v1", log.name


def ask(url, messages):
    u = urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    body = {"model": "m", "messages": messages, "max_tokens": 1, "temperature": 0}
    t0 = time.perf_counter()
    conn.request("POST", u.path + "/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse()
    out = json.loads(r.read())
    elapsed = time.perf_counter() - t0
    conn.close()
    if r.status != 200:
        raise RuntimeError(f"{url}: {r.status} {out}")
    return elapsed, out.get("usage") or {}


def prompt_evals(log):
    """llama.cpp's prompt tokens run per request, from its timing lines."""
    with open(log) as f:
        return [int(m.group(1)) for m in re.finditer(r"prompt eval time =.*?/\s*(\d+) tokens", f.read())]


def replay(start):
    p, url, log = start()
    try:
        ask(url, [{"role": "user", "content": "Hi"}])  # warm up: weights paged in
        rows = [ask(url, messages) for messages in conversation()]
    finally:
        p.terminate()
        p.wait()
    return rows, (prompt_evals(log)[1:] if log else None)


hearth, _ = replay(start_hearth)
llama, evals = replay(start_llamacpp)
print(f"{args.turns} turns, {os.path.basename(args.model)}, {args.threads} threads\n")
print("| turn | prompt tokens | Hearth ran | Hearth ms | llama.cpp ran | llama.cpp ms | llama.cpp / Hearth |")
print("|---|---|---|---|---|---|---|")
for i, ((ht, hu), (lt, _)) in enumerate(zip(hearth, llama)):
    prompt = hu.get("prompt_tokens", 0)
    ran = prompt - hu.get("prompt_tokens_details", {}).get("cached_tokens", 0)
    lran = evals[i] if evals and i < len(evals) else "?"
    print(f"| {i + 1} | {prompt} | {ran} | {ht * 1000:.0f} | {lran} | {lt * 1000:.0f} | {lt / ht:.2f}x |")
th, tl = sum(r[0] for r in hearth), sum(r[0] for r in llama)
later_h, later_l = sum(r[0] for r in hearth[1:]), sum(r[0] for r in llama[1:])
print(f"\nall turns: Hearth {th:.2f} s, llama.cpp {tl:.2f} s ({tl / th:.2f}x); turns 2-{args.turns}: Hearth {later_h:.2f} s, llama.cpp {later_l:.2f} s ({later_l / later_h:.2f}x)")
