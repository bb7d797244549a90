#!/usr/bin/env python3
"""Writes tests/golden/fixtures/safetensors_sample.safetensors and its expected values
(safetensors_sample.json) for tests/tensor/safetensors_test.cpp.

Needs `pip install safetensors numpy` (only to regenerate; the C++ tests read the committed files).

The file is written by the reference implementation (safetensors.numpy.save) for every dtype numpy
has. numpy has no bfloat16, and safetensors' numpy API cannot write one, so the BF16 tensor is added
through the low-level format: its raw uint16 bits are appended to the data buffer and an entry is
added to the reference writer's header (re-padded with spaces to a multiple of 8, as the reference
does). The result is then re-opened with safetensors.safe_open, whose Rust reader validates the
whole header (dtypes, shapes against offsets, full coverage of the buffer), and every non-BF16
tensor is compared with what was written.

Run from anywhere: python3 tests/golden/gen_safetensors_fixture.py
"""
import json
import math
import os
import struct

import numpy as np
from safetensors import safe_open
from safetensors.numpy import save

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.join(HERE, "fixtures")
OUT_FILE = os.path.join(OUT_DIR, "safetensors_sample.safetensors")
OUT_JSON = os.path.join(OUT_DIR, "safetensors_sample.json")

METADATA = {"format": "pt", "producer": "gen_safetensors_fixture.py", "note": "h\u00e9llo \u2713 \"quoted\""}


def numpy_tensors():
    return {
        "f64.matrix": np.array([[0.0, -0.0, math.pi], [1e-300, -1.5e300, 2.0**-1074]], dtype=np.float64),
        "f32.vector": np.array([1.5, -np.inf, np.inf, np.nan, 3.4028234663852886e38, 1e-45], dtype=np.float32),
        "f32.scalar": np.array(-7.25, dtype=np.float32),
        "f32.empty": np.zeros((0, 3), dtype=np.float32),
        "f16.matrix": np.array([[65504.0, -2.5], [6e-8, 0.099975586], [np.inf, -0.0]], dtype=np.float16),
        "i64.vector": np.array([-(2**63), 2**63 - 1, 0], dtype=np.int64),
        "i32.matrix": np.array([[-(2**31), 2**31 - 1], [7, -7]], dtype=np.int32),
        "bool.vector": np.array([True, False, False, True, True], dtype=np.bool_),
        "layer.0.weight": np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 8,
    }


# bf16 as raw bits: 1.0, -2.0, +inf, the smallest subnormal, 3.140625 (pi rounded), NaN.
BF16_NAME = "bf16.matrix"
BF16_BITS = np.array([[0x3F80, 0xC000, 0x7F80], [0x0001, 0x4049, 0x7FC0]], dtype="<u2")


def bf16_to_float(bits):
    return np.array(bits, dtype="<u4").__lshift__(16).view(np.float32)


def float_text(x):
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return repr(x)  # shortest text that round-trips the double exactly


def add_bf16(reference_bytes):
    n = struct.unpack("<Q", reference_bytes[:8])[0]
    header = json.loads(reference_bytes[8 : 8 + n])
    data = reference_bytes[8 + n :]
    raw = BF16_BITS.tobytes()
    # The reference writer emits metadata in hash order, which changes between runs: sort it so the
    # committed fixture is reproducible.
    header["__metadata__"] = dict(sorted(header["__metadata__"].items()))
    header[BF16_NAME] = {"dtype": "BF16", "shape": list(BF16_BITS.shape), "data_offsets": [len(data), len(data) + len(raw)]}
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data + raw, [k for k in header if k != "__metadata__"]


def expected_entry(dtype, shape, values, bits=None):
    e = {"dtype": dtype, "shape": list(shape)}
    flat = np.asarray(values).reshape(-1)
    if dtype in ("F64", "F32", "F16", "BF16"):
        e["values"] = [float_text(v) for v in flat]
    elif dtype == "BOOL":
        e["values"] = [bool(v) for v in flat]
    else:
        e["values"] = [int(v) for v in flat]
    if bits is not None:
        e["bits"] = [int(b) for b in np.asarray(bits).reshape(-1)]
    return e


def main():
    tensors = numpy_tensors()
    blob, order = add_bf16(save(tensors, metadata=METADATA))
    os.makedirs(OUT_DIR, exist_ok=True)
    with open(OUT_FILE, "wb") as f:
        f.write(blob)

    # Validate with the reference reader.
    with safe_open(OUT_FILE, framework="numpy") as f:
        assert f.metadata() == METADATA, f.metadata()
        assert set(f.keys()) == set(tensors) | {BF16_NAME}
        for name, want in tensors.items():
            got = f.get_tensor(name)
            assert got.dtype == want.dtype and got.shape == want.shape, name
            assert np.array_equal(got, want, equal_nan=want.dtype.kind == "f"), name

    names = {np.float64: "F64", np.float32: "F32", np.float16: "F16", np.int64: "I64", np.int32: "I32", np.bool_: "BOOL"}
    expected = {"metadata": METADATA, "header_order": order, "tensors": {}}
    for name, t in tensors.items():
        dt = names[t.dtype.type]
        bits = t.view(np.uint16) if dt == "F16" else None
        expected["tensors"][name] = expected_entry(dt, t.shape, t, bits)
    expected["tensors"][BF16_NAME] = expected_entry("BF16", BF16_BITS.shape, bf16_to_float(BF16_BITS), BF16_BITS)
    with open(OUT_JSON, "w") as f:
        json.dump(expected, f, indent=1)
        f.write("\n")
    print(f"wrote {OUT_FILE} ({len(blob)} bytes) and {OUT_JSON}")


if __name__ == "__main__":
    main()
