#!/usr/bin/env python3
"""Golden values from PyTorch for the torch.nn-style layers precis adds for users coming from PyTorch
(nn::TransformerEncoderLayer / TransformerEncoder, nn::MultiheadAttention's attention weights,
nn::GroupNorm, nn::AvgPool2d) and for two small networks built from them. The C++ tests
(tests/models/golden_layers_test.cpp) read the files this script writes; they never need Python.

Regenerate (needs torch, safetensors and numpy):

    /path/to/python tests/golden/gen_layer_fixtures.py

Files (tests/golden/fixtures/layers/), in the conventions of tests/golden/gen_model_fixtures.py:
"state.<name>" the module's state_dict (PyTorch names), inputs by name ("input", masks, "target"),
"out" (and "weights"), "grad_out" (and "grad_weights"), "grad.input" and "grad.<parameter>";
bool masks are stored as i64 0/1 (1 = true);
values are f64 rounded to f32-exact numbers, references computed in f64 in train mode with dropout
0 (so PyTorch takes its ordinary path, not the inference fast path). Each file's metadata "module"
holds the constructor arguments as JSON.

  encoder_layer_post.safetensors  TransformerEncoderLayer(16, 4, 32, dropout 0, relu, post-norm),
                                  sequence-first (S=6, N=3, E=16); a bool causal src_mask and a bool
                                  src_key_padding_mask (sample 1: last 2 positions padded, sample 2: 3).
  encoder_layer_pre.safetensors   TransformerEncoderLayer(16, 4, 32, dropout 0, gelu, norm_first,
                                  batch_first, layer_norm_eps 1e-6), (N=3, S=6, E=16), padding mask only.
  mha_weights.safetensors         MultiheadAttention(12, 3) cross-attention, query (4, 2, 12), key and
                                  value (5, 2, 12), key_padding_mask; "out", "weights" (averaged over
                                  heads) and "weights_per_head"; gradients of sum(out * grad_out) +
                                  sum(weights * grad_weights).
  transformer_classifier.safetensors  Linear(8 -> 16) token embedding + a learned position table
                                  "pos" (1, 6, 16) + TransformerEncoder(2 pre-norm gelu layers, final
                                  LayerNorm) + masked mean pooling + Linear(16 -> 10); input (4, 6, 8),
                                  "pad" (4, 6) bool, "target" (4,) i64; "logits", "loss"
                                  (cross_entropy, label_smoothing 0.1) and grad.<parameter> of loss.
  groupnorm_cnn.safetensors       nn.Sequential: Conv2d(1, 8, 3, p1), GroupNorm(4, 8), ReLU, Conv2d(8, 8,
                                  3, p1), GroupNorm(2, 8), ReLU, AvgPool2d(2), Conv2d(8, 16, 3, p1),
                                  GroupNorm(4, 16), ReLU, AdaptiveAvgPool2d(1), Flatten, Linear(16, 10);
                                  input (4, 1, 8, 8), "target"; "logits", "loss" (cross_entropy,
                                  label_smoothing 0.1) and grad.<parameter>.
"""
import json
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

from golden_common import generator, randn, uniform, write_safetensors

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.join(HERE, "fixtures", "layers")
GEN = "tests/golden/gen_layer_fixtures.py"


def round_state(module, g):
    """f32-exact f64 parameters; norm weights in [0.5, 1.5] and biases N(0, 0.3^2), so the affine
    parameters matter."""
    module.double()
    norm_names = {n for n, m in module.named_modules() if isinstance(m, (nn.LayerNorm, nn.GroupNorm))}
    with torch.no_grad():
        for name, p in module.named_parameters():
            owner = name.rsplit(".", 1)[0] if "." in name else ""
            if owner in norm_names and name.endswith("weight"):
                p.copy_(uniform(g, 0.5, 1.5, *p.shape))
            elif owner in norm_names or name.endswith("bias"):
                p.copy_(randn(g, *p.shape, scale=0.3))
            else:
                p.copy_(p.float().double())


def state_of(module):
    return {f"state.{k}": v.detach().clone() for k, v in module.state_dict().items()}


def meta(note):
    return {"generator": f"{GEN}, torch {torch.__version__}", "module": json.dumps(note)}


def save(name, tensors, note):
    # bool masks are stored as i64 0/1 (the writer knows F64, F32 and I64).
    tensors = {k: (v.to(torch.int64) if v.dtype == torch.bool else v) for k, v in tensors.items()}
    size = write_safetensors(os.path.join(OUT_DIR, name), tensors, meta(note))
    print(f"  {name}: {len(tensors)} tensors, {size} bytes")


def encoder_layer_fixture(name, note, x, src_mask, pad, g):
    kwargs = {k: v for k, v in note.items() if k not in ("d_model", "nhead")}
    layer = nn.TransformerEncoderLayer(note["d_model"], note["nhead"], **kwargs).train()
    round_state(layer, g)
    tensors = state_of(layer)
    xi = x.clone().requires_grad_(True)
    out = layer(xi, src_mask=src_mask, src_key_padding_mask=pad)
    grad_out = randn(g, *out.shape)
    params = dict(layer.named_parameters())
    grads = torch.autograd.grad(out, [xi] + list(params.values()), grad_out)
    tensors["input"] = x
    if src_mask is not None:
        tensors["src_mask"] = src_mask
    tensors["src_key_padding_mask"] = pad
    tensors["out"], tensors["grad_out"], tensors["grad.input"] = out.detach(), grad_out, grads[0]
    for pname, gv in zip(params, grads[1:]):
        tensors[f"grad.{pname}"] = gv
    save(name, tensors, note)


def gen_encoder_layers():
    torch.manual_seed(21)
    g = generator("layers/encoder_layer_post")
    s, n, e = 6, 3, 16
    pad = torch.zeros(n, s, dtype=torch.bool)
    pad[1, 4:] = True
    pad[2, 3:] = True
    causal = torch.triu(torch.ones(s, s, dtype=torch.bool), diagonal=1)
    encoder_layer_fixture("encoder_layer_post.safetensors",
                          {"d_model": e, "nhead": 4, "dim_feedforward": 32, "dropout": 0.0, "activation": "relu",
                           "norm_first": False, "batch_first": False},
                          randn(g, s, n, e), causal, pad, g)

    torch.manual_seed(22)
    g = generator("layers/encoder_layer_pre")
    encoder_layer_fixture("encoder_layer_pre.safetensors",
                          {"d_model": e, "nhead": 4, "dim_feedforward": 32, "dropout": 0.0, "activation": "gelu",
                           "norm_first": True, "batch_first": True, "layer_norm_eps": 1e-6},
                          randn(g, n, s, e), None, pad, g)


def gen_mha_weights():
    torch.manual_seed(23)
    g = generator("layers/mha_weights")
    e, h, l, s, n = 12, 3, 4, 5, 2
    mha = nn.MultiheadAttention(e, h).train()
    round_state(mha, g)
    q, k, v = randn(g, l, n, e), randn(g, s, n, e), randn(g, s, n, e)
    pad = torch.zeros(n, s, dtype=torch.bool)
    pad[1, 3:] = True
    qi, ki, vi = (t.clone().requires_grad_(True) for t in (q, k, v))
    out, weights = mha(qi, ki, vi, key_padding_mask=pad, need_weights=True, average_attn_weights=True)
    _, per_head = mha(q, k, v, key_padding_mask=pad, need_weights=True, average_attn_weights=False)
    grad_out, grad_weights = randn(g, *out.shape), randn(g, *weights.shape)
    params = dict(mha.named_parameters())
    grads = torch.autograd.grad([out, weights], [qi, ki, vi] + list(params.values()), [grad_out, grad_weights])
    tensors = state_of(mha)
    tensors.update({"query": q, "key": k, "value": v, "key_padding_mask": pad, "out": out.detach(),
                    "weights": weights.detach(), "weights_per_head": per_head.detach(), "grad_out": grad_out,
                    "grad_weights": grad_weights, "grad.query": grads[0], "grad.key": grads[1],
                    "grad.value": grads[2]})
    for pname, gv in zip(params, grads[3:]):
        tensors[f"grad.{pname}"] = gv
    save("mha_weights.safetensors", tensors, {"embed_dim": e, "num_heads": h})


class TransformerClassifier(nn.Module):
    """Rows of an image as tokens: the network tests/models/golden_layers_test.cpp builds in C++."""

    def __init__(self, in_dim=8, seq=6, d=16, heads=4, ff=32, layers=2, classes=10):
        super().__init__()
        self.embed = nn.Linear(in_dim, d)
        self.pos = nn.Parameter(torch.randn(1, seq, d) * 0.02)
        layer = nn.TransformerEncoderLayer(d, heads, ff, dropout=0.0, activation="gelu", batch_first=True,
                                           norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, norm=nn.LayerNorm(d), enable_nested_tensor=False)
        self.head = nn.Linear(d, classes)

    def forward(self, x, pad):
        h = self.encoder(self.embed(x) + self.pos, src_key_padding_mask=pad)
        keep = (~pad).unsqueeze(-1).to(h.dtype)
        return self.head((h * keep).sum(1) / keep.sum(1))


def model_fixture(name, model, inputs, target, g, note):
    round_state(model, g)
    with torch.no_grad():  # TransformerEncoder deep-copies its layer: make the layers differ
        for p in model.parameters():
            p.copy_((p + randn(g, *p.shape, scale=0.05)).float().double())
    tensors = state_of(model)
    logits = model(*inputs.values())
    loss = F.cross_entropy(logits, target, label_smoothing=0.1)
    params = dict(model.named_parameters())
    grads = torch.autograd.grad(loss, list(params.values()))
    tensors.update(inputs)
    tensors["target"], tensors["logits"], tensors["loss"] = target, logits.detach(), loss.detach()
    for pname, gv in zip(params, grads):
        tensors[f"grad.{pname}"] = gv
    save(name, tensors, note)


def gen_models():
    torch.manual_seed(24)
    g = generator("layers/transformer_classifier")
    model = TransformerClassifier().train()
    pad = torch.zeros(4, 6, dtype=torch.bool)
    pad[1, 5:] = True
    pad[3, 2:] = True
    model_fixture("transformer_classifier.safetensors", model, {"input": randn(g, 4, 6, 8), "pad": pad},
                  torch.tensor([3, 0, 9, 3]), g,
                  {"in_dim": 8, "seq": 6, "d_model": 16, "nhead": 4, "dim_feedforward": 32, "layers": 2})

    torch.manual_seed(25)
    g = generator("layers/groupnorm_cnn")
    cnn = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.GroupNorm(4, 8), nn.ReLU(),
                        nn.Conv2d(8, 8, 3, padding=1), nn.GroupNorm(2, 8), nn.ReLU(), nn.AvgPool2d(2),
                        nn.Conv2d(8, 16, 3, padding=1), nn.GroupNorm(4, 16), nn.ReLU(),
                        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10)).train()
    model_fixture("groupnorm_cnn.safetensors", cnn, {"input": randn(g, 4, 1, 8, 8)}, torch.tensor([1, 7, 7, 2]), g,
                  {"layers": "conv-gn-relu x2, avgpool, conv-gn-relu, gap, linear"})


def main():
    torch.set_num_threads(1)
    gen_encoder_layers()
    gen_mha_weights()
    gen_models()


if __name__ == "__main__":
    main()
