"""llama.cpp's token ids for texts, from a GGUF file's vocabulary alone.

    PYTHON token_ids.py MODEL.gguf TEXTS.json OUT.json

TEXTS.json is a list of strings. OUT.json gets, for each, the ids without
and with special tokens parsed: [[plain, special], ...].
"""
import json
import sys

import llama_cpp

model, texts_path, out = sys.argv[1:4]
llm = llama_cpp.Llama(model_path=model, vocab_only=True, verbose=False)
texts = json.load(open(texts_path, encoding="utf-8"))
ids = [[llm.tokenize(t.encode("utf-8"), add_bos=False, special=s) for s in (False, True)] for t in texts]
json.dump(ids, open(out, "w"))
