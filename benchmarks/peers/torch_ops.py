#!/usr/bin/env python3
"""PyTorch peer of `precis-bench ops`: the same cases (forward + backward, f32 unless a case says
bf16, CPU) under the same case names, written as the same JSON records with "impl": "torch".

    python benchmarks/peers/torch_ops.py [--threads 2] [--repeat 200] [--min-time 0.5] [--json FILE]
                                         [--cases SUBSTRING]

Each repetition runs the op and torch.autograd.grad of its inputs and parameters for a fixed
upstream gradient (for a scalar loss: 1), like precis-bench's autograd::grad. Timing as
precis-bench: 2 untimed warm-up runs, then repetitions until --min-time seconds and at least 5
repetitions, or --repeat repetitions; median and min in ms.

glibc returns freed memory to the system by default, which costs PyTorch its time in page faults
on these machines (docs: /work/shared/MACHINE.md); the peer is measured as there, with
GLIBC_TUNABLES=glibc.malloc.mmap_threshold=4294967295:glibc.malloc.trim_threshold=68719476736. The
script re-executes itself with that setting unless it is already set or --no-malloc-tuning is
given.

Compare with benchmarks/report.py PRECIS.json TORCH.json.
"""
import os
import sys

from peer_common import peer_arg_parser, reexec_with_malloc_tuning, time_step, write_records

BATCH = 64
# Every distinct ResNet-18 (CIFAR layout) conv shape: (cin, cout, k, stride, input hw).
CONV_SHAPES = [(3, 64, 3, 1, 32), (64, 64, 3, 1, 32), (64, 128, 3, 2, 32), (128, 128, 3, 1, 16),
               (64, 128, 1, 2, 32), (128, 256, 3, 2, 16), (256, 256, 3, 1, 8), (128, 256, 1, 2, 16),
               (256, 512, 3, 2, 8), (512, 512, 3, 1, 4), (256, 512, 1, 2, 8)]


def make_cases(torch, F):
    """(name, flops, maker, is_conv[, dtype]); maker() allocates the inputs and returns the timed step;
    dtype (default f32) labels the record, bf16 for a case run under torch.autocast."""

    def step(forward, wrt, grad_out=None):
        def run():
            y = forward()
            torch.autograd.grad(y, wrt, grad_out)
        return run

    def leaf(gen, *shape, scale=1.0):
        t = torch.randn(*shape, generator=gen) * scale
        return t.requires_grad_(True)

    cases = []
    # Contiguous (NCHW), then channels-last activations and weight (torch.channels_last), as
    # precis's "channels_last" cases.
    cl = torch.channels_last
    for prefix, fmt in (("", torch.contiguous_format), ("channels_last ", cl)):
        for cin, cout, k, s, hw in CONV_SHAPES:
            pad = 1 if k == 3 else 0
            ohw = (hw + 2 * pad - k) // s + 1
            flops = 3.0 * 2.0 * BATCH * cout * ohw * ohw * cin * k * k

            def make(cin=cin, cout=cout, k=k, s=s, hw=hw, pad=pad, ohw=ohw, fmt=fmt):
                g = torch.Generator().manual_seed(1)
                x = leaf(g, BATCH, cin, hw, hw).detach().contiguous(memory_format=fmt).requires_grad_(True)
                w = leaf(g, cout, cin, k, k, scale=0.05).detach().contiguous(memory_format=fmt).requires_grad_(True)
                gy = torch.randn(BATCH, cout, ohw, ohw, generator=g).contiguous(memory_format=fmt)
                return step(lambda: F.conv2d(x, w, None, s, pad), [x, w], gy)
            cases.append((f"{prefix}conv2d {cin}->{cout} k{k} s{s} {hw}x{hw}", flops, make, True))

    for fmt in (torch.contiguous_format, cl):
        for c, hw in [(64, 32), (128, 16), (256, 8), (512, 4)]:
            def make(c=c, hw=hw, fmt=fmt):
                g = torch.Generator().manual_seed(2)
                x, w, b = leaf(g, BATCH, c, hw, hw), leaf(g, c), leaf(g, c)
                x = x.detach().contiguous(memory_format=fmt).requires_grad_(True)
                rm, rv = torch.zeros(c), torch.ones(c)
                gy = torch.randn(BATCH, c, hw, hw, generator=g).contiguous(memory_format=fmt)
                return step(lambda: F.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5), [x, w, b], gy)
            prefix = "channels_last " if fmt == cl else ""
            cases.append((f"{prefix}batch_norm {BATCH}x{c}x{hw}x{hw}", 0.0, make, False))

    for fmt in (torch.contiguous_format, cl):
        for mode in ("nearest", "bilinear"):
            def make(mode=mode, fmt=fmt):
                g = torch.Generator().manual_seed(4)
                x = leaf(g, BATCH, 64, 32, 32).detach().contiguous(memory_format=fmt).requires_grad_(True)
                gy = torch.randn(BATCH, 64, 64, 64, generator=g).contiguous(memory_format=fmt)
                return step(lambda: F.interpolate(x, scale_factor=2, mode=mode), [x], gy)
            prefix = "channels_last " if fmt == cl else ""
            cases.append((f"{prefix}interpolate {mode} x2 {BATCH}x64x32x32", 0.0, make, False))

    def make_layer_norm():
        g = torch.Generator().manual_seed(3)
        x, w, b = leaf(g, 2048, 256), leaf(g, 256), leaf(g, 256)
        gy = torch.randn(2048, 256, generator=g)
        return step(lambda: F.layer_norm(x, [256], w, b, 1e-12), [x, w, b], gy)
    cases.append(("layer_norm 2048x256", 0.0, make_layer_norm, False))

    def make_softmax():
        g = torch.Generator().manual_seed(4)
        x = leaf(g, 16, 4, 128, 128)
        gy = torch.randn(16, 4, 128, 128, generator=g)
        return step(lambda: F.softmax(x, dim=-1), [x], gy)
    cases.append(("softmax 16x4x128x128", 0.0, make_softmax, False))

    def make_cross_entropy():
        g = torch.Generator().manual_seed(5)
        logits = leaf(g, 2048, 30522)
        target = torch.randint(0, 30522, (2048,), generator=g)
        return step(lambda: F.cross_entropy(logits, target), [logits])
    cases.append(("cross_entropy 2048x30522", 0.0, make_cross_entropy, False))

    attention_flops = 3.0 * 4.0 * 16 * 4 * 128 * 128 * 64
    for masked in (False, True):
        def make(masked=masked):
            g = torch.Generator().manual_seed(6)
            q, k, v = (leaf(g, 16, 4, 128, 64) for _ in range(3))
            gy = torch.randn(16, 4, 128, 64, generator=g)
            mask = None
            if masked:  # (B, 1, 1, L) key padding, true = attend; sample b pads its last 4·(b % 8)
                lengths = torch.tensor([128 - 4 * (b % 8) for b in range(16)])
                mask = (torch.arange(128)[None, :] < lengths[:, None]).view(16, 1, 1, 128)
            return step(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask), [q, k, v], gy)
        name = "attention 16x4x128x64 padding mask" if masked else "attention 16x4x128x64"
        cases.append((name, attention_flops, make, False))

    # Element-wise work across the output's layout (forward only), as precis-bench's layout cases.
    def layout(name, expr, *shapes):
        def make():
            ts = [torch.randn(*s) for s in shapes]
            return lambda: expr(*ts)
        cases.append((name, 0.0, make, False))
    layout("layout: transpose copy 2048x2048", lambda a: a.t().contiguous(), (2048, 2048))
    layout("layout: add contiguous + transposed 2048x2048", lambda a, b: a + b.t(), (2048, 2048), (2048, 2048))
    layout("layout: add two transposed 2048x2048", lambda a, b: a.t() + b.t(), (2048, 2048), (2048, 2048))
    layout("layout: NCHW to NHWC copy 64x64x32x32", lambda x: x.permute(0, 2, 3, 1).contiguous(), (64, 64, 32, 32))

    # The per-op front-end on 64 values, 100 calls a repetition, and one large gelu, as
    # precis-bench's 'elementwise:' cases.
    def make_tanh():
        x = torch.randn(64)
        def run():
            for _ in range(100):
                torch.tanh(x)
        return run
    cases.append(("elementwise: 100x tanh 64 forward", 0.0, make_tanh, False))

    def make_repeated(fn, n_inputs, seed):
        def make():
            g = torch.Generator().manual_seed(seed)
            xs = [leaf(g, 64) for _ in range(n_inputs)]
            gy = torch.randn(64, generator=g)
            def run():
                for _ in range(100):
                    torch.autograd.grad(fn(*xs), xs, gy)
            return run
        return make
    cases.append(("elementwise: 100x exp 64 forward+backward", 0.0, make_repeated(torch.exp, 1, 7), False))
    cases.append(("elementwise: 100x mul 64 forward+backward", 0.0, make_repeated(torch.mul, 2, 9), False))

    def make_gelu():
        g = torch.Generator().manual_seed(8)
        x = leaf(g, 1024, 1024)
        gy = torch.randn(1024, 1024, generator=g)
        return step(lambda: F.gelu(x), [x], gy)
    cases.append(("elementwise: gelu 1024x1024", 0.0, make_gelu, False))

    # BERT-mini's decoder and loss over all 2048 tokens, as precis-bench's 'linear_cross_entropy'
    # cases (there one op): f32, and bf16 = torch.autocast over fp32 leaves.
    for dtype in ("f32", "bf16"):
        def make_decoder_loss(dtype=dtype):
            g = torch.Generator().manual_seed(11)
            x, w, b = leaf(g, 2048, 256), leaf(g, 30522, 256, scale=0.05), leaf(g, 30522)
            target = torch.randint(0, 30522, (2048,), generator=g)

            def forward():
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bf16"):
                    return F.cross_entropy(F.linear(x, w, b), target)
            return step(forward, [x, w, b])
        cases.append(("linear_cross_entropy 2048x256->30522", 6.0 * 2048 * 256 * 30522, make_decoder_loss, False,
                      dtype))

    # BERT-mini's intermediate layer, as precis-bench's 'linear_gelu' case (there one op).
    def make_linear_gelu():
        g = torch.Generator().manual_seed(10)
        x, w, b = leaf(g, 2048, 256), leaf(g, 1024, 256, scale=0.0625), leaf(g, 1024, scale=0.1)
        gy = torch.randn(2048, 1024, generator=g)
        return step(lambda: F.gelu(F.linear(x, w, b)), [x, w, b], gy)
    cases.append(("linear_gelu 2048x256->1024", 6.0 * 2048 * 256 * 1024, make_linear_gelu, False))
    return cases


def main():
    p = peer_arg_parser(__doc__)
    args = p.parse_args()

    reexec_with_malloc_tuning(args.no_malloc_tuning)

    import torch
    import torch.nn.functional as F

    threads = [int(t) for t in args.threads.split(",")]
    records = []
    print(f"torch {torch.__version__}, GLIBC_TUNABLES={os.environ.get('GLIBC_TUNABLES', '')}", file=sys.stderr)
    for name, flops, make, _, *rest in make_cases(torch, F):
        dtype = rest[0] if rest else "f32"
        if args.cases not in f"{name} {dtype}":
            continue
        run = make()
        for n in threads:
            torch.set_num_threads(n)
            median, best, reps = time_step(run, args.repeat, args.min_time)
            records.append({"suite": "ops", "case": name, "impl": "torch", "dtype": dtype, "threads": n,
                            "median_ms": round(median, 4), "min_ms": round(best, 4),
                            "gflops": round(flops / (median * 1e6), 2) if flops else 0.0, "reps": reps})
            print(f"{name + ' ' + dtype:40s} {n} threads  median {median:9.3f} ms  min {best:9.3f} ms", file=sys.stderr)
        del run
    for n in threads:
        conv = [r for r in records if r["threads"] == n and r["case"].startswith("conv2d ")]
        if not conv:
            continue
        median = sum(r["median_ms"] for r in conv)
        flops = sum(r["gflops"] * r["median_ms"] * 1e6 for r in conv)
        records.append({"suite": "ops", "case": "resnet18 conv total", "impl": "torch", "dtype": "f32", "threads": n,
                        "median_ms": round(median, 4), "min_ms": round(sum(r["min_ms"] for r in conv), 4),
                        "gflops": round(flops / (median * 1e6), 2), "reps": min(r["reps"] for r in conv)})
    write_records(records, args.json)


if __name__ == "__main__":
    main()
