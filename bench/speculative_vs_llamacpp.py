"""Speculative decoding against plain decoding and against llama.cpp's
prompt-lookup decoding, on the same GGUF, prompts and thread count, in one
run: Hearth's API server (`hearth-cli serve`, the request field
`speculation`: off, auto or ngram) and llama-cpp-python's server (plain,
and with `--draft_model prompt-lookup-decoding` at 10 and 2 predicted
tokens: `LlamaPromptLookupDecoding`).

    bench/setup-llamacpp.sh --native        # once per machine
    cargo build --release -p hearth-cli
    ~/.cache/hearth/llama-native-venv/bin/python bench/speculative_vs_llamacpp.py [--threads 2]

Three greedy chat requests, each streamed:
- code edit: a 200-line source file, then "repeat it with the function
  renamed" (text that copies its context);
- summarise with quotes: an article, then a summary quoting it;
- free chat: a story, where drafts are mostly wrong.

Decode speed is the streamed tokens after the first over the time from the
first to the last (Hearth's token count from its usage, llama.cpp's from its
chunks, one per token). Each configuration runs `--rounds` times, the
servers alternating, and keeps its best.
"""
import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import time
from urllib.parse import urlparse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ap = argparse.ArgumentParser()
ap.add_argument("--model", default=os.path.expanduser("~/.cache/hearth/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--rounds", type=int, default=2)
ap.add_argument("--max-tokens", type=int, default=320)
ap.add_argument("--draft-tokens", type=int, default=8)
ap.add_argument("--only", default="", help="comma-separated prompt names to run")
ap.add_argument("--cli", default=os.environ.get("HEARTH_CLI", os.path.join(ROOT, "target/release/hearth-cli")))
args = ap.parse_args()


def source_file():
    """A 200-line Python module: fixed text, with `parse_record` defined and used."""
    lines = ['"""Inventory records: parsing, checking and summing stock lines."""', "", "import csv", "import sys", ""]
    fields = ["sku", "name", "count", "price", "shelf", "supplier", "updated", "weight", "colour", "batch"]
    lines += ["", "def parse_record(line):", '    """One CSV line as a dict of the known fields."""', "    parts = line.rstrip('\\n').split(',')",
              "    if len(parts) != len(FIELDS):", "        raise ValueError(f'expected {len(FIELDS)} fields, got {len(parts)}')",
              "    record = dict(zip(FIELDS, parts))", "    record['count'] = int(record['count'])",
              "    record['price'] = float(record['price'])", "    return record", ""]
    lines.insert(5, "FIELDS = [" + ", ".join(f"'{f}'" for f in fields) + "]")
    i = 0
    while len(lines) < 192:
        f = fields[i % len(fields)]
        lines += ["", f"def total_by_{f}_{i}(path):", f'    """Stock counts summed by {f}."""', "    totals = {}",
                  "    with open(path) as handle:", "        for line in handle:", "            record = parse_record(line)",
                  f"            key = record['{f}']", "            totals[key] = totals.get(key, 0) + record['count']", "    return totals"]
        i += 1
    lines += ["", "", "if __name__ == '__main__':", "    for line in sys.stdin:", "        print(parse_record(line))"]
    return "\n".join(lines[:200])


ARTICLE = """The town of Harrowgate voted on Tuesday to rebuild its old stone bridge rather than replace it with a modern crossing. The bridge, built in 1791, carried the main road over the river Sell until cracks closed it to traffic two winters ago. "We are not going to lose the oldest thing in this town because concrete is cheaper," said Maria Okafor, who chairs the council's works committee. The vote was eleven to four.
Engineers had offered the council two plans. The first would repair the three arches with lime mortar and new facing stone cut from the same quarry, and add a steel frame under the deck that no one would see from the banks. The second would demolish the bridge and build a single concrete span forty metres downstream. The repair will cost 4.2 million pounds, against 2.9 million for the new span, and will take eighteen months rather than ten.
Shop owners on the high street have waited longest. "Every month the bridge is shut, people drive to the retail park instead of coming here," said Tom Hale, who runs the hardware shop his grandfather opened. "Eighteen months is a long time, but at least when it opens it will still be our bridge." Some were less patient. A petition with nine hundred names had asked for the faster plan.
The river itself has been part of the argument. The Sell floods most springs, and the new span would have stood above the highest flood on record. The old arches will not, and the engineers warned that water will reach the deck about once in fifty years. "We can live with that," said Okafor. "The bridge has lived with it for two hundred years."
Work is due to begin in March. The council will publish the contract in January, and says it will hold a public meeting every three months while the bridge is closed."""

PROMPTS = {
    "code edit": (f"```python\n{source_file()}\n```\n\nRewrite the file above with parse_record renamed to read_record. "
                  "Output the full file, unchanged otherwise, in one code block."),
    "summary with quotes": f"{ARTICLE}\n\nSummarise this article in a few paragraphs, quoting the key sentences word for word.",
    "free chat": "Write a short story about a lighthouse keeper who finds a strange map in a bottle.",
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(port):
    for _ in range(600):
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            c.request("GET", "/v1/models")
            c.getresponse().read()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("server did not start")


def start_hearth():
    p = subprocess.Popen([args.cli, "serve", "--model", args.model, "--threads", str(args.threads), "--port", "0"], stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    return p, line.rsplit(" on ", 1)[1].strip()


def start_llamacpp(draft):
    port = free_port()
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", args.model, "--n_threads", str(args.threads),
           "--n_threads_batch", str(args.threads), "--n_ctx", "8192", "--port", str(port), "--host", "127.0.0.1"]
    if draft:
        cmd += ["--draft_model", "prompt-lookup-decoding", "--draft_model_num_pred_tokens", str(draft)]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_ready(port)
    return p, f"http://127.0.0.1:{port}/v1"


def stream(url, prompt, extra):
    """One greedy streamed chat reply: (tokens, decode seconds, text)."""
    u = urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=1200)
    body = {"model": "m", "messages": [{"role": "user", "content": prompt}], "max_tokens": args.max_tokens,
            "temperature": 0, "stream": True, **extra}
    conn.request("POST", u.path + "/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        raise RuntimeError(f"{url}: {r.status} {r.read()[:300]}")
    first = last = None
    chunks, usage, text = 0, None, []
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data:") or line == "data: [DONE]":
            continue
        event = json.loads(line[5:])
        usage = event.get("usage") or usage
        for choice in event.get("choices", []):
            piece = (choice.get("delta") or {}).get("content")
            if piece:
                now = time.perf_counter()
                first = first or now
                last = now
                chunks += 1
                text.append(piece)
    conn.close()
    tokens = usage["completion_tokens"] if usage else chunks
    return tokens, (last - first) if first else 0.0, "".join(text)


def run(start, extra, names):
    p, url = start()
    try:
        stream(url, "Hi", extra)  # warm up: weights paged in
        return {n: stream(url, PROMPTS[n], extra) for n in names}
    finally:
        p.terminate()
        p.wait()


names = [n for n in PROMPTS if not args.only or n in args.only.split(",")]
hearth_opts = {"stream_options": {"include_usage": True}, "draft_tokens": args.draft_tokens}
configs = {
    "Hearth, off": (start_hearth, {**hearth_opts, "speculation": "off"}),
    "Hearth, auto": (start_hearth, {**hearth_opts, "speculation": "auto"}),
    "Hearth, ngram": (start_hearth, {**hearth_opts, "speculation": "ngram"}),
    "llama.cpp, plain": (lambda: start_llamacpp(0), {}),
    "llama.cpp, lookup 10": (lambda: start_llamacpp(10), {}),
    "llama.cpp, lookup 2": (lambda: start_llamacpp(2), {}),
}
best = {c: {} for c in configs}
for _ in range(args.rounds):
    for c, (start, extra) in configs.items():
        for n, (tokens, seconds, text) in run(start, extra, names).items():
            rate = (tokens - 1) / seconds if seconds > 0 else 0.0
            if rate > best[c].get(n, (0.0,))[0]:
                best[c][n] = (rate, tokens, text)

print(f"{os.path.basename(args.model)}, {args.threads} threads, greedy, at most {args.max_tokens} tokens, "
      f"Hearth drafts of at most {args.draft_tokens}, best of {args.rounds} alternating rounds\n")
print("| prompt | " + " | ".join(configs) + " |")
print("|---|" + "---|" * len(configs))
for n in names:
    print(f"| {n} (tok/s) | " + " | ".join(f"{best[c][n][0]:.1f}" for c in configs) + " |")
print()
for n in names:
    off, lookup = best["Hearth, off"][n][0], max(best["llama.cpp, lookup 10"][n][0], best["llama.cpp, lookup 2"][n][0])
    for mode in ("auto", "ngram"):
        r = best[f"Hearth, {mode}"][n][0]
        print(f"{n}, {mode}: {r / off:.2f}x Hearth off, {r / lookup:.2f}x llama.cpp's best lookup")
print()
for n in names:
    same = best["Hearth, off"][n][2] == best["Hearth, auto"][n][2] == best["Hearth, ngram"][n][2]
    print(f"{n}: Hearth's three replies {'are' if same else 'are NOT'} the same text; tokens "
          + ", ".join(f"{c} {best[c][n][1]}" for c in configs))
