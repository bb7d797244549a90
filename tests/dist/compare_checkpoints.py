#!/usr/bin/env python3
"""compare_checkpoints.py A B [--tolerance T] [--with-buffers] [--skip SUFFIX,...]: the parameters and
optimizer state of two precis-train checkpoints (safetensors) are bit-identical (or, with
--tolerance, within T absolute, f32 only). BatchNorm running statistics are left out unless
--with-buffers: a data-parallel rank 0 updates them from its own micro-batch, one process
accumulating from each micro-batch in turn (docs/distributed.md). --skip leaves out the entries
ending with the given suffixes too (the caller compares them otherwise)."""
import json
import struct
import sys

SKIP = ("running_mean", "running_var", "num_batches_tracked")


def tensors(path, skip=SKIP):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    out = {}
    for key, info in header.items():
        if key == "__metadata__" or not key.startswith(("model.", "optimizer.")) or (skip and key.endswith(skip)):
            continue
        a, b = info["data_offsets"]
        out[key] = (info["dtype"], body[a:b])
    return out


def main():
    tol = None
    args = sys.argv[1:]
    if "--tolerance" in args:
        i = args.index("--tolerance")
        tol = float(args[i + 1])
        del args[i:i + 2]
    skip = SKIP
    if "--with-buffers" in args:
        args.remove("--with-buffers")
        skip = ()
    if "--skip" in args:
        i = args.index("--skip")
        skip = tuple(skip) + tuple(args[i + 1].split(","))
        del args[i:i + 2]
    a, b = tensors(args[0], skip), tensors(args[1], skip)
    if a.keys() != b.keys():
        print(f"compare: different keys: {sorted(a.keys() ^ b.keys())[:5]}")
        return 1
    differing, worst = [], 0.0
    for key in sorted(a):
        (da, ba), (db, bb) = a[key], b[key]
        if ba == bb:
            continue
        if tol is not None and da == db == "F32":
            fa = struct.unpack(f"<{len(ba) // 4}f", ba)
            fb = struct.unpack(f"<{len(bb) // 4}f", bb)
            diff = max(abs(x - y) for x, y in zip(fa, fb))
            worst = max(worst, diff)
            if diff <= tol:
                continue
        differing.append(key)
    print(f"compare: {len(a)} tensors{' (BatchNorm running statistics excluded)' if skip else ''}, {len(differing)} differ"
          + (f", largest difference {worst:.3g} (tolerance {tol})" if tol is not None else " bitwise"))
    for key in differing[:10]:
        print(f"  differs: {key}")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
