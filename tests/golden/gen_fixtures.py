#!/usr/bin/env python3
"""Golden values from PyTorch for the neural-network ops, one ResNet BasicBlock and one BERT
encoder layer. The C++ tests (tests/ops/golden_test.cpp, tests/ops/golden_blocks_test.cpp) read
the files this script writes; they never need Python.

Regenerate (needs torch and safetensors, e.g. `pip install torch safetensors numpy`):

    /path/to/python tests/golden/gen_fixtures.py

It rewrites tests/golden/fixtures/ops/<op>.safetensors and tests/golden/fixtures/blocks/*.safetensors
and prints, per case, how far PyTorch's own f32 run lands from the f64 reference. The output is
deterministic: every case draws from its own generator seeded by a CRC of its name (adding a case
never changes another), torch runs single-threaded with deterministic algorithms, and the files are
written by a small writer here with a fixed header order (the reference writer orders metadata by
hash), then re-read and checked with safetensors.safe_open.

File layout (one file per op, several cases per file):
  tensors   "<case>.<role>": inputs under their PyTorch argument names ("input", "weight",
            "target", "running_mean", ...), "out" (the output; "indices", "running_mean_after",
            ... for further outputs), "grad_out" (the fixed random upstream gradient of "out"),
            and "grad.<name>" (d(sum(out * grad_out)) / d(name)) for every differentiable input.
  metadata  "<case>": a JSON object with the call's arguments (PyTorch names) plus
            "inputs" (argument tensors in call order), "grads" (names with a grad.<name> entry),
            "outputs" (output roles) and "torch_f32_err" (the worst error of PyTorch's own f32 run
            against the f64 reference, in units of the f32 tolerance rtol=1e-5, atol=1e-6; < 1
            means PyTorch f32 passes the f32 comparison the C++ tests make).
            "generator": this script and the torch version.

Precision: inputs and parameters are drawn in f64 and rounded to values exactly representable in
f32 (so one fixture serves both dtypes); the reference outputs and gradients are computed in f64.
A test runs the op in f64 and compares with the f64 tolerance, and runs it on the inputs cast to
f32 and compares with the f32 tolerance against the same f64 reference.

Blocks (tests/golden/fixtures/blocks/):
  resnet_basic_block.safetensors  BasicBlock(4 -> 8, stride 2) with a 1x1-conv + BN downsample,
      train mode, input (2, 4, 8, 8). Its state_dict under PyTorch names (conv1.weight,
      bn1.weight, bn1.bias, bn1.running_mean, bn1.running_var, bn1.num_batches_tracked, ...,
      downsample.0.weight, downsample.1.*) as it was before the forward pass; "after.<buffer>" for
      the running statistics after it; "input", "out", "grad_out", "grad.input" and
      "grad.<parameter>" for every parameter.
  bert_layer.safetensors  one BERT encoder layer (Hugging Face BertLayer layout: post-LN, exact
      erf GELU, LayerNorm eps 1e-12, dropout 0), hidden 32, 4 heads, intermediate 64, batch 2,
      seq 8, with attention.self.query.weight ... output.LayerNorm.bias. "attention_mask" (i64,
      (2, 8), 1 = attend, 0 = padding) becomes the additive mask (1 - mask) * -10000 over the keys,
      shaped (B, 1, 1, L), as BERT does. "input" (hidden states), "out", "grad_out", "grad.input",
      "grad.<parameter>".
"""
import copy
import json
import os

import torch
import torch.nn.functional as F

from golden_common import F64, BasicBlock, BertLayer, generator, randn, round_state, uniform, write_safetensors

HERE = os.path.dirname(os.path.abspath(__file__))
OPS_DIR = os.path.join(HERE, "fixtures", "ops")
BLOCKS_DIR = os.path.join(HERE, "fixtures", "blocks")

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)

def f32_err(actual, expected, rtol=1e-5, atol=1e-6):
    """max |a - e| / (atol + rtol |e|): the measure tests/support/tensor_testing.cpp uses."""
    a, e = actual.detach().double(), expected.detach().double()
    if a.numel() == 0:
        return 0.0
    both_nan = torch.isnan(a) & torch.isnan(e)
    r = ((a - e).abs() / (atol + rtol * e.abs())).masked_fill(both_nan, 0)
    return float(r.max())


# ---- one op file ---------------------------------------------------------------------------

class OpFile:
    def __init__(self, op):
        self.op, self.tensors, self.meta = op, {}, {}

    def case(self, name, fn, inputs, grads=(), args=None):
        """Runs fn(**inputs) -> {"out": ..., other outputs} in f64 and in f32, stores inputs,
        outputs, the upstream gradient and the gradients of `grads` under "<name>.<role>"."""
        assert name not in self.meta, name
        args = dict(args or {})
        g = generator(f"{self.op}/{name}/grad_out")

        def run(dtype):
            ins = {}
            for k, v in inputs.items():
                t = v.clone()
                if t.is_floating_point():
                    t = t.to(dtype)
                ins[k] = t.requires_grad_(k in grads)
            res = fn(**ins)
            return ins, res

        ins, res = run(F64)
        out = res["out"]
        grad_out = randn(g, *out.shape)
        gs = torch.autograd.grad(out, [ins[k] for k in grads], grad_out) if grads else []
        ins32, res32 = run(torch.float32)
        gs32 = torch.autograd.grad(res32["out"], [ins32[k] for k in grads], grad_out.float()) if grads else []
        err = max([f32_err(res32[k], res[k]) for k in res if res[k].is_floating_point()] +
                  [f32_err(a, b) for a, b in zip(gs32, gs)] + [0.0])

        for k, v in inputs.items():
            self.tensors[f"{name}.{k}"] = v
        for k, v in res.items():
            self.tensors[f"{name}.{k}"] = v.detach()
        self.tensors[f"{name}.grad_out"] = grad_out
        for k, gv in zip(grads, gs):
            self.tensors[f"{name}.grad.{k}"] = gv
        args.update({"inputs": list(inputs), "grads": list(grads), "outputs": list(res),
                     "torch_f32_err": round(err, 3)})
        self.meta[name] = json.dumps(args, separators=(",", ":"))
        print(f"  {self.op}/{name}: torch f32 err {err:.3f}")

    def write(self):
        meta = dict(self.meta)
        meta["generator"] = f"tests/golden/gen_fixtures.py, torch {torch.__version__}"
        return write_safetensors(os.path.join(OPS_DIR, f"{self.op}.safetensors"), self.tensors, meta)


def pair(v):
    return list(v) if isinstance(v, (tuple, list)) else [v, v]


# ---- the ops ---------------------------------------------------------------------------------

def gen_conv2d():
    fx = OpFile("conv2d")
    configs = [
        # name, N, Cin, H, W, Cout, kernel, stride, padding, dilation, groups, bias
        ("basic", 2, 3, 7, 7, 4, (3, 3), 1, 0, 1, 1, True),
        ("stride2_pad1", 2, 4, 8, 8, 6, (3, 3), 2, 1, 1, 1, False),
        ("dilation2", 1, 2, 9, 9, 3, (3, 3), 1, 2, 2, 1, True),
        ("groups2", 2, 4, 6, 6, 6, (3, 3), (1, 2), 1, 1, 2, True),
        ("depthwise", 1, 4, 5, 5, 4, (3, 3), 1, 1, 1, 4, False),
        ("pointwise_stride2", 2, 4, 8, 8, 8, (1, 1), 2, 0, 1, 1, False),
        ("rect_asym", 1, 2, 6, 7, 3, (2, 3), (2, 1), (1, 0), (1, 2), 1, True),
    ]
    for name, n, cin, h, w, cout, k, stride, padding, dilation, groups, bias in configs:
        g = generator(f"conv2d/{name}")
        inputs = {"input": randn(g, n, cin, h, w), "weight": randn(g, cout, cin // groups, *k, scale=0.5)}
        if bias:
            inputs["bias"] = randn(g, cout)
        args = {"stride": pair(stride), "padding": pair(padding), "dilation": pair(dilation), "groups": groups,
                "bias": bias}

        def fn(input, weight, bias=None, a=args):
            return {"out": F.conv2d(input, weight, bias, a["stride"], a["padding"], a["dilation"], a["groups"])}
        fx.case(name, fn, inputs, grads=list(inputs), args=args)
    return fx


def gen_conv1d():
    fx = OpFile("conv1d")
    configs = [
        # name, N, Cin, L, Cout, kernel, stride, padding, dilation, groups, bias
        ("basic", 2, 3, 11, 4, 3, 1, 0, 1, 1, True),
        ("stride2_pad1", 2, 4, 16, 6, 5, 2, 2, 1, 1, False),
        ("dilation2_groups2", 1, 4, 12, 6, 3, 1, 2, 2, 2, True),
        ("depthwise", 2, 4, 9, 4, 3, 1, 1, 1, 4, False),
    ]
    for name, n, cin, length, cout, k, stride, padding, dilation, groups, bias in configs:
        g = generator(f"conv1d/{name}")
        inputs = {"input": randn(g, n, cin, length), "weight": randn(g, cout, cin // groups, k, scale=0.5)}
        if bias:
            inputs["bias"] = randn(g, cout)
        args = {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups, "bias": bias}

        def fn(input, weight, bias=None, a=args):
            return {"out": F.conv1d(input, weight, bias, a["stride"], a["padding"], a["dilation"], a["groups"])}
        fx.case(name, fn, inputs, grads=list(inputs), args=args)
    return fx


def gen_conv_transpose2d():
    fx = OpFile("conv_transpose2d")
    configs = [
        # name, N, Cin, H, W, Cout, kernel, stride, padding, output_padding, groups, dilation, bias
        ("basic", 2, 3, 5, 5, 4, (3, 3), 1, 0, 0, 1, 1, True),
        ("upsample2", 2, 4, 4, 4, 3, (4, 4), 2, 1, 0, 1, 1, False),      # DCGAN's k4 s2 p1
        ("stride2_outpad1", 1, 4, 4, 5, 2, (3, 3), 2, 1, 1, 1, 1, True),  # U-Net's k3 s2 p1 op1
        ("groups2_dilation2", 2, 4, 4, 4, 6, (3, 3), 1, 1, 0, 2, 2, True),
        ("rect_asym", 1, 2, 3, 4, 3, (2, 3), (2, 1), (1, 0), (1, 0), 1, (1, 2), True),
    ]
    for name, n, cin, h, w, cout, k, stride, padding, output_padding, groups, dilation, bias in configs:
        g = generator(f"conv_transpose2d/{name}")
        inputs = {"input": randn(g, n, cin, h, w), "weight": randn(g, cin, cout // groups, *k, scale=0.5)}
        if bias:
            inputs["bias"] = randn(g, cout)
        args = {"stride": pair(stride), "padding": pair(padding), "output_padding": pair(output_padding),
                "groups": groups, "dilation": pair(dilation), "bias": bias}

        def fn(input, weight, bias=None, a=args):
            return {"out": F.conv_transpose2d(input, weight, bias, a["stride"], a["padding"], a["output_padding"],
                                              a["groups"], a["dilation"])}
        fx.case(name, fn, inputs, grads=list(inputs), args=args)
    return fx


def gen_max_pool2d():
    fx = OpFile("max_pool2d")
    configs = [  # name, shape, kernel, stride, padding, dilation, ceil_mode
        ("k2s2", (2, 3, 8, 8), 2, 2, 0, 1, False),
        ("k3s2p1", (2, 3, 9, 9), 3, 2, 1, 1, False),  # the ResNet stem pool
        ("k3s1_overlap", (1, 2, 6, 5), 3, 1, 0, 1, False),
        ("rect_ceil", (1, 2, 7, 8), (2, 3), (2, 2), (1, 1), 1, True),
        ("dilation2", (1, 2, 9, 9), 3, 2, 1, 2, False),
        # ceil mode with a window longer than the padded input: one output (PyTorch's rounding
        # toward -inf), and a dilated last window that ends past the input.
        ("ceil_window_past_input", (1, 2, 2, 2), 3, 2, 0, 1, True),
        ("ceil_dilated_partial", (1, 2, 5, 4), 3, 3, 1, (2, 1), True),
    ]
    for name, shape, k, s, p, d, ceil in configs:
        g = generator(f"max_pool2d/{name}")
        args = {"kernel_size": pair(k), "stride": pair(s), "padding": pair(p), "dilation": pair(d), "ceil_mode": ceil}

        def fn(input, a=args):
            out, idx = F.max_pool2d(input, a["kernel_size"], a["stride"], a["padding"], a["dilation"], a["ceil_mode"],
                                    return_indices=True)
            return {"out": out, "indices": idx}
        fx.case(name, fn, {"input": randn(g, *shape)}, grads=["input"], args=args)
    return fx


def gen_pool1d():
    """max_pool1d and avg_pool1d: strided, padded, dilated and ceil-mode windows."""
    mx = OpFile("max_pool1d")
    for name, shape, k, s, p, d, ceil in [("k2s2", (2, 3, 10), 2, 2, 0, 1, False), ("k3s2p1", (2, 3, 11), 3, 2, 1, 1, False),
                                          ("dilation2_ceil", (1, 2, 12), 3, 2, 1, 2, True)]:
        g = generator(f"max_pool1d/{name}")
        args = {"kernel_size": k, "stride": s, "padding": p, "dilation": d, "ceil_mode": ceil}
        mx.case(name, lambda input, a=args: {"out": F.max_pool1d(input, a["kernel_size"], a["stride"], a["padding"],
                                                                   a["dilation"], a["ceil_mode"])},
                {"input": randn(g, *shape)}, grads=["input"], args=args)
    av = OpFile("avg_pool1d")
    for name, shape, k, s, p, ceil, cip in [("k2s2", (2, 3, 10), 2, 2, 0, False, True),
                                            ("k3s2p1_exclude_pad", (2, 3, 11), 3, 2, 1, False, False),
                                            ("k3s2p1_ceil", (1, 2, 12), 3, 2, 1, True, True)]:
        g = generator(f"avg_pool1d/{name}")
        args = {"kernel_size": k, "stride": s, "padding": p, "ceil_mode": ceil, "count_include_pad": cip}
        av.case(name, lambda input, a=args: {"out": F.avg_pool1d(input, a["kernel_size"], a["stride"], a["padding"],
                                                                   a["ceil_mode"], a["count_include_pad"])},
                {"input": randn(g, *shape)}, grads=["input"], args=args)
    return [mx, av]


def gen_avg_pool2d():
    fx = OpFile("avg_pool2d")
    configs = [  # name, shape, kernel, stride, padding, ceil_mode, count_include_pad
        ("k2s2", (2, 3, 8, 8), 2, 2, 0, False, True),
        ("k3s2p1_include_pad", (2, 3, 9, 9), 3, 2, 1, False, True),
        ("k3s2p1_exclude_pad", (2, 3, 9, 9), 3, 2, 1, False, False),
        ("rect_ceil", (1, 2, 7, 8), (2, 3), (2, 2), (1, 1), True, True),
        ("ceil_window_past_input", (1, 2, 7, 1), (3, 4), (1, 3), (1, 1), True, False),
        ("ceil_window_past_input_include_pad", (1, 2, 7, 1), (3, 4), (1, 3), (1, 1), True, True),
    ]
    for name, shape, k, s, p, ceil, cip in configs:
        g = generator(f"avg_pool2d/{name}")
        args = {"kernel_size": pair(k), "stride": pair(s), "padding": pair(p), "ceil_mode": ceil,
                "count_include_pad": cip}

        def fn(input, a=args):
            return {"out": F.avg_pool2d(input, a["kernel_size"], a["stride"], a["padding"], a["ceil_mode"],
                                        a["count_include_pad"])}
        fx.case(name, fn, {"input": randn(g, *shape)}, grads=["input"], args=args)
    return fx


def gen_adaptive_avg_pool2d():
    fx = OpFile("adaptive_avg_pool2d")
    for name, shape, out_size in [("global", (2, 3, 7, 7), (1, 1)), ("uneven", (2, 3, 7, 5), (3, 2)),
                                  ("upsample", (1, 2, 3, 3), (4, 5))]:
        g = generator(f"adaptive_avg_pool2d/{name}")
        args = {"output_size": list(out_size)}

        def fn(input, a=args):
            return {"out": F.adaptive_avg_pool2d(input, a["output_size"])}
        fx.case(name, fn, {"input": randn(g, *shape)}, grads=["input"], args=args)
    return fx


def gen_batch_norm():
    fx = OpFile("batch_norm")
    configs = [  # name, shape, training, affine, momentum, eps
        ("train_4d", (4, 3, 5, 5), True, True, 0.1, 1e-5),
        ("train_2d", (6, 4), True, True, 0.3, 1e-3),
        ("train_3d_no_affine", (3, 4, 5), True, False, 0.1, 1e-5),
        ("eval_4d", (4, 3, 5, 5), False, True, 0.1, 1e-5),
        ("eval_no_affine", (2, 3, 4, 4), False, False, 0.1, 1e-5),
    ]
    for name, shape, training, affine, momentum, eps in configs:
        g = generator(f"batch_norm/{name}")
        c = shape[1]
        inputs = {"input": randn(g, *shape, scale=2.0, shift=0.5), "running_mean": randn(g, c, scale=0.3),
                  "running_var": uniform(g, 0.5, 1.5, c)}
        if affine:
            inputs["weight"] = uniform(g, 0.5, 1.5, c)
            inputs["bias"] = randn(g, c, scale=0.5)
        args = {"training": training, "momentum": momentum, "eps": eps, "affine": affine}

        def fn(input, running_mean, running_var, weight=None, bias=None, a=args):
            rm, rv = running_mean.detach().clone(), running_var.detach().clone()  # updated in place
            out = F.batch_norm(input, rm, rv, weight, bias, a["training"], a["momentum"], a["eps"])
            return {"out": out, "running_mean_after": rm, "running_var_after": rv}
        grads = ["input"] + (["weight", "bias"] if affine else [])
        fx.case(name, fn, inputs, grads=grads, args=args)
    return fx


def gen_layer_norm():
    fx = OpFile("layer_norm")
    for name, shape, normalized, affine, eps in [("last_dim", (2, 5, 8), [8], True, 1e-5),
                                                 ("two_dims", (3, 4, 6), [4, 6], True, 1e-5),
                                                 ("no_affine", (4, 7), [7], False, 1e-5),
                                                 ("bert_eps", (2, 3, 16), [16], True, 1e-12)]:
        g = generator(f"layer_norm/{name}")
        inputs = {"input": randn(g, *shape, scale=1.5, shift=0.3)}
        if affine:
            inputs["weight"] = uniform(g, 0.5, 1.5, *normalized)
            inputs["bias"] = randn(g, *normalized, scale=0.5)
        args = {"normalized_shape": normalized, "eps": eps, "affine": affine}

        def fn(input, weight=None, bias=None, a=args):
            return {"out": F.layer_norm(input, a["normalized_shape"], weight, bias, a["eps"])}
        fx.case(name, fn, inputs, grads=list(inputs), args=args)
    return fx


def gen_group_norm():
    fx = OpFile("group_norm")
    for name, shape, groups, affine in [("g3", (2, 6, 4, 4), 3, True), ("g1", (2, 4, 3, 3), 1, True),
                                        ("per_channel", (2, 4, 5), 4, True), ("no_affine", (3, 6, 2, 2), 2, False)]:
        g = generator(f"group_norm/{name}")
        inputs = {"input": randn(g, *shape, scale=1.5, shift=-0.4)}
        if affine:
            inputs["weight"] = uniform(g, 0.5, 1.5, shape[1])
            inputs["bias"] = randn(g, shape[1], scale=0.5)
        args = {"num_groups": groups, "eps": 1e-5, "affine": affine}

        def fn(input, weight=None, bias=None, a=args):
            return {"out": F.group_norm(input, a["num_groups"], weight, bias, a["eps"])}
        fx.case(name, fn, inputs, grads=list(inputs), args=args)
    return fx


def gen_softmaxes():
    files = []
    for op, f in [("softmax", F.softmax), ("log_softmax", F.log_softmax)]:
        fx = OpFile(op)
        for name, shape, dim, scale, shift in [("last_dim", (3, 4, 5), -1, 1.0, 0.0), ("middle_dim", (3, 4, 5), 1, 1.0, 0.0),
                                               ("first_dim", (3, 4, 5), 0, 1.0, 0.0),
                                               ("large_logits", (4, 6), -1, 30.0, 1000.0),  # stability
                                               ("vector", (9,), 0, 2.0, 0.0)]:
            g = generator(f"{op}/{name}")
            args = {"dim": dim}

            def fn(input, a=args, f=f):
                return {"out": f(input, dim=a["dim"])}
            fx.case(name, fn, {"input": randn(g, *shape, scale=scale, shift=shift)}, grads=["input"], args=args)
        files.append(fx)
    return files


def targets(g, shape, classes, ignore=None, n_ignored=0):
    t = torch.randint(0, classes, shape, generator=g, dtype=torch.int64)
    if ignore is not None:
        flat = t.view(-1)
        flat[torch.randperm(flat.numel(), generator=g)[:n_ignored]] = ignore
    return t


def gen_cross_entropy():
    fx = OpFile("cross_entropy")
    configs = [  # name, N, C, extra dims, reduction, ignore_index, n_ignored, label_smoothing, weight
        ("mean", 6, 5, (), "mean", -100, 0, 0.0, False),
        ("sum", 6, 5, (), "sum", -100, 0, 0.0, False),
        ("none", 6, 5, (), "none", -100, 0, 0.0, False),
        ("ignore_default", 8, 5, (), "mean", -100, 3, 0.0, False),
        ("ignore_index2", 8, 4, (), "mean", 2, 0, 0.0, False),  # ignores the real class 2
        ("ignore_none", 8, 5, (), "none", -100, 2, 0.0, False),
        ("smoothing", 6, 5, (), "mean", -100, 0, 0.1, False),
        ("smoothing_ignore_sum", 8, 5, (), "sum", -100, 3, 0.2, False),
        ("smoothing_ignore_mean", 8, 5, (), "mean", -100, 3, 0.2, False),
        ("spatial", 2, 4, (3,), "mean", -100, 1, 0.0, False),  # (N, C, d1) input, (N, d1) target
        ("large_logits", 4, 7, (), "mean", -100, 0, 0.0, False),
        ("class_weight", 6, 5, (), "mean", -100, 1, 0.0, True),
    ]
    for name, n, c, extra, red, ignore, n_ign, ls, weighted in configs:
        g = generator(f"cross_entropy/{name}")
        scale, shift = (40.0, 500.0) if name == "large_logits" else (1.5, 0.0)
        inputs = {"input": randn(g, n, c, *extra, scale=scale, shift=shift),
                  "target": targets(g, (n, *extra), c, ignore if n_ign else None, n_ign)}
        if weighted:
            inputs["weight"] = uniform(g, 0.2, 2.0, c)
        args = {"reduction": red, "ignore_index": ignore, "label_smoothing": ls, "weight": weighted}

        def fn(input, target, weight=None, a=args):
            return {"out": F.cross_entropy(input, target, weight, ignore_index=a["ignore_index"],
                                           reduction=a["reduction"], label_smoothing=a["label_smoothing"])}
        fx.case(name, fn, inputs, grads=["input"], args=args)
    return fx


def gen_nll_loss():
    fx = OpFile("nll_loss")
    for name, n, c, extra, red, n_ign, weighted in [("mean", 6, 5, (), "mean", 0, False), ("sum", 6, 5, (), "sum", 0, False),
                                                    ("none", 6, 5, (), "none", 0, False),
                                                    ("ignore_mean", 8, 5, (), "mean", 3, False),
                                                    ("spatial", 2, 4, (3,), "mean", 1, False),
                                                    ("class_weight", 6, 5, (), "mean", 1, True)]:
        g = generator(f"nll_loss/{name}")
        inputs = {"input": F.log_softmax(randn(g, n, c, *extra), dim=1).float().double(),
                  "target": targets(g, (n, *extra), c, -100 if n_ign else None, n_ign)}
        if weighted:
            inputs["weight"] = uniform(g, 0.2, 2.0, c)
        args = {"reduction": red, "ignore_index": -100, "weight": weighted}

        def fn(input, target, weight=None, a=args):
            return {"out": F.nll_loss(input, target, weight, ignore_index=a["ignore_index"], reduction=a["reduction"])}
        fx.case(name, fn, inputs, grads=["input"], args=args)
    return fx


def gen_mse_loss():
    fx = OpFile("mse_loss")
    for name, shape, red in [("mean", (4, 5), "mean"), ("sum", (3, 2, 4), "sum"), ("none", (4, 5), "none")]:
        g = generator(f"mse_loss/{name}")
        args = {"reduction": red}

        def fn(input, target, a=args):
            return {"out": F.mse_loss(input, target, reduction=a["reduction"])}
        fx.case(name, fn, {"input": randn(g, *shape), "target": randn(g, *shape)}, grads=["input", "target"], args=args)
    return fx


def gen_regression_losses():
    """l1_loss, smooth_l1_loss and huber_loss, each with its beta / delta below and above the
    differences drawn (so both branches are taken)."""
    files = []
    for op, param, values in [("l1_loss", None, [None]), ("smooth_l1_loss", "beta", [1.0, 0.3, 0.0]),
                              ("huber_loss", "delta", [1.0, 0.4])]:
        fx = OpFile(op)
        for red in ["mean", "sum", "none"]:
            for v in values:
                name = red if v is None else f"{red}_{param}{v}"
                g = generator(f"{op}/{name}")
                args = {"reduction": red}
                if param is not None:
                    args[param] = v

                def fn(input, target, a=args, op=op, param=param):
                    kw = {} if param is None else {param: a[param]}
                    return {"out": getattr(F, op)(input, target, reduction=a["reduction"], **kw)}
                fx.case(name, fn, {"input": randn(g, 4, 5), "target": randn(g, 4, 5)}, grads=["input", "target"],
                        args=args)
        files.append(fx)
    return files


def gen_leaky_relu():
    fx = OpFile("leaky_relu")
    for name, slope in [("default", 0.01), ("slope0.2", 0.2), ("slope1.5", 1.5)]:
        g = generator(f"leaky_relu/{name}")
        args = {"negative_slope": slope}
        fx.case(name, lambda input, a=args: {"out": F.leaky_relu(input, a["negative_slope"])},
                {"input": randn(g, 3, 7)}, grads=["input"], args=args)
    return fx


def gen_bce_with_logits():
    fx = OpFile("binary_cross_entropy_with_logits")
    for name, shape, red, pos_weight in [("mean", (4, 5), "mean", False), ("sum", (6,), "sum", False),
                                         ("none", (3, 4), "none", False), ("large_logits", (10,), "mean", False),
                                         ("pos_weight", (4, 3), "mean", True)]:
        g = generator(f"bce_with_logits/{name}")
        scale = 40.0 if name == "large_logits" else 2.0
        inputs = {"input": randn(g, *shape, scale=scale), "target": uniform(g, 0.0, 1.0, *shape)}
        if pos_weight:
            inputs["pos_weight"] = uniform(g, 0.5, 3.0, shape[-1])
        args = {"reduction": red, "pos_weight": pos_weight}

        def fn(input, target, pos_weight=None, a=args):
            return {"out": F.binary_cross_entropy_with_logits(input, target, reduction=a["reduction"],
                                                              pos_weight=pos_weight)}
        fx.case(name, fn, inputs, grads=["input", "target"], args=args)
    return fx


def gen_embedding():
    fx = OpFile("embedding")
    for name, vocab, dim, idx_shape, padding_idx in [("basic", 10, 4, (2, 5), None), ("padding_idx", 10, 4, (3, 4), 0),
                                                     ("padding_idx_nonzero", 7, 3, (9,), 3)]:
        g = generator(f"embedding/{name}")
        idx = torch.randint(0, vocab, idx_shape, generator=g, dtype=torch.int64)
        idx.view(-1)[:2] = idx.view(-1)[2]  # repeated rows: their gradients must add up
        if padding_idx is not None:
            idx.view(-1)[3] = padding_idx
        args = {"padding_idx": padding_idx}

        def fn(input, weight, a=args):
            return {"out": F.embedding(input, weight, padding_idx=a["padding_idx"])}
        fx.case(name, fn, {"input": idx, "weight": randn(g, vocab, dim)}, grads=["weight"], args=args)
    return fx


def gen_sdpa():
    fx = OpFile("scaled_dot_product_attention")
    configs = [  # name, B, H, Lq, Lk, E, Ev, mask kind, is_causal, scale
        ("plain", 2, 3, 5, 6, 4, 4, None, False, None),
        ("bool_mask", 2, 3, 5, 6, 4, 3, "bool", False, None),
        ("additive_mask", 2, 2, 4, 6, 8, 8, "float", False, None),
        ("causal", 2, 2, 5, 5, 4, 4, None, True, None),
        ("scale", 1, 2, 3, 4, 6, 5, None, False, 0.3),
        ("bert_padding", 2, 4, 8, 8, 8, 8, "bool_keys", False, None),  # a (B, 1, 1, L) key padding mask
    ]
    for name, b, h, lq, lk, e, ev, mask, causal, scale in configs:
        g = generator(f"sdpa/{name}")
        inputs = {"query": randn(g, b, h, lq, e), "key": randn(g, b, h, lk, e), "value": randn(g, b, h, lk, ev)}
        if mask == "bool":
            m = torch.rand(b, 1, lq, lk, generator=g) < 0.7
            m[..., 0] = True  # every query attends to at least one key (an all-False row gives NaN)
            inputs["attn_mask"] = m
        elif mask == "float":
            inputs["attn_mask"] = randn(g, b, 1, lq, lk, scale=2.0)
        elif mask == "bool_keys":
            m = torch.ones(b, 1, 1, lk, dtype=torch.bool)
            m[1, ..., lk - 3:] = False
            inputs["attn_mask"] = m
        args = {"dropout_p": 0.0, "is_causal": causal, "scale": scale, "attn_mask": mask}

        def fn(query, key, value, attn_mask=None, a=args):
            return {"out": F.scaled_dot_product_attention(query, key, value, attn_mask=attn_mask, dropout_p=0.0,
                                                          is_causal=a["is_causal"], scale=a["scale"])}
        grads = ["query", "key", "value"] + (["attn_mask"] if mask == "float" else [])
        fx.case(name, fn, inputs, grads=grads, args=args)
    return fx


def gen_erf():
    fx = OpFile("erf")
    g = generator("erf/basic")
    fx.case("basic", lambda input: {"out": torch.erf(input)}, {"input": randn(g, 3, 7, scale=1.5)}, grads=["input"])
    x = torch.tensor([-6.0, -3.5, -1e-3, 0.0, 1e-8, 0.5, 2.0, 4.0, 7.0], dtype=F64).float().double()
    fx.case("tails", lambda input: {"out": torch.erf(input)}, {"input": x}, grads=["input"])
    return fx


def gen_pad():
    fx = OpFile("pad")
    for name, shape, pad, value in [("last_dim", (2, 3, 4, 5), [1, 2], 0.0), ("last_two", (2, 3, 4, 5), [1, 1, 2, 0], 0.0),
                                    ("value", (3, 4), [0, 2, 1, 1], 0.5), ("three_dims", (2, 2, 3, 2), [1, 0, 0, 1, 2, 1], -1.0)]:
        g = generator(f"pad/{name}")
        args = {"pad": pad, "mode": "constant", "value": value}

        def fn(input, a=args):
            return {"out": F.pad(input, a["pad"], mode="constant", value=a["value"])}
        fx.case(name, fn, {"input": randn(g, *shape)}, grads=["input"], args=args)
    return fx


def gen_interpolate():
    fx = OpFile("interpolate")
    # name, shape, size, scale_factor, mode, align_corners, recompute_scale_factor
    configs = [("nearest_x2", (2, 3, 4, 5), None, [2.0], "nearest", None, False),
               ("nearest_down", (1, 2, 7, 9), [3, 4], None, "nearest", None, False),
               ("nearest_up_odd", (1, 2, 3, 4), [5, 7], None, "nearest", None, False),
               ("nearest_factor_1_7", (1, 2, 5, 6), None, [1.7], "nearest", None, False),
               ("nearest_exact", (1, 2, 5, 6), [7, 4], None, "nearest-exact", None, False),
               ("nearest_1d", (2, 3, 7), [10], None, "nearest", None, False),
               ("nearest_3d", (1, 2, 3, 4, 5), None, [2.0, 1.5, 0.5], "nearest", None, False),
               ("bilinear_x2", (2, 3, 4, 5), None, [2.0], "bilinear", None, False),
               ("bilinear_align", (2, 3, 4, 5), [7, 9], None, "bilinear", True, False),
               ("bilinear_down", (1, 2, 9, 8), [4, 3], None, "bilinear", False, False),
               ("bilinear_factor_1_7", (1, 2, 5, 6), None, [1.7], "bilinear", False, False),
               ("bilinear_recompute", (1, 2, 5, 6), None, [1.7], "bilinear", False, True),
               ("bilinear_same_size", (1, 2, 4, 5), [4, 5], None, "bilinear", False, False),
               ("linear_1d", (2, 3, 6), [11], None, "linear", False, False),
               ("linear_align_to_1", (2, 3, 6), [1], None, "linear", True, False),
               ("trilinear_x2", (1, 2, 3, 4, 5), None, [2.0], "trilinear", False, False)]
    for name, shape, size, factor, mode, align, recompute in configs:
        g = generator(f"interpolate/{name}")
        args = {"size": size, "scale_factor": factor, "mode": mode, "align_corners": align,
                "recompute_scale_factor": recompute}

        def fn(input, a=args):
            sf = a["scale_factor"]
            return {"out": F.interpolate(input, size=a["size"], scale_factor=sf if sf is None or len(sf) > 1 else sf[0],
                                         mode=a["mode"], align_corners=a["align_corners"],
                                         recompute_scale_factor=a["recompute_scale_factor"] or None)}
        fx.case(name, fn, {"input": randn(g, *shape)}, grads=["input"], args=args)
    return fx


# ---- blocks ----------------------------------------------------------------------------------

def block_fixture(path, module, inputs, g, note):
    """Runs module(**inputs) in f64; the first input is differentiated. Writes the state_dict
    before the step, 'after.<buffer>' after it, input(s), out, grad_out and all gradients."""
    state = {k: v.detach().clone() for k, v in module.state_dict().items()}
    first = next(iter(inputs))
    ins = {k: (v.clone().requires_grad_(True) if k == first else v) for k, v in inputs.items()}
    m32 = copy.deepcopy(module).float()
    out = module(*ins.values())
    grad_out = randn(g, *out.shape)
    params = dict(module.named_parameters())
    grads = torch.autograd.grad(out, [ins[first]] + list(params.values()), grad_out)
    # PyTorch's own f32 run against the f64 reference (documents what f32 can reach here).
    ins32 = {k: (v.float() if v.is_floating_point() else v) for k, v in inputs.items()}
    ins32[first].requires_grad_(True)
    out32 = m32(*ins32.values())
    grads32 = torch.autograd.grad(out32, [ins32[first]] + list(m32.parameters()), grad_out.float())
    err = max([f32_err(out32, out)] + [f32_err(a, b) for a, b in zip(grads32, grads)])
    tensors = dict(state)
    for name, buf in module.named_buffers():
        tensors[f"after.{name}"] = buf.detach().clone()
    tensors.update({k: v.detach() for k, v in inputs.items()})
    tensors["out"] = out.detach()
    tensors["grad_out"] = grad_out
    tensors[f"grad.{first}"] = grads[0]
    for name, gv in zip(params, grads[1:]):
        tensors[f"grad.{name}"] = gv
    meta = {"generator": f"tests/golden/gen_fixtures.py, torch {torch.__version__}", "block": note,
            "parameters": json.dumps(list(params)), "torch_f32_err": f"{err:.3f}", "buffers": json.dumps([n for n, _ in module.named_buffers()])}
    size = write_safetensors(path, tensors, meta)
    print(f"  {os.path.basename(path)}: {len(tensors)} tensors, {size} bytes, torch f32 err {err:.3f}")
    return size


def gen_blocks():
    total = 0
    torch.manual_seed(1234)
    block = BasicBlock(4, 8, 2).train()
    g = generator("blocks/resnet_basic_block")
    round_state(block, g)
    x = randn(g, 2, 4, 8, 8)
    note = json.dumps({"module": "BasicBlock", "in_channels": 4, "out_channels": 8, "stride": 2, "train": True,
                       "bn_momentum": 0.1, "bn_eps": 1e-5,
                       "forward": "relu(bn2(conv2(relu(bn1(conv1(x))))) + downsample.1(downsample.0(x)))",
                       "conv1": "3x3 stride 2 padding 1, no bias", "conv2": "3x3 stride 1 padding 1, no bias",
                       "downsample.0": "1x1 stride 2, no bias"})
    total += block_fixture(os.path.join(BLOCKS_DIR, "resnet_basic_block.safetensors"), block, {"input": x}, g, note)

    torch.manual_seed(5678)
    layer = BertLayer(32, 4, 64).eval()  # dropout is 0 anyway; eval has no other effect here
    g = generator("blocks/bert_layer")
    round_state(layer, g)
    mask = torch.ones(2, 8, dtype=torch.int64)
    mask[1, 5:] = 0
    note = json.dumps({"module": "BertLayer", "hidden": 32, "heads": 4, "intermediate": 64, "layer_norm_eps": 1e-12,
                       "activation": "gelu (erf)", "dropout": 0.0,
                       "attention_mask": "additive (1 - mask) * -10000 over keys, shape (B, 1, 1, L)"})
    total += block_fixture(os.path.join(BLOCKS_DIR, "bert_layer.safetensors"), layer,
                           {"input": randn(g, 2, 8, 32), "attention_mask": mask}, g, note)
    return total


def main():
    files = [gen_conv2d(), gen_conv1d(), gen_conv_transpose2d(), gen_max_pool2d(), *gen_pool1d(), gen_avg_pool2d(), gen_adaptive_avg_pool2d(), gen_batch_norm(),
             gen_layer_norm(), gen_group_norm(), *gen_softmaxes(), gen_cross_entropy(), gen_nll_loss(),
             gen_mse_loss(), *gen_regression_losses(), gen_leaky_relu(), gen_bce_with_logits(), gen_embedding(), gen_sdpa(), gen_erf(), gen_pad(),
             gen_interpolate()]
    total = 0
    for fx in files:
        total += fx.write()
    total += gen_blocks()
    print(f"wrote {len(files)} op files and 2 block files, {total} bytes in all")


if __name__ == "__main__":
    main()
