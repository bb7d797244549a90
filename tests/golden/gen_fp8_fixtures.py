#!/usr/bin/env python3
"""Golden values for FP8 (issue 29, docs/fp8.md): the casts, the scaled GEMM and the delayed-scaling
recipe. The C++ tests (tests/core/float8_test.cpp, tests/ops/scaled_matmul_test.cpp,
tests/amp/fp8_scaling_test.cpp) read the files this script writes; they never need Python.

Regenerate (needs torch, numpy; no safetensors package: the files are written here):

    python3 -m venv /tmp/venv-torch && /tmp/venv-torch/bin/pip install torch numpy
    /tmp/venv-torch/bin/python tests/golden/gen_fp8_fixtures.py

Every file records the torch version in its metadata ("generator"). The output is deterministic.

fixtures/fp8/casts.safetensors.gz (gzip of a safetensors file, mtime 0; 530 KiB raw):
  "<fmt>.to_f32|to_bf16|to_f16"  the 256 codes of fmt (e4m3 = torch.float8_e4m3fn, e5m2 =
      torch.float8_e5m2) in code order, widened by torch's .to().
  "f16.to_<fmt>", "bf16.to_<fmt>"  every one of the 65536 f16 / bf16 bit patterns, in pattern
      order, cast by torch's plain .to(fmt).
  "<src>.to_<fmt>.saturated"  the same inputs through the saturating cast, made as torchao's
      to_fp8_saturated does: x.clamp(-max, max).to(fmt) (the clamp maps ±inf to ±max and keeps NaN).
  "f32.inputs" with "f32.to_<fmt>" and "f32.to_<fmt>.saturated": f32 values around every rounding
      boundary of both formats (each midpoint between neighbouring codes and the f32 values either
      side of it, the overflow thresholds, subnormal boundaries, ±inf, NaNs) plus random bit patterns.

fixtures/fp8/scaled_mm.safetensors: torch._scaled_mm on the CPU. Per case "<case>.a" (M, K) and
  "<case>.b" (K, N) in fp8 (b is passed to _scaled_mm column-major, as it requires; stored row-major
  here), "<case>.scale_a", "<case>.scale_b" (f32 scalars: the scale-inverses, the dequantisation
  factors), "<case>.out" (out_dtype). Metadata "<case>": {"out_dtype": "bf16"|"f32"}.

fixtures/fp8/delayed_scaling.safetensors: Transformer Engine's delayed-scaling update re-implemented
  in float32 numpy from transformer_engine/common/recipe/delayed_scaling.cu (NVIDIA/TransformerEngine
  commit 6b71a0adeedf9ab82c0ed2b179dc419cec2cc789, kernel_bulk: the path TE's PyTorch recipe uses,
  amax_and_scale_update_after_reduction) and current scaling from recipe/recipe_common.cuh (commit
  253317079e2a1d2f7749308e6b50d0ee5088045e, compute_scale_from_amax). Per case: "<case>.amax" (T,)
  the amax recorded at each step, "<case>.scale" / "<case>.scale_inv" (T,) after each step's update,
  "<case>.history" (L,) the history after the last step. Metadata "<case>": format, margin,
  history_len, algo (and for current scaling: epsilon, pow2).
"""
import gzip
import io
import json
import os
import struct
import zlib

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.join(HERE, "fixtures", "fp8")
GENERATOR = f"tests/golden/gen_fp8_fixtures.py with torch {torch.__version__}"

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
FORMATS = {"e4m3": E4M3, "e5m2": E5M2}
FP8_MAX = {"e4m3": 448.0, "e5m2": 57344.0}

_ST = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16", E4M3: "F8_E4M3", E5M2: "F8_E5M2",
       torch.int64: "I64"}


def safetensors_bytes(tensors, metadata):
    """A safetensors file: tensors in the given order, metadata sorted (byte-for-byte reproducible)."""
    header = {"__metadata__": dict(sorted(metadata.items()))}
    chunks, offset = [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous()
        raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": _ST[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(chunks)


def write(path, data, compress=False):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if compress:
        buf = io.BytesIO()
        with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0, compresslevel=9) as g:
            g.write(data)
        data = buf.getvalue()
    with open(path, "wb") as f:
        f.write(data)
    print(f"{os.path.relpath(path, HERE)}: {len(data)} bytes")


def all_16bit(dtype):
    return torch.arange(65536, dtype=torch.int32).to(torch.int16).view(dtype)


def saturated(x, fmt):
    m = FP8_MAX[fmt]
    return x.float().clamp(-m, m).to(FORMATS[fmt])


def f32_boundary_inputs():
    """f32 values at and beside every rounding boundary of both formats, plus random patterns."""
    vals = []
    for dt in (E4M3, E5M2):
        codes = torch.arange(0, 128, dtype=torch.int32).to(torch.uint8).view(dt).float()
        finite = codes[torch.isfinite(codes)].double().sort().values
        mids = ((finite[1:] + finite[:-1]) / 2).float()  # exact in f32
        for m in mids:
            vals += [m, torch.nextafter(m, torch.tensor(float("inf"))), torch.nextafter(m, torch.tensor(0.0))]
        top = finite[-1].item()
        ulp = top - finite[-2].item()
        for v in (top + ulp / 2, top + ulp, 2 * top, top * 1.5):
            t = torch.tensor(v, dtype=torch.float32)
            vals += [t, torch.nextafter(t, torch.tensor(float("inf"))), torch.nextafter(t, torch.tensor(0.0))]
        vals.append((finite[1] / 4).float())  # a quarter of the smallest subnormal
    specials = [0.0, float("inf"), float("nan"), 1e-45, 1e-38, 3.4028234663852886e38, 448.0, 57344.0, 464.0,
                480.0, 61440.0, 65536.0, 2.0**-10, 2.0**-17, 2.0**-9, 2.0**-16]
    x = torch.stack([v.float().reshape(()) if torch.is_tensor(v) else torch.tensor(v, dtype=torch.float32)
                     for v in vals] + [torch.tensor(v, dtype=torch.float32) for v in specials])
    g = torch.Generator().manual_seed(29)
    # Random patterns with exponents across and beyond both formats' ranges (f32 exponents 90..160).
    exp = torch.randint(90, 161, (2048,), generator=g, dtype=torch.int64)
    mant = torch.randint(0, 1 << 23, (2048,), generator=g, dtype=torch.int64)
    rnd = ((exp << 23) | mant).to(torch.int32).view(torch.float32)
    x = torch.cat([x, rnd])
    x = torch.cat([x, -x])
    # A negative NaN as well as the positive one.
    neg_nan = torch.tensor([0xFFC00000 - (1 << 32)], dtype=torch.int32).view(torch.float32)
    return torch.cat([x, neg_nan])


def casts():
    t = {}
    for name, dt in FORMATS.items():
        codes = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(dt)
        t[f"{name}.to_f32"] = codes.to(torch.float32)
        t[f"{name}.to_bf16"] = codes.to(torch.bfloat16)
        t[f"{name}.to_f16"] = codes.to(torch.float16)
    for src, sdt in (("f16", torch.float16), ("bf16", torch.bfloat16)):
        x = all_16bit(sdt)
        for name, dt in FORMATS.items():
            t[f"{src}.to_{name}"] = x.to(dt)
            t[f"{src}.to_{name}.saturated"] = saturated(x, name)
    x = f32_boundary_inputs()
    t["f32.inputs"] = x
    for name, dt in FORMATS.items():
        t[f"f32.to_{name}"] = x.to(dt)
        t[f"f32.to_{name}.saturated"] = saturated(x, name)
    meta = {"generator": GENERATOR,
            "plain": "torch .to(float8_*)",
            "saturated": "x.float().clamp(-max, max).to(float8_*) (torchao to_fp8_saturated)"}
    write(os.path.join(OUT_DIR, "casts.safetensors.gz"), safetensors_bytes(t, meta), compress=True)


def scaled_mm():
    t, meta = {}, {"generator": GENERATOR}
    cases = [
        # name, M, K, N, a fmt, b fmt, out dtype, scale_a, scale_b
        ("e4m3_bf16", 32, 64, 48, "e4m3", "e4m3", torch.bfloat16, 0.0625, 1.5),
        ("e4m3_f32", 16, 32, 16, "e4m3", "e4m3", torch.float32, 0.013671875, 3.0),
        ("e5m2_e4m3_bf16", 16, 48, 32, "e5m2", "e4m3", torch.bfloat16, 2.0**-10, 0.75),
        ("e4m3_e5m2_f32", 8, 16, 24, "e4m3", "e5m2", torch.float32, 0.5, 0.0078125),
        ("odd_bf16", 5, 7, 3, "e4m3", "e4m3", torch.bfloat16, 1.25, 0.3),
        ("long_k_f32", 4, 1024, 8, "e4m3", "e4m3", torch.float32, 1.0, 1.0),
    ]
    for name, M, K, N, fa, fb, odt, sa, sb in cases:
        g = torch.Generator().manual_seed(zlib.crc32(name.encode()))
        a = (torch.randn(M, K, generator=g) * FP8_MAX[fa] / 8).to(FORMATS[fa])
        b = (torch.randn(K, N, generator=g) * FP8_MAX[fb] / 8).to(FORMATS[fb])
        scale_a = torch.tensor(sa, dtype=torch.float32)
        scale_b = torch.tensor(sb, dtype=torch.float32)
        out = torch._scaled_mm(a, b.t().contiguous().t(), scale_a=scale_a, scale_b=scale_b, out_dtype=odt)
        t[f"{name}.a"], t[f"{name}.b"] = a, b
        t[f"{name}.scale_a"], t[f"{name}.scale_b"] = scale_a, scale_b
        t[f"{name}.out"] = out
        meta[name] = json.dumps({"out_dtype": "bf16" if odt == torch.bfloat16 else "f32"})
    write(os.path.join(OUT_DIR, "scaled_mm.safetensors"), safetensors_bytes(t, meta))


# ---- TE's scaling formulas in float32 ----------------------------------------------------------

F32 = np.float32
FLT_MAX = np.finfo(np.float32).max


def te_delayed_update(history, scale, fmt, margin, algo):
    """One call of TE's kernel_bulk for one tensor (no reduction buffer: last_amax = history[0])."""
    length = len(history)
    last = history[0]
    amax = F32(0)
    if last != 0:  # NaN != 0 too: a NaN is rolled in
        old = history.copy()
        for i in range(length):
            a = old[i + 1] if i < length - 1 else last
            amax = F32(np.fmax(amax, a))  # fmaxf: a NaN operand is ignored
            history[i] = a if i > 0 else F32(0)
    if algo == "most_recent":
        amax = last
    scaled_max = F32(F32(FP8_MAX[fmt]) * F32(2.0) ** F32(-margin))
    if np.isfinite(amax) and amax > 0:
        with np.errstate(over="ignore"):
            new_scale = F32(scaled_max / amax)
    else:
        new_scale = scale
    if np.isinf(new_scale):
        new_scale = FLT_MAX
    with np.errstate(divide="ignore"):
        return new_scale, F32(F32(1) / new_scale)


def te_current_scale(amax, fmt, epsilon, pow2):
    """compute_scale_from_amax with value_for_inf = FLT_MAX (an f32 input)."""
    amax, epsilon = F32(amax), F32(epsilon)
    if amax < epsilon:
        amax = F32(epsilon)
    if np.isinf(amax) or amax == 0 or np.isnan(amax):
        return F32(1)
    with np.errstate(over="ignore"):
        scale = F32(F32(FP8_MAX[fmt]) / amax)
    if np.isinf(scale):
        scale = FLT_MAX
    if pow2:
        scale = np.array([scale], dtype=np.float32).view(np.uint32)
        scale = (scale & np.uint32(0xFF800000)).view(np.float32)[0]
    return F32(scale)


def amax_sequence(rng, steps, kind):
    base = np.exp(rng.normal(0.0, 1.0, steps)).astype(np.float32) * F32(3.0)
    if kind == "specials":
        base[5] = 0.0
        base[9] = np.inf
        base[10] = np.nan
        base[17] = 0.0
        base[18] = 0.0
        base[25] = 1e-39   # subnormal: scale overflows to inf, becomes FLT_MAX
        base[30] = 1e38
    if kind == "growth":
        base = (base * np.geomspace(1e-3, 1e4, steps)).astype(np.float32)
    return base


def delayed_scaling():
    t, meta = {}, {"generator": GENERATOR}
    rng = np.random.default_rng(29)
    cases = [
        ("max_e4m3_len16", "e4m3", 0.0, 16, "max", "random", 60),
        ("max_e5m2_len8_margin2", "e5m2", 2.0, 8, "max", "random", 40),
        ("recent_e4m3_len4", "e4m3", 0.0, 4, "most_recent", "random", 30),
        ("max_e4m3_specials", "e4m3", 1.0, 8, "max", "specials", 40),
        ("recent_e5m2_specials", "e5m2", 0.0, 8, "most_recent", "specials", 40),
        ("max_e4m3_len1024_growth", "e4m3", 0.0, 1024, "max", "growth", 200),
        ("max_e4m3_len1", "e4m3", 0.0, 1, "max", "specials", 40),
    ]
    for name, fmt, margin, length, algo, kind, steps in cases:
        amaxes = amax_sequence(rng, steps, kind)
        history = np.zeros(length, dtype=np.float32)
        scale = F32(1)
        scales, scale_invs = [], []
        for a in amaxes:
            history[0] = a  # the step's amax lands in slot 0, as TE's casts write it
            scale, scale_inv = te_delayed_update(history, scale, fmt, margin, algo)
            scales.append(scale)
            scale_invs.append(scale_inv)
        t[f"{name}.amax"] = torch.from_numpy(amaxes.copy())
        t[f"{name}.scale"] = torch.from_numpy(np.array(scales, dtype=np.float32))
        t[f"{name}.scale_inv"] = torch.from_numpy(np.array(scale_invs, dtype=np.float32))
        t[f"{name}.history"] = torch.from_numpy(history.copy())
        meta[name] = json.dumps({"recipe": "delayed", "format": fmt, "margin": margin, "history_len": length,
                                 "algo": algo})
    for name, fmt, eps, pow2, kind in (("current_e4m3", "e4m3", 0.0, False, "specials"),
                                       ("current_e5m2_eps_pow2", "e5m2", 1e-4, True, "specials"),
                                       ("current_e4m3_pow2", "e4m3", 0.0, True, "growth")):
        amaxes = amax_sequence(rng, 40, kind)
        scales = np.array([te_current_scale(a, fmt, eps, pow2) for a in amaxes], dtype=np.float32)
        t[f"{name}.amax"] = torch.from_numpy(amaxes.copy())
        t[f"{name}.scale"] = torch.from_numpy(scales)
        meta[name] = json.dumps({"recipe": "current", "format": fmt, "epsilon": eps, "pow2": pow2})
    write(os.path.join(OUT_DIR, "delayed_scaling.safetensors"), safetensors_bytes(t, meta))


if __name__ == "__main__":
    torch.set_num_threads(1)
    casts()
    scaled_mm()
    delayed_scaling()
