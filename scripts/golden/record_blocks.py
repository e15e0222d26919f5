"""Records random blocks of every weight type Hearth runs, with the values
the `gguf` package's numpy dequantizers give for them, for the kernel tests
(crates/engine/src/cpu/tests.rs). Run once: python record_blocks.py OUT.json

Needs `pip install gguf numpy`. The scale fields are set to finite f16
values so that every block is one a quantizer could have written.
"""
import json
import sys

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize

rng = np.random.default_rng(20261201)
ROWS, COLS = 3, 512

# Byte offsets of each block's f16 fields.
HALF_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0], T.IQ4_NL: [0],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208], T.IQ4_XS: [0],
}
SIZES = {T.Q4_0: (32, 18), T.Q4_1: (32, 20), T.Q5_0: (32, 22), T.Q5_1: (32, 24), T.Q8_0: (32, 34), T.IQ4_NL: (32, 18),
         T.Q2_K: (256, 84), T.Q3_K: (256, 110), T.Q4_K: (256, 144), T.Q5_K: (256, 176), T.Q6_K: (256, 210), T.IQ4_XS: (256, 136)}

out = {}
for t, (bs, nbytes) in SIZES.items():
    nblocks = ROWS * COLS // bs
    raw = rng.integers(0, 256, size=(nblocks, nbytes), dtype=np.uint8)
    for off in HALF_FIELDS[t]:
        h = (rng.uniform(0.001, 0.05, size=nblocks) * rng.choice([1, -1], size=nblocks) if t != T.Q8_0 else rng.uniform(0.001, 0.02, size=nblocks)).astype(np.float16)
        if off == 2 and t in (T.Q4_1, T.Q5_1):
            h = rng.uniform(-0.5, 0.5, size=nblocks).astype(np.float16)
        raw[:, off:off + 2] = h.view(np.uint8).reshape(nblocks, 2)
    values = dequantize(raw.reshape(-1), t).astype(np.float32).reshape(-1)
    assert values.size == ROWS * COLS
    out[t.name] = {"rows": ROWS, "cols": COLS, "data": raw.tobytes().hex(), "values": values.tobytes().hex()}

for name, dt in [("F16", np.float16), ("F32", np.float32)]:
    v = rng.standard_normal(ROWS * COLS).astype(dt)
    out[name] = {"rows": ROWS, "cols": COLS, "data": v.tobytes().hex(), "values": v.astype(np.float32).tobytes().hex()}
v = rng.standard_normal(ROWS * COLS).astype(np.float32)
bf = (v.view(np.uint32) >> 16).astype(np.uint16)
out["BF16"] = {"rows": ROWS, "cols": COLS, "data": bf.tobytes().hex(), "values": (bf.astype(np.uint32) << 16).view(np.float32).tobytes().hex()}

# MXFP4 (added later, from its own generator so the cases above stay as
# recorded): one E8M0 exponent byte and 16 bytes of nibbles per block, the
# exponents in a range real quantizers write (2^-15 … 2^0 after halving).
mx = np.random.default_rng(20261204)
nblocks = ROWS * COLS // 32
raw = mx.integers(0, 256, size=(nblocks, 17), dtype=np.uint8)
raw[:, 0] = mx.integers(113, 128, size=nblocks, dtype=np.uint8)
raw[0, 0], raw[1, 0] = 0, 1  # the two subnormal scales
values = dequantize(raw.reshape(-1), T.MXFP4).astype(np.float32).reshape(-1)
out["MXFP4"] = {"rows": ROWS, "cols": COLS, "data": raw.tobytes().hex(), "values": values.tobytes().hex()}

json.dump(out, open(sys.argv[1], "w"), indent=0)
