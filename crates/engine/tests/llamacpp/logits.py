"""llama.cpp's logits at every position of a token sequence, for the
engine's tests against llama.cpp on random-weight files.

    PYTHON logits.py MODEL.gguf IDS.json OUT.f32 [--steps]

Feeds the ids teacher-forced in chunks of 512 (as Hearth prefills), or one
per pass with `--steps` (as decode steps run), with
llama.cpp's defaults (f16 KV cache, repacked weights), writes the logits as
little-endian f32 `[len(ids), vocab]` to OUT, and prints one JSON line:
`{"vocab": N, "avx512": bool}` (which build of llama.cpp answered).
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "bench"))
import llamacpp_ref  # noqa: E402
import llama_cpp  # noqa: E402

model, ids_path, out = sys.argv[1:4]
steps = "--steps" in sys.argv[4:]
ids = json.load(open(ids_path))
if steps:
    llm = llama_cpp.Llama(model_path=model, n_ctx=len(ids) + 16, n_threads=2, n_threads_batch=2, n_batch=1, n_ubatch=1,
                          verbose=False, logits_all=True, **llamacpp_ref.FILE_YARN)
else:
    llm = llamacpp_ref.load(model, threads=2, n_ctx=len(ids) + 16, logits_all=True)
llm.reset()
llm.eval(ids)
np.asarray(llm.scores[: len(ids)], dtype="<f4").tofile(out)
info = llama_cpp.llama_cpp.llama_print_system_info().decode()
print(json.dumps({"vocab": llm.n_vocab(), "avx512": "AVX512 = 1" in info}))
