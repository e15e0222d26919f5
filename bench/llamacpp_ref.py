"""llama.cpp (through llama-cpp-python) as the reference engine.

Shared by the benchmarks and the recorders. On CPUs with AMX, works around
the segfault noted in shared/NOTES.md by turning extra buffer types off;
elsewhere llama.cpp keeps them (its repacked Q4_0/Q4_K/IQ4_NL layouts), as
its users have them.
"""
import ctypes
import time

import llama_cpp
import numpy as np

_orig_defaults = llama_cpp.llama_cpp.llama_model_default_params


def _has_amx():
    try:
        return "amx_tile" in open("/proc/cpuinfo").read()
    except OSError:
        return False


HAS_AMX = _has_amx()


def _patched_defaults():
    p = _orig_defaults()
    if HAS_AMX and hasattr(p, "use_extra_bufts"):
        p.use_extra_bufts = False
    return p


llama_cpp.llama_cpp.llama_model_default_params = _patched_defaults
llama_cpp.llama_model_default_params = _patched_defaults


# YaRN's betas as llama.cpp's own tools leave them (-1: the file's, where
# its family reads them, else 32 and 1); llama-cpp-python's defaults (32
# and 1) would override a file's own (Mistral 3 writes them).
FILE_YARN = dict(yarn_beta_fast=-1.0, yarn_beta_slow=-1.0)


def load(model, threads, n_ctx=4096, f32_cache=False, logits_all=False, flash_attn=False):
    kw = dict(model_path=model, n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads, n_batch=512, verbose=False, logits_all=logits_all,
              flash_attn=flash_attn, **FILE_YARN)
    if f32_cache:
        kw.update(type_k=0, type_v=0)
    return llama_cpp.Llama(**kw)


def last_logits(llm):
    return np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm._n_vocab,))


def greedy(llm, prompt_ids, n, stop_ids=(), gaps=None):
    """Greedy ids; if `gaps` is a list, it gets each step's top-1 minus top-2 logit."""
    llm.reset()
    llm.eval(prompt_ids)
    out = []
    for _ in range(n):
        logits = last_logits(llm)
        tok = int(np.argmax(logits))
        if gaps is not None:
            top2 = np.partition(logits, -2)[-2:]
            gaps.append(float(top2[1] - top2[0]))
        out.append(tok)
        if tok in stop_ids:
            break
        llm.eval([tok])
    return out


def bench(llm, prompt_ids, gen_tokens, repeats=3):
    """Best-of-N prefill and decode tokens/s, timed the same way as hearth-cli bench."""
    best_p, best_d = float("inf"), float("inf")
    for _ in range(repeats):
        # reset() rewinds to position 0; eval() then drops the cache past it.
        llm.reset()
        t = time.perf_counter()
        llm.eval(prompt_ids)
        tok = int(np.argmax(last_logits(llm)))
        best_p = min(best_p, time.perf_counter() - t)
        t = time.perf_counter()
        for _ in range(gen_tokens):
            llm.eval([tok])
            tok = int(np.argmax(last_logits(llm)))
        best_d = min(best_d, time.perf_counter() - t)
    return len(prompt_ids) / best_p, gen_tokens / best_d
