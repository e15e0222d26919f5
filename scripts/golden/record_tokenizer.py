"""Records llama.cpp's token ids for the corpus on a GGUF model.

    python scripts/golden/record_tokenizer.py MODEL.gguf OUT.json

Needs llama-cpp-python (see bench/setup-llamacpp.sh). The output is committed,
so the Rust tests compare against llama.cpp without needing it.
"""
import json
import sys

import llama_cpp
from corpus import corpus

model, out = sys.argv[1], sys.argv[2]
llm = llama_cpp.Llama(model_path=model, vocab_only=True, verbose=False)
rows = []
for text in corpus():
    rows.append({
        "text": text,
        "special": llm.tokenize(text.encode("utf-8"), add_bos=False, special=True),
        "plain": llm.tokenize(text.encode("utf-8"), add_bos=False, special=False),
    })
with open(out, "w", encoding="utf-8") as f:
    # One case per line keeps diffs readable.
    f.write('{"model": %s, "llama_cpp_python": %s, "cases": [\n' % (json.dumps(model.rsplit("/", 1)[-1]), json.dumps(llama_cpp.__version__)))
    f.write(",\n".join(json.dumps(r, ensure_ascii=False) for r in rows))
    f.write("\n]}\n")
print(f"wrote {len(rows)} cases to {out}")
