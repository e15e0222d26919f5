"""Makes copies of the default model in the common file types with llama.cpp's
own quantizer (llama_model_quantize, allow_requantize), as users find them on
model hubs. Idempotent; prints one path per line.

    $(bench/setup-llamacpp.sh)/bin/python bench/quantize_copies.py [SRC] [DIR]

The default model's 576-wide rows are not a multiple of 256, so the K-quant
files fall back to Q5_0/Q5_1/Q8_0/IQ4_NL for those tensors, as small real
models do.
"""
import os
import sys

import llama_cpp

TYPES = {"F16": 1, "Q4_0": 2, "Q8_0": 7, "Q3_K_M": 12, "Q4_K_M": 15, "Q5_K_M": 17, "Q6_K": 18, "IQ4_XS": 30}

cache = os.environ.get("HEARTH_MODEL_DIR") or os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "hearth", "models")
src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(cache, "SmolLM2-135M-Instruct.Q4_1.gguf")
out_dir = sys.argv[2] if len(sys.argv) > 2 else os.path.join(cache, "quants")
os.makedirs(out_dir, exist_ok=True)
for name, ftype in TYPES.items():
    dst = os.path.join(out_dir, f"SmolLM2-135M-Instruct.{name}.gguf")
    if not os.path.exists(dst):
        params = llama_cpp.llama_cpp.llama_model_quantize_default_params()
        params.ftype = ftype
        params.allow_requantize = True
        params.nthread = os.cpu_count() or 1
        rc = llama_cpp.llama_cpp.llama_model_quantize(src.encode(), (dst + ".part").encode(), params)
        if rc != 0:
            sys.exit(f"quantizing to {name} failed ({rc})")
        os.replace(dst + ".part", dst)
    print(dst)
