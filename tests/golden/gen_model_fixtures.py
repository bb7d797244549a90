#!/usr/bin/env python3
"""Golden values from PyTorch for the bundled models (models/resnet.h, models/bert.h). The C++ tests
(tests/models/golden_models_test.cpp) read the files this script writes; they never need Python.

Regenerate (needs torch, safetensors and numpy; torchvision and transformers are NOT needed: the
reference modules below mirror torchvision's ResNet and Hugging Face's BertLayer, names included):

    /path/to/python tests/golden/gen_model_fixtures.py

Files (tests/golden/fixtures/models/), in the conventions of tests/golden/gen_fixtures.py:
  basic_block.safetensors   BasicBlock(4 -> 8, stride 2) with its 1x1-conv + BN downsample, train mode.
  bottleneck.safetensors    Bottleneck(8 -> planes 4 (16 out), stride 2) with downsample, train mode.
  bert_layer.safetensors    one BERT encoder layer (HF BertLayer names; post-LN, erf GELU, LayerNorm
                            eps 1e-12, dropout 0), hidden 32, 4 heads, intermediate 64, eval mode;
                            "attention_mask" (i64 (2, 8), 1 = token, 0 = padding) becomes the additive
                            mask (1 - mask) * -10000 over the keys, as HF BERT.
      each: "state.<name>" the module's state_dict before the forward pass (PyTorch names);
      "after.<buffer>" buffers after it; "input" (and "attention_mask"); "out"; "grad_out" (fixed
      random upstream gradient); "grad.input" and "grad.<parameter>" = d(sum(out * grad_out))/d(.).
      Values are f64 rounded to f32-exact numbers; references computed in f64.
  resnet18_w4.safetensors   the state_dict of a reduced-width torchvision resnet18 (ImageNet layout:
                            7x7 stem, max-pool, 4 stages; base width 4 instead of 64, so 4/8/16/32
                            channels; 10 classes), f32, saved by safetensors.torch.save_file. The
                            running statistics come from 3 train-mode passes over random batches.
  resnet18_w4_io.safetensors  "input" (4, 3, 32, 32) f32 and "logits" (4, 10): the eval-mode output
                            computed in f64 from the same f32 weights.
"""
import copy
import json
import os
import struct
import zlib

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.join(HERE, "fixtures", "models")
F64 = torch.float64

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)

_ST_DTYPES = {torch.float64: ("F64", "<f8"), torch.float32: ("F32", "<f4"), torch.int64: ("I64", "<i8")}


def write_safetensors(path, tensors, metadata):
    """Writes `tensors` in the given order with sorted metadata (deterministic bytes); then
    validates the file with the reference reader."""
    header = {"__metadata__": dict(sorted(metadata.items()))}
    chunks, offset = [], 0
    for name, t in tensors.items():
        st, np_dtype = _ST_DTYPES[t.dtype]
        raw = np.ascontiguousarray(t.detach().cpu().numpy().astype(np_dtype)).tobytes()
        header[name] = {"dtype": st, "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))
    with safe_open(path, framework="pt") as f:
        for name, t in tensors.items():
            assert torch.equal(f.get_tensor(name), t.detach()), name
    return os.path.getsize(path)


def generator(name):
    return torch.Generator().manual_seed(zlib.crc32(name.encode()))


def randn(g, *shape, scale=1.0):
    return (torch.randn(tuple(shape), generator=g, dtype=F64) * scale).float().double()


def uniform(g, lo, hi, *shape):
    return (torch.rand(tuple(shape), generator=g, dtype=F64) * (hi - lo) + lo).float().double()


# ---- reference modules (torchvision / Hugging Face layouts and names) -------------------------

def conv3x3(cin, cout, stride=1):
    return nn.Conv2d(cin, cout, 3, stride, 1, bias=False)


def conv1x1(cin, cout, stride=1):
    return nn.Conv2d(cin, cout, 1, stride, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin, planes, stride=1):
        super().__init__()
        self.conv1, self.bn1 = conv3x3(cin, planes, stride), nn.BatchNorm2d(planes)
        self.relu = nn.ReLU()
        self.conv2, self.bn2 = conv3x3(planes, planes), nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or cin != planes:
            self.downsample = nn.Sequential(conv1x1(cin, planes, stride), nn.BatchNorm2d(planes))

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + (self.downsample(x) if self.downsample is not None else x))


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin, planes, stride=1):
        super().__init__()
        self.conv1, self.bn1 = conv1x1(cin, planes), nn.BatchNorm2d(planes)
        self.conv2, self.bn2 = conv3x3(planes, planes, stride), nn.BatchNorm2d(planes)
        self.conv3, self.bn3 = conv1x1(planes, planes * 4), nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU()
        self.downsample = None
        if stride != 1 or cin != planes * 4:
            self.downsample = nn.Sequential(conv1x1(cin, planes * 4, stride), nn.BatchNorm2d(planes * 4))

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + (self.downsample(x) if self.downsample is not None else x))


class ResNet(nn.Module):
    """torchvision.models.ResNet with a base width parameter (64 in torchvision)."""

    def __init__(self, block, layers, num_classes=1000, width=64, in_channels=3):
        super().__init__()
        self.inplanes = width
        self.conv1 = nn.Conv2d(in_channels, width, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = self._make_layer(block, width, layers[0], 1)
        self.layer2 = self._make_layer(block, width * 2, layers[1], 2)
        self.layer3 = self._make_layer(block, width * 4, layers[2], 2)
        self.layer4 = self._make_layer(block, width * 8, layers[3], 2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(width * 8 * block.expansion, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def _make_layer(self, block, planes, blocks, stride):
        layers = [block(self.inplanes, planes, stride)]
        self.inplanes = planes * block.expansion
        layers += [block(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


class BertSelfAttention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.query, self.key, self.value = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)

    def forward(self, x, additive_mask):
        b, l, hid = x.shape

        def split(t):
            return t.view(b, l, self.heads, self.head_dim).transpose(1, 2)
        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        scores = q @ k.transpose(-1, -2) / self.head_dim ** 0.5 + additive_mask
        return (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, l, hid)


class BertResidualOutput(nn.Module):
    def __init__(self, cin, hidden):
        super().__init__()
        self.dense = nn.Linear(cin, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, h, residual):
        return self.LayerNorm(self.dense(h) + residual)


class BertAttention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.self = BertSelfAttention(hidden, heads)
        self.output = BertResidualOutput(hidden, hidden)

    def forward(self, x, mask):
        return self.output(self.self(x, mask), x)


class BertIntermediate(nn.Module):
    def __init__(self, hidden, inter):
        super().__init__()
        self.dense = nn.Linear(hidden, inter)

    def forward(self, x):
        return F.gelu(self.dense(x))


class BertLayer(nn.Module):
    def __init__(self, hidden, heads, inter):
        super().__init__()
        self.attention = BertAttention(hidden, heads)
        self.intermediate = BertIntermediate(hidden, inter)
        self.output = BertResidualOutput(inter, hidden)

    def forward(self, x, attention_mask):
        additive = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
        a = self.attention(x, additive)
        return self.output(self.intermediate(a), a)


# ---- fixtures ----------------------------------------------------------------------------------

def round_state(module, g):
    """f32-exact f64 parameters; non-trivial norm affines and running statistics."""
    module.double()
    with torch.no_grad():
        for name, p in module.named_parameters():
            norm = "bn" in name or "LayerNorm" in name or "downsample.1" in name
            if norm and name.endswith("weight"):
                p.copy_(uniform(g, 0.5, 1.5, *p.shape))
            elif norm:
                p.copy_(randn(g, *p.shape, scale=0.3))
            else:
                p.copy_(p.float().double())
        for name, buf in module.named_buffers():
            if name.endswith("running_mean"):
                buf.copy_(randn(g, *buf.shape, scale=0.2))
            elif name.endswith("running_var"):
                buf.copy_(uniform(g, 0.5, 1.5, *buf.shape))


def block_fixture(name, module, inputs, g, note):
    state = {f"state.{k}": v.detach().clone() for k, v in module.state_dict().items()}
    first = next(iter(inputs))
    ins = {k: (v.clone().requires_grad_(True) if k == first else v) for k, v in inputs.items()}
    out = module(*ins.values())
    grad_out = randn(g, *out.shape)
    params = dict(module.named_parameters())
    grads = torch.autograd.grad(out, [ins[first]] + list(params.values()), grad_out)
    tensors = dict(state)
    for bname, buf in module.named_buffers():
        tensors[f"after.{bname}"] = buf.detach().clone()
    tensors.update({k: v.detach() for k, v in inputs.items()})
    tensors["out"], tensors["grad_out"] = out.detach(), grad_out
    tensors[f"grad.{first}"] = grads[0]
    for pname, gv in zip(params, grads[1:]):
        tensors[f"grad.{pname}"] = gv
    meta = {"generator": f"tests/golden/gen_model_fixtures.py, torch {torch.__version__}", "block": json.dumps(note),
            "parameters": json.dumps(list(params))}
    size = write_safetensors(os.path.join(OUT_DIR, name), tensors, meta)
    print(f"  {name}: {len(tensors)} tensors, {size} bytes")


def gen_blocks():
    torch.manual_seed(11)
    g = generator("models/basic_block")
    block = BasicBlock(4, 8, 2).train()
    round_state(block, g)
    block_fixture("basic_block.safetensors", block, {"input": randn(g, 2, 4, 8, 8)}, g,
                  {"module": "BasicBlock", "in_planes": 4, "planes": 8, "stride": 2, "train": True})

    torch.manual_seed(12)
    g = generator("models/bottleneck")
    block = Bottleneck(8, 4, 2).train()
    round_state(block, g)
    block_fixture("bottleneck.safetensors", block, {"input": randn(g, 2, 8, 6, 6)}, g,
                  {"module": "Bottleneck", "in_planes": 8, "planes": 4, "stride": 2, "train": True})

    torch.manual_seed(13)
    g = generator("models/bert_layer")
    layer = BertLayer(32, 4, 64).eval()
    round_state(layer, g)
    mask = torch.ones(2, 8, dtype=torch.int64)
    mask[1, 5:] = 0
    block_fixture("bert_layer.safetensors", layer, {"input": randn(g, 2, 8, 32), "attention_mask": mask}, g,
                  {"module": "BertLayer", "hidden": 32, "heads": 4, "intermediate": 64, "layer_norm_eps": 1e-12})


def gen_resnet18():
    torch.manual_seed(14)
    g = generator("models/resnet18_w4")
    model = ResNet(BasicBlock, [2, 2, 2, 2], num_classes=10, width=4)
    with torch.no_grad():  # non-trivial BN affines; running statistics from a few training batches
        for name, p in model.named_parameters():
            if name.endswith(".weight") and ("bn" in name or "downsample.1" in name):
                p.copy_(uniform(g, 0.5, 1.5, *p.shape).float())
            elif ("bn" in name or "downsample.1" in name):
                p.copy_(randn(g, *p.shape, scale=0.2).float())
        model.train()
        for _ in range(3):
            model(randn(g, 8, 3, 32, 32).float())
    model.eval()
    state = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    path = os.path.join(OUT_DIR, "resnet18_w4.safetensors")
    save_file(state, path, metadata={"generator": f"tests/golden/gen_model_fixtures.py, torch {torch.__version__}",
                                     "model": "torchvision-layout resnet18, width 4, 10 classes"})
    x = randn(g, 4, 3, 32, 32)
    with torch.no_grad():
        logits = copy.deepcopy(model).double()(x)
    size = write_safetensors(os.path.join(OUT_DIR, "resnet18_w4_io.safetensors"),
                             {"input": x.float(), "logits": logits},
                             {"generator": f"tests/golden/gen_model_fixtures.py, torch {torch.__version__}",
                              "note": "eval-mode logits computed in f64 from the f32 weights"})
    n = sum(p.numel() for p in model.parameters())
    print(f"  resnet18_w4: {n} parameters, {os.path.getsize(path)} bytes; io {size} bytes")


def main():
    gen_blocks()
    gen_resnet18()


if __name__ == "__main__":
    main()
