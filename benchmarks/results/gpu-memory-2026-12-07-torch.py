"""PyTorch side of benchmarks/results/gpu-memory-2026-12-07-fake-device.md: the bytes a torchvision
ResNet-50 training forward saves for backward (every saved tensor's storage once, parameters and
buffers left out; the autocast cast copies of the weights and max-pool's int64 indices counted), on
the CPU under torch.autocast with the given dtype, as the same ops would save them on a GPU.

    python gpu-memory-2026-12-07-torch.py f16|bf16|f32 nchw|cl BATCH SIZE
"""
import collections
import sys

import torch
import torch.nn.functional as F
import torchvision

dt, layout, b, hw = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
torch.manual_seed(1)
m = torchvision.models.resnet50()
m.train()
x, y = torch.randn(b, 3, hw, hw), torch.randint(0, 1000, (b,))
if layout == "cl":
    m, x = m.to(memory_format=torch.channels_last), x.contiguous(memory_format=torch.channels_last)
params = {t.untyped_storage().data_ptr() for t in list(m.parameters()) + list(m.buffers())}
seen = {}


def pack(t):
    s = t.untyped_storage()
    if s.data_ptr() not in params:
        seen[s.data_ptr()] = (s.nbytes(), str(t.dtype).replace("torch.", ""))
    return t


with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
    with torch.autocast("cpu", dtype=torch.float16 if dt == "f16" else torch.bfloat16, enabled=dt != "f32"):
        loss = F.cross_entropy(m(x), y)
by = collections.Counter()
for n, d in seen.values():
    by[d] += n
print(f"torch {torch.__version__} {dt} {layout} b{b} {hw}: saved {sum(by.values()) / 2**20:.1f} MiB",
      {k: round(v / 2**20, 1) for k, v in by.items()})
