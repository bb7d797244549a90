"""What the golden-fixture generators share (gen_fixtures.py, gen_model_fixtures.py,
gen_layer_fixtures.py): the deterministic safetensors writer, seeded f32-exact inputs, and the
reference modules written out in torchvision's ResNet and Hugging Face's BertLayer layouts and
names (so neither torchvision nor transformers is needed)."""
import json
import os
import struct
import zlib

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors import safe_open

F64 = torch.float64

# ---- writing ---------------------------------------------------------------------------------

_ST_DTYPES = {torch.float64: ("F64", "<f8"), torch.float32: ("F32", "<f4"), torch.int64: ("I64", "<i8"),
              torch.bool: ("BOOL", "|b1")}


def write_safetensors(path, tensors, metadata):
    """Writes `tensors` (an ordered dict) in the given order with sorted metadata; then validates
    the file with the reference reader."""
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
        assert f.metadata() == header["__metadata__"]
        for name, t in tensors.items():
            assert torch.equal(f.get_tensor(name), t.detach()), name
    return os.path.getsize(path)


# ---- inputs ----------------------------------------------------------------------------------

def generator(name):
    return torch.Generator().manual_seed(zlib.crc32(name.encode()))


def randn(g, *shape, scale=1.0, shift=0.0):
    """f64 normal values rounded to f32 (exact in both dtypes)."""
    return (torch.randn(tuple(shape), generator=g, dtype=F64) * scale + shift).float().double()


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


# ---- parameters ------------------------------------------------------------------------------

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
