"""Records llama.cpp's token ids for the corpus under other pre-tokenizers:
the default model's vocabulary and merges with `tokenizer.ggml.pre` set to
each name below, so each family's splitting regex is held to llama.cpp's.

    $(bench/setup-llamacpp.sh)/bin/python scripts/golden/record_pre_tokenizers.py \
        MODEL.gguf crates/engine/tests/data/tokenizer_pre.json
"""
import json
import os
import struct
import sys
import tempfile

import llama_cpp
from corpus import corpus

NAMES = ["gpt-4o", "qwen2", "qwen35", "llama-bpe", "tekken", "dbrx", "olmo", "refact", "starcoder", "glm4", "lfm2"]


def with_pre(src, dst, value):
    """A copy of GGUF `src` with tokenizer.ggml.pre set to `value`."""
    b = open(src, "rb").read()
    at = 4
    _version, n_tensors, n_kv = struct.unpack_from("<IQQ", b, at)
    at += 20
    out = bytearray(b[:24])
    alignment = 32

    def string(at):
        (n,) = struct.unpack_from("<Q", b, at)
        return b[at + 8:at + 8 + n].decode(), at + 8 + n

    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def skip(t, at):
        if t in sizes:
            return at + sizes[t]
        if t == 8:
            return string(at)[1]
        (item,) = struct.unpack_from("<I", b, at)
        (n,) = struct.unpack_from("<Q", b, at + 4)
        at += 12
        for _ in range(n):
            at = skip(item, at)
        return at

    for _ in range(n_kv):
        start = at
        key, at = string(at)
        (t,) = struct.unpack_from("<I", b, at)
        at += 4
        if key == "general.alignment":
            (alignment,) = struct.unpack_from("<I", b, at)
        end = skip(t, at)
        if key == "tokenizer.ggml.pre":
            v = value.encode()
            out += struct.pack("<Q", len(key)) + key.encode() + struct.pack("<IQ", 8, len(v)) + v
        else:
            out += b[start:end]
        at = end
    infos = at
    for _ in range(n_tensors):
        _, at = string(at)
        (n,) = struct.unpack_from("<I", b, at)
        at += 4 + 8 * n + 4 + 8
    out += b[infos:at]
    data = -(-at // alignment) * alignment
    out += b"\0" * (-len(out) % alignment)
    out += b[data:]
    open(dst, "wb").write(out)


model, out = sys.argv[1], sys.argv[2]
result = {"model": os.path.basename(model), "llama_cpp_python": llama_cpp.__version__, "pre": {}}
with tempfile.TemporaryDirectory() as d:
    for name in NAMES:
        path = os.path.join(d, name + ".gguf")
        with_pre(model, path, name)
        llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
        result["pre"][name] = [
            {"text": text, "ids": llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)} for text in corpus()
        ]
with open(out, "w", encoding="utf-8") as f:
    json.dump(result, f, ensure_ascii=False)
print(f"wrote {sum(len(v) for v in result['pre'].values())} cases to {out}")
