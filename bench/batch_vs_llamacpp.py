"""N sequences at once, Hearth against llama.cpp, on the same GGUF and thread count.

Two measurements, each a wall-time ratio against the same engine decoding
one sequence, in the same run (this machine's speed drifts):

- variants: N sequences decoded together from one prefilled prompt
  (Hearth's "Generate N"; llama.cpp: the prompt's cache copied to N
  sequence ids, then one `llama_decode` of N tokens per step);
- conversations: N sequences with prompts of their own decoded together
  (Hearth's worker when several conversations write at once; llama.cpp:
  what its server's parallel slots do), each one's tokens per second
  against one alone.

llama.cpp samples greedily here (numpy argmax per sequence) and Hearth at
temperature 0.8 with top-k 40: both pick from the whole vocabulary per
sequence per step, which is a small part of a step either way.

    V=$(bench/setup-llamacpp.sh --native)/bin/python
    $V bench/batch_vs_llamacpp.py --threads 2 --batch 4 --conversations 2
"""
import argparse
import ctypes
import json
import os
import subprocess
import time

import llama_cpp.llama_cpp as L
import numpy as np

import llamacpp_ref  # noqa: F401  (its AMX workaround patches the defaults)

# llama.cpp's own log (graph inputs, every load) would bury the result.
_quiet = L.llama_log_callback(lambda level, text, data: None)
L.llama_log_set(_quiet, ctypes.c_void_p(0))

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ap = argparse.ArgumentParser()
ap.add_argument("--model", default=os.path.expanduser("~/.cache/hearth/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--prompt-tokens", type=int, default=128)
ap.add_argument("--gen-tokens", type=int, default=128)
ap.add_argument("--batch", type=int, default=4)
ap.add_argument("--conversations", type=int, default=2)
ap.add_argument("--repeats", type=int, default=3, help="each figure is the best of this many runs per round")
ap.add_argument("--rounds", type=int, default=3, help="alternate the engines this many times")
ap.add_argument("--cli", default=os.environ.get("HEARTH_CLI", os.path.join(ROOT, "target/release/hearth-cli")))
args = ap.parse_args()


class LlamaBatch:
    """llama.cpp with one context holding up to `seqs` sequences."""

    def __init__(self, model_path, threads, seqs, per_seq_ctx):
        mp = L.llama_model_default_params()
        self.model = L.llama_model_load_from_file(model_path.encode(), mp)
        cp = L.llama_context_default_params()
        cp.n_ctx = seqs * per_seq_ctx
        cp.n_batch = max(512, args.prompt_tokens)
        cp.n_ubatch = cp.n_batch
        cp.n_seq_max = seqs
        cp.n_threads = cp.n_threads_batch = threads
        self.ctx = L.llama_init_from_model(self.model, cp)
        self.vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(self.model))
        self.batch = L.llama_batch_init(max(cp.n_batch, seqs), 0, seqs)
        self.mem = L.llama_get_memory(self.ctx)

    def decode(self, entries):
        """`entries`: (token, position, sequence, wants logits)."""
        b = self.batch
        b.n_tokens = len(entries)
        for i, (tok, pos, seq, logits) in enumerate(entries):
            b.token[i] = tok
            b.pos[i] = pos
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = seq
            b.logits[i] = logits
        assert L.llama_decode(self.ctx, b) == 0

    def argmax(self, i):
        return int(np.argmax(np.ctypeslib.as_array(L.llama_get_logits_ith(self.ctx, i), shape=(self.vocab,))))

    def prefill(self, ids, seq):
        self.decode([(t, p, seq, p == len(ids) - 1) for p, t in enumerate(ids)])
        return self.argmax(len(ids) - 1)

    def variants(self, prompt, n, gen):
        """Seconds to decode `gen` tokens for `n` sequences from one prompt."""
        L.llama_memory_clear(self.mem, True)
        first = self.prefill(prompt, 0)
        for s in range(1, n):
            L.llama_memory_seq_cp(self.mem, 0, s, -1, -1)
        toks = [first] * n
        t = time.perf_counter()
        for step in range(gen):
            self.decode([(toks[s], len(prompt) + step, s, True) for s in range(n)])
            toks = [self.argmax(s) for s in range(n)]
        return time.perf_counter() - t

    def conversations(self, prompts, gen):
        """Each conversation's decode tokens per second, all decoded together."""
        L.llama_memory_clear(self.mem, True)
        toks = [self.prefill(p, s) for s, p in enumerate(prompts)]
        t = time.perf_counter()
        for step in range(gen):
            self.decode([(toks[s], len(p) + step, s, True) for s, p in enumerate(prompts)])
            toks = [self.argmax(s) for s in range(len(prompts))]
        return gen / (time.perf_counter() - t)


def hearth_run():
    out = subprocess.check_output([
        args.cli, "bench", "--model", args.model, "--threads", str(args.threads), "--prompt-tokens", str(args.prompt_tokens),
        "--gen-tokens", str(args.gen_tokens), "--repeats", str(args.repeats), "--batch", str(args.batch),
        "--concurrent", str(args.conversations), "--json"])
    return json.loads(out)


seqs = max(args.batch, args.conversations)
llm = LlamaBatch(args.model, args.threads, seqs, args.prompt_tokens + args.gen_tokens + 16)
best = {k: None for k in ["h_one", "h_many", "h_alone", "h_each", "l_one", "l_many", "l_alone", "l_each"]}


def keep(key, value, lower_is_better):
    old = best[key]
    best[key] = value if old is None else (min(old, value) if lower_is_better else max(old, value))


prompt = None
for _ in range(args.rounds):
    h = hearth_run()
    prompt = h["prompt_token_ids"]
    keep("h_one", h["batched"]["one_sequence_s"], True)
    keep("h_many", h["batched"]["batch_s"], True)
    keep("h_alone", h["concurrent"]["alone_tokens_per_s"], False)
    keep("h_each", min(h["concurrent"]["each_tokens_per_s"]), False)
    # Each conversation its own prompt, as Hearth's bench rotates it.
    prompts = [prompt[i % len(prompt):] + prompt[:i % len(prompt)] for i in range(args.conversations)]
    for _ in range(args.repeats):
        keep("l_one", llm.variants(prompt, 1, args.gen_tokens), True)
        keep("l_many", llm.variants(prompt, args.batch, args.gen_tokens), True)
        keep("l_alone", llm.conversations(prompts[:1], args.gen_tokens), False)
        keep("l_each", llm.conversations(prompts, args.gen_tokens), False)

b = best
print(json.dumps({
    "threads": args.threads, "batch": args.batch, "conversations": args.conversations,
    "system_info": L.llama_print_system_info().decode(),
    "hearth": {"one_s": b["h_one"], "batch_s": b["h_many"], "wall_ratio": b["h_many"] / b["h_one"],
               "alone_tok_s": b["h_alone"], "each_tok_s": b["h_each"], "each_ratio": b["h_each"] / b["h_alone"]},
    "llamacpp": {"one_s": b["l_one"], "batch_s": b["l_many"], "wall_ratio": b["l_many"] / b["l_one"],
                 "alone_tok_s": b["l_alone"], "each_tok_s": b["l_each"], "each_ratio": b["l_each"] / b["l_alone"]},
    "hearth_over_llamacpp": {"batch_tok_s": b["l_many"] / b["h_many"], "each_tok_s": b["h_each"] / b["l_each"]},
}, indent=1))
