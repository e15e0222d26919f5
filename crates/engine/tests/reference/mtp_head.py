"""The MTP head of a Qwen 3.5 GGUF file (dense FFN), computed from the
file's tensors alone: numpy over the gguf package's dequantized tensors,
in float64, written from llama.cpp's and vLLM's description of the head
(docs/research/mtp.md), not from Hearth's code.

    mtp_head.py MODEL INPUT.json OUT.f32

INPUT.json: {"tokens": [...], "previous": [[...], ...]}, the tokens at
positions 0.. and, for each, the model's final hidden state (after the
output norm) at the position before it. OUT.f32: the head's logits at
every position, little-endian f32, `[tokens, vocab]`.
"""

import json
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


def main():
    model, inputs, out = sys.argv[1:4]
    reader = GGUFReader(model)
    fields = reader.fields

    def value(name):
        f = fields[name]
        return f.parts[f.data[0]][0]

    def values(name):
        f = fields[name]
        return [f.parts[i][0] for i in f.data]

    weights = {t.name: dequantize(t.data, t.tensor_type).astype(np.float64) for t in reader.tensors}
    arch = bytes(fields["general.architecture"].parts[fields["general.architecture"].data[0]]).decode()
    key = lambda k: f"{arch}.{k}"
    e = int(value(key("embedding_length")))
    layer = int(value(key("block_count"))) - int(value(key("nextn_predict_layers")))
    def per_layer(name):
        f = fields[key(name)]
        return int(values(key(name))[layer]) if len(f.data) > 1 else int(value(key(name)))

    heads = per_layer("attention.head_count")
    kv_heads = per_layer("attention.head_count_kv") if key("attention.head_count_kv") in fields else heads
    head_dim = int(value(key("attention.key_length"))) if key("attention.key_length") in fields else e // heads
    rope_dims = int(value(key("rope.dimension_count"))) if key("rope.dimension_count") in fields else head_dim
    base = float(value(key("rope.freq_base")))
    eps = float(value(key("attention.layer_norm_rms_epsilon")))
    sections = [int(s) for s in values(key("rope.dimension_sections"))]

    with open(inputs) as f:
        given = json.load(f)
    tokens = np.array(given["tokens"])
    previous = np.array(given["previous"], dtype=np.float64)
    n = len(tokens)

    def rms(x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w

    p = f"blk.{layer}"
    w = lambda name: weights[f"{p}.{name}.weight"]
    # The head: its own projection of the normed embedding beside the
    # normed hidden state (the embedding's half first).
    inp = np.concatenate([rms(weights["token_embd.weight"][tokens], w("nextn.enorm")), rms(previous, w("nextn.hnorm"))], -1)
    x = inp @ w("nextn.eh_proj").T

    # One full-attention layer, Qwen 3.5's: queries beside an output gate,
    # per-head norms of queries and keys, NeoX RoPE over the first
    # rope_dims of each head. Multi-section RoPE (ggml's interleaved
    # kind): pair i takes the position of section (i % Σ) % 3 (time,
    # height, width) while that section has pairs left, else the fourth
    # section's; a text token's first three positions are its index and
    # its fourth is 0, so those pairs stay unrotated.
    h = rms(x, w("attn_norm"))
    qg = (h @ w("attn_q").T).reshape(n, heads, 2 * head_dim)
    q, gate = qg[..., :head_dim], qg[..., head_dim:]
    k = (h @ w("attn_k").T).reshape(n, kv_heads, head_dim)
    v = (h @ w("attn_v").T).reshape(n, kv_heads, head_dim)
    q = rms(q, w("attn_q_norm"))
    k = rms(k, w("attn_k_norm"))
    half = rope_dims // 2
    total = sum(sections)

    def claimed(i):
        sector = i % total
        return sector < 3 * sections[sector % 3]

    positions = np.arange(n, dtype=np.float64)
    freqs = base ** (-2.0 * np.arange(half) / rope_dims)
    angle = positions[:, None] * freqs[None, :] * np.array([claimed(i) for i in range(half)])[None, :]
    cos, sin = np.cos(angle)[:, None, :], np.sin(angle)[:, None, :]

    def rope(t):
        t = t.copy()
        a, b = t[..., :half].copy(), t[..., half:rope_dims].copy()
        t[..., :half] = a * cos - b * sin
        t[..., half:rope_dims] = a * sin + b * cos
        return t

    q, k = rope(q), rope(k)
    group = heads // kv_heads
    attn = np.zeros((n, heads, head_dim))
    for hd in range(heads):
        kh, vh = k[:, hd // group], v[:, hd // group]
        scores = q[:, hd] @ kh.T / np.sqrt(head_dim)
        scores = np.where(np.tril(np.ones((n, n), dtype=bool)), scores, -np.inf)
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        attn[:, hd] = (scores / scores.sum(-1, keepdims=True)) @ vh
    attn = attn * (1.0 / (1.0 + np.exp(-gate)))
    x = x + attn.reshape(n, heads * head_dim) @ w("attn_output").T
    h = rms(x, w("post_attention_norm"))
    g, u = h @ w("ffn_gate").T, h @ w("ffn_up").T
    x = x + (g / (1.0 + np.exp(-g)) * u) @ w("ffn_down").T

    norm = weights.get(f"{p}.nextn.shared_head_norm.weight", weights["output_norm.weight"])
    output = weights.get("output.weight", weights["token_embd.weight"])
    logits = rms(x, norm) @ output.T
    logits.astype("<f4").tofile(out)
    print(json.dumps({"vocab": int(output.shape[0])}))


main()
