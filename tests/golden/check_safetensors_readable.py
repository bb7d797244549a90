#!/usr/bin/env python3
"""Checks that a file written by precis (save_safetensors) is readable by the reference
implementation, and prints its metadata and tensors.

    python3 tests/golden/check_safetensors_readable.py FILE

Needs `pip install safetensors numpy`. Not run by ctest. safe_open validates the whole header with
the reference (Rust) reader; tensors are then read through its numpy API, except BF16, which numpy
lacks: those are read as raw little-endian uint16 from the offsets the reference reader accepted and
widened to float32 for printing. Exits non-zero when the file is rejected.
"""
import json
import struct
import sys

import numpy as np
from safetensors import safe_open


def main(path):
    with open(path, "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8 : 8 + n])
    print(f"{path}: {len(blob)} bytes, header {n} bytes (multiple of 8: {n % 8 == 0})")
    with safe_open(path, framework="numpy") as f:
        print("metadata:", f.metadata())
        for name in header:
            if name == "__metadata__":
                continue
            info = header[name]
            if info["dtype"] == "BF16":
                b, e = info["data_offsets"]
                raw = np.frombuffer(blob[8 + n + b : 8 + n + e], dtype="<u2")
                t = (raw.astype("<u4") << 16).view(np.float32).reshape(info["shape"])
                kind = "BF16 (raw bits widened to float32)"
            else:
                t = f.get_tensor(name)
                kind = str(t.dtype)
            print(f"{name}: {kind} shape={list(t.shape)} offsets={info['data_offsets']}")
            print("   ", np.array2string(np.asarray(t), threshold=20).replace("\n", "\n    "))
    print("OK: readable by safetensors")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
