"""Records llama.cpp's own dot products (its x86 build's `ggml_vec_dot_*`,
called through ctypes on the library llama-cpp-python installs) for the
random blocks of record_blocks.py, with activations rounded by its own
`quantize_row_q8_*`, so the kernel tests can hold Hearth to llama.cpp's
results bit for bit without needing llama.cpp.

    $(bench/setup-llamacpp.sh)/bin/python scripts/golden/record_dots.py \
        $VENV/lib/python3.11/site-packages/llama_cpp/lib/libggml-cpu.so \
        crates/engine/tests/data/blocks.json crates/engine/tests/data/llama_dots.json
"""
import ctypes, json, sys, numpy as np
lib = ctypes.CDLL(sys.argv[1])
lib.ggml_cpu_init()
d = json.load(open(sys.argv[2]))
rng = np.random.default_rng(5)
ACT = {"Q4_0": ("q8_0", 34, 32), "Q4_1": ("q8_1", 36, 32), "Q5_0": ("q8_0", 34, 32), "Q5_1": ("q8_1", 36, 32), "Q8_0": ("q8_0", 34, 32),
       "IQ4_NL": ("q8_0", 34, 32), "Q2_K": ("q8_K", 292, 256), "Q3_K": ("q8_K", 292, 256), "Q4_K": ("q8_K", 292, 256),
       "Q5_K": ("q8_K", 292, 256), "Q6_K": ("q8_K", 292, 256), "IQ4_XS": ("q8_K", 292, 256),
       "MXFP4": ("q8_0", 34, 32)}
out = {}
for name, (act, abytes, ablock) in ACT.items():
    c = d[name]; rows, cols = c["rows"], c["cols"]
    w = np.frombuffer(bytes.fromhex(c["data"]), dtype=np.uint8)
    x = rng.uniform(-1, 1, size=cols).astype(np.float32)
    y = np.zeros(cols // ablock * abytes, dtype=np.uint8)
    getattr(lib, "quantize_row_" + act)(x.ctypes.data_as(ctypes.c_void_p), y.ctypes.data_as(ctypes.c_void_p), ctypes.c_int64(cols))
    f = getattr(lib, "ggml_vec_dot_%s_%s" % (name.lower().replace("_k", "_K"), act))
    row_bytes = len(w) // rows
    res = []
    for r in range(rows):
        s = ctypes.c_float()
        wr = np.ascontiguousarray(w[r * row_bytes:(r + 1) * row_bytes])
        f(ctypes.c_int(cols), ctypes.byref(s), ctypes.c_size_t(0), wr.ctypes.data_as(ctypes.c_void_p), ctypes.c_size_t(0), y.ctypes.data_as(ctypes.c_void_p), ctypes.c_size_t(0), ctypes.c_int(1))
        res.append(s.value)
    out[name] = {"x": x.tobytes().hex(), "dots": np.array(res, dtype=np.float32).tobytes().hex()}

json.dump(out, open(sys.argv[3], "w"), indent=0)
