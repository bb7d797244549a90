#!/usr/bin/env python3
"""PyTorch peer of `precis-bench models`: one training step (forward, backward, SGD momentum step)
of ResNet-18 (CIFAR layout, batch 64 of 3x32x32; "checkpoint-full": each residual block in
torch.utils.checkpoint) and BERT-mini (L4 H256 A4 I1024, vocabulary
30522, batch 16x128, masked-LM loss on every token, dropout on; "masked15": on the same 15 % of
the tokens as precis-bench, the head at those positions only; "masked15 checkpoint-full" and
"checkpoint-selective": that step with each encoder layer in torch.utils.checkpoint) on synthetic
data, in f32 and under bf16 autocast, written as the same JSON records with "impl": "torch".

    benchmarks/peers/torch_models.py [--threads 2] [--repeat 200] [--min-time 0.5] [--json FILE]
                                     [--cases SUBSTRING]
    benchmarks/peers/torch_models.py --device cuda [--variants NAME,...] [--max-seconds S]
                                     [--repeat N] [--min-time S] [--json FILE] [--cases SUBSTRING]

The models are plain torch modules written here to mirror precis's (models/resnet.h,
models/bert.h): same layers, shapes, activations (exact GELU), post-LN, tied MLM decoder.
Each case runs in a fresh child process (this script re-executed with --child), which reports
its peak resident set (VmHWM) as peak_rss_mb and its resident set before building the model
(interpreter and torch loaded) as base_rss_mb, as precis-bench does with fork.

Timing as precis-bench: 2 untimed warm-up steps, then steps until --min-time seconds and at least
5 steps, or --repeat steps; median and min in ms.

glibc returns freed memory to the system by default, which costs PyTorch its time in page faults
on these machines (/work/shared/MACHINE.md); the peer runs with
GLIBC_TUNABLES=glibc.malloc.mmap_threshold=4294967295:glibc.malloc.trim_threshold=68719476736
(the script re-executes itself with it unless it is set or --no-malloc-tuning is given).

--device cuda[:N] runs the GPU cases of `precis-bench models --device cuda` instead: ResNet-50
(ImageNet layout, 1000 classes, batch 256 of 3x224x224) and BERT-mini (batch 64x128 tokens), each
step ending with torch.cuda.synchronize(), in the PyTorch variants a GPU user runs, each its own
child process and record ("variant"):

    f32-notf32-nchw     f32, torch.backends.cuda.matmul.allow_tf32 = cudnn.allow_tf32 = False
    f32-nchw            f32, PyTorch's defaults untouched (cuDNN TF32 on, matmul TF32 off)
    f32-tf32-cl         f32, TF32 on for matmul and cuDNN, channels_last model and input
    f16-amp-nchw        torch.autocast f16 + torch.amp.GradScaler
    f16-amp-cl          the same, channels_last
    bf16-amp-cl         torch.autocast bf16 (no scaler), channels_last
    compile-f16-amp-cl  torch.compile(model), f16 AMP, channels_last (opt-in: ~75 s of compiling)
    graphs-bf16-amp-cl  bf16-amp-cl with the whole step (zero_grad, forward, backward, SGD step)
                        captured once in a torch.cuda.CUDAGraph after warm-up on a side stream,
                        and replayed (the torch.cuda.graphs "whole-network capture" recipe; f16's
                        GradScaler.step reads found_inf on the host, so only bf16 is captured)

--variants NAME,... picks some (default: all but compile-f16-amp-cl; "all": every one); --cases S
keeps the (case, variant) whose "case variant" or "case dtype" contains S.
torch.backends.cudnn.benchmark = True in every variant (what users pick); the TF32 flags are set
through the legacy allow_tf32 API only (mixing it with fp32_precision is an error in PyTorch 2.9+).
BERT-mini has no convolutions and no image layout, so it runs four variants: f32-notf32 (for
f32-notf32-nchw and f32-nchw: PyTorch's default leaves matmul TF32 off), f32-tf32 (TF32 matmul,
for f32-tf32-cl), f16-amp (f16-amp-nchw, f16-amp-cl), bf16-amp (bf16-amp-cl); and
compile-f16-amp for compile-f16-amp-cl, graphs-bf16-amp for graphs-bf16-amp-cl.

Records keep precis-bench's case names (report.py pairs them by case and dtype) and add
"variant", "dtype" (f32, f16 or bf16: the autocast dtype), "device", "images_per_s" or
"tokens_per_s" at the median, "peak_device_mb" (torch.cuda.max_memory_allocated over the whole
case, as precis-bench counts its allocator's peak: with the model build and the 2 warm-up steps,
so cuDNN's benchmark workspaces and compiling too), "peak_device_mb_steps" (the same over the timed
steps only), "warmup_s" (model build and warm-up steps: cudnn.benchmark's search, compiling),
"tf32_matmul" and "tf32_cudnn" (the flags as read back in the child), "channels_last" and
"compiled". One line per record goes to stdout with --json (to stderr without it, where stdout is
the JSON): case, variant, median and min ms, images/s or tokens/s, peak MiB. With --json the file
is rewritten after every case, so a run stopped from outside keeps the cases it finished.
--max-seconds S bounds the whole run: no case starts after S seconds, and a running one is
stopped at S. A case that fails or is not run is named on stderr and the exit status is 1 (the
other cases still run and are written). Without a usable GPU it exits with an error before any
case (never a silent skip).

Compare with: python3 benchmarks/report.py PRECIS.json TORCH.json --suite models
"""
import argparse
import functools
import json
import os
import subprocess
import sys
import time

from peer_common import peer_arg_parser, reexec_with_malloc_tuning, time_step, write_records
# (name, flops per step: 3 x forward, MACHINE.md)
# resnet18_cifar runs channels-last (model and input, torch.channels_last) as precis's case does;
# resnet18_cifar_nchw with contiguous NCHW tensors.
# bert_mini b16x128 fused-loss: precis without the logits (linear_cross_entropy); PyTorch has no
# such op, so its side runs the b16x128 step as a PyTorch user writes it.
# bert_mini b16x128 masked15: the MLM head (transform 2*256*256 + decoder 2*256*30522 FLOPs per
# token) at 307 of the 2048 tokens instead of all of them.
# bert_mini b16x128 masked15 checkpoint-*: each encoder layer checkpointed (non-reentrant), the
# FLOPs those of the work done, as precis-bench counts them: full recomputes the encoder's forward
# (per token and layer: q, k, v, attention output 4*2*256*256, feed-forward 2*2*256*1024, the two
# attention products 2*2*128*256); selective, with its policy saving the matrix products
# (aten.mm/addmm), recomputes the attention products alone (inside scaled_dot_product_attention).
_HEAD_PER_TOKEN = 2.0 * 256 * 256 + 2.0 * 256 * 30522
_ENCODER_TOKEN_LAYER = 4 * 2.0 * 256 * 256 + 2 * 2.0 * 256 * 1024
_ATTENTION_TOKEN_LAYER = 2 * 2.0 * 128 * 256
_MASKED15 = 3.0 * (46.2e9 - (2048 - 307) * _HEAD_PER_TOKEN)
# resnet18_cifar b64 checkpoint-full: each residual block checkpointed, the stages' forward (all
# but the 3x3 stem convolution and the classifier) done twice.
_RESNET18_STEM = 2.0 * 3 * 64 * 9 * 32 * 32
CASES = [("resnet18_cifar b64", 3.0 * 1.11e9 * 64), ("resnet18_cifar_nchw b64", 3.0 * 1.11e9 * 64),
         ("resnet18_cifar b64 checkpoint-full", 3.0 * 1.11e9 * 64 + (1.11e9 - _RESNET18_STEM) * 64),
         ("bert_mini b16x128", 3.0 * 46.2e9),
         ("bert_mini b16x128 fused-loss", 3.0 * 46.2e9),
         ("bert_mini b16x128 masked15", _MASKED15),
         ("bert_mini b16x128 masked15 checkpoint-full",
          _MASKED15 + 2048 * 4 * (_ENCODER_TOKEN_LAYER + _ATTENTION_TOKEN_LAYER)),
         ("bert_mini b16x128 masked15 checkpoint-selective", _MASKED15 + 2048 * 4 * _ATTENTION_TOKEN_LAYER)]
# --device cuda: (name, flops per step, what is counted, how many per step); ResNet-50 forward is
# 4.1 G multiply-adds (8.2 GFLOP) per 224x224 image, as benchmarks/suite_models.cpp counts.
RESNET50_BATCH, BERT_GPU_BATCH = 256, 64
GPU_CASES = [("resnet50 b256 224", 3.0 * 8.2e9 * RESNET50_BATCH, "images", RESNET50_BATCH),
             ("bert_mini b64x128", 3.0 * 46.2e9 * 4, "tokens", BERT_GPU_BATCH * 128)]
# The --device cuda variants: name -> (dtype, tf32, channels_last, compiled). dtype: f32, or the
# autocast dtype (f16 with a GradScaler, bf16 without); tf32: the value given to both
# torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32, None = PyTorch's
# defaults untouched. ResNet-50 runs the first seven as they are; BERT-mini runs the last five.
GPU_VARIANTS = {
    "f32-notf32-nchw": ("f32", False, False, False),
    "f32-nchw": ("f32", None, False, False),
    "f32-tf32-cl": ("f32", True, True, False),
    "f16-amp-nchw": ("f16", None, False, False),
    "f16-amp-cl": ("f16", None, True, False),
    "bf16-amp-cl": ("bf16", None, True, False),
    "compile-f16-amp-cl": ("f16", None, True, True),
    "graphs-bf16-amp-cl": ("bf16", None, True, False),
    "f32-notf32": ("f32", False, False, False),
    "f32-tf32": ("f32", True, False, False),
    "f16-amp": ("f16", None, False, False),
    "bf16-amp": ("bf16", None, False, False),
    "compile-f16-amp": ("f16", None, False, True),
    "graphs-bf16-amp": ("bf16", None, False, False),
}
VARIANT_NAMES = list(GPU_VARIANTS)[:8]  # what --variants takes
DEFAULT_VARIANTS = [v for v in VARIANT_NAMES if not v.startswith("compile")]
# BERT-mini's variant for each --variants name: no convolutions (cuDNN's TF32 flag changes
# nothing) and no image layout; PyTorch's default leaves matmul TF32 off, so f32-nchw is f32-notf32.
BERT_VARIANT = {"f32-notf32-nchw": "f32-notf32", "f32-nchw": "f32-notf32", "f32-tf32-cl": "f32-tf32",
                "f16-amp-nchw": "f16-amp", "f16-amp-cl": "f16-amp", "bf16-amp-cl": "bf16-amp",
                "compile-f16-amp-cl": "compile-f16-amp", "graphs-bf16-amp-cl": "graphs-bf16-amp"}


def case_variants(name, selected):
    """The variants case `name` runs for the --variants names `selected`, in order, once each."""
    out = []
    for v in selected:
        v = v if name.startswith("resnet50") else BERT_VARIANT[v]
        if v not in out:
            out.append(v)
    return out


def status_mb(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def build_models(torch):
    nn, F = torch.nn, torch.nn.functional
    from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

    class BasicBlock(nn.Module):
        def __init__(self, cin, planes, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, planes, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.downsample = None
            if stride != 1 or cin != planes:
                self.downsample = nn.Sequential(nn.Conv2d(cin, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

        def forward(self, x):
            out = F.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return F.relu(out + (x if self.downsample is None else self.downsample(x)))

    class ResNet18Cifar(nn.Module):
        """models::resnet18_cifar: 3x3 stride-1 stem, no max-pool, stages of 64/128/256/512."""

        def __init__(self, num_classes=10):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            layers, cin = [], 64
            for i, planes in enumerate([64, 128, 256, 512]):
                blocks = [BasicBlock(cin, planes, 1 if i == 0 else 2), BasicBlock(planes, planes, 1)]
                layers.append(nn.Sequential(*blocks))
                cin = planes
            self.layer1, self.layer2, self.layer3, self.layer4 = layers
            self.fc = nn.Linear(512, num_classes)

        checkpointing = None  # None or "full": each residual block in torch.utils.checkpoint

        def forward(self, x):
            x = F.relu(self.bn1(self.conv1(x)))
            for stage in (self.layer1, self.layer2, self.layer3, self.layer4):
                for block in stage:
                    x = block(x) if self.checkpointing is None else checkpointed(block, x, self.checkpointing)
            return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))

    def save_products(ctx, op, *args, **kwargs):
        """PyTorch's selective checkpointing policy as its documentation writes one: keep the
        matrix products' outputs, recompute the rest (norms, activations, dropout, attention)."""
        keep = op in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default)
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

    def checkpointed(layer, x, mode):
        if mode == "full":
            return checkpoint(layer, x, use_reentrant=False)
        return checkpoint(layer, x, use_reentrant=False,
                          context_fn=functools.partial(create_selective_checkpoint_contexts, save_products))

    class BertLayer(nn.Module):
        """Post-LN encoder layer as models::BertLayer (HF layout), exact GELU, dropout 0.1."""

        def __init__(self, h=256, heads=4, inter=1024, p=0.1, eps=1e-12):
            super().__init__()
            self.heads, self.p = heads, p
            self.query, self.key, self.value = nn.Linear(h, h), nn.Linear(h, h), nn.Linear(h, h)
            self.attn_out, self.attn_norm = nn.Linear(h, h), nn.LayerNorm(h, eps=eps)
            self.inter, self.out, self.out_norm = nn.Linear(h, inter), nn.Linear(inter, h), nn.LayerNorm(h, eps=eps)
            self.drop = nn.Dropout(p)

        def forward(self, x):
            b, l, h = x.shape
            split = lambda t: t.view(b, l, self.heads, h // self.heads).transpose(1, 2)
            ctx = F.scaled_dot_product_attention(split(self.query(x)), split(self.key(x)), split(self.value(x)),
                                                 dropout_p=self.p if self.training else 0.0)
            ctx = ctx.transpose(1, 2).reshape(b, l, h)
            a = self.attn_norm(self.drop(self.attn_out(ctx)) + x)
            return self.out_norm(self.drop(self.out(F.gelu(self.inter(a)))) + a)

    class BertMiniMLM(nn.Module):
        """models::BertForMaskedLM with BertConfig::mini(30522): embeddings (word, position, type)
        + LayerNorm + dropout, 4 layers, MLM head dense -> GELU -> LayerNorm -> decoder tied to the
        word embeddings (+ bias)."""

        def __init__(self, vocab=30522, h=256, layers=4, max_pos=512, eps=1e-12):
            super().__init__()
            self.word = nn.Embedding(vocab, h, padding_idx=0)
            self.pos, self.token_type = nn.Embedding(max_pos, h), nn.Embedding(2, h)
            self.emb_norm, self.drop = nn.LayerNorm(h, eps=eps), nn.Dropout(0.1)
            self.layers = nn.ModuleList([BertLayer(h) for _ in range(layers)])
            self.transform, self.transform_norm = nn.Linear(h, h), nn.LayerNorm(h, eps=eps)
            self.decoder = nn.Linear(h, vocab)
            self.decoder.weight = self.word.weight
            for m in self.modules():
                if isinstance(m, (nn.Linear, nn.Embedding)):
                    nn.init.normal_(m.weight, 0.0, 0.02)
                if isinstance(m, nn.Linear) and m.bias is not None:
                    nn.init.zeros_(m.bias)

        checkpointing = None  # None, "full" or "selective": each layer in torch.utils.checkpoint

        def encode(self, ids):
            l = ids.shape[1]
            pos = torch.arange(l, device=ids.device)
            x = self.drop(self.emb_norm(self.word(ids) + self.token_type(torch.zeros_like(ids)) + self.pos(pos)))
            for layer in self.layers:
                x = layer(x) if self.checkpointing is None else checkpointed(layer, x, self.checkpointing)
            return x

        def head(self, x):
            return self.decoder(self.transform_norm(F.gelu(self.transform(x))))

        def forward(self, ids):
            return self.head(self.encode(ids))

        def masked_loss(self, ids, labels):
            """The head at the labelled positions only (BertForMaskedLM::forward_with_labels with
            masked_positions_only; NVIDIA's BERT pre-training)."""
            flat = labels.reshape(-1)
            index = (flat != -100).nonzero().squeeze(1)
            h = self.encode(ids).reshape(-1, self.transform.in_features).index_select(0, index)
            return F.cross_entropy(self.head(h), flat.index_select(0, index))

    class Bottleneck(nn.Module):
        """models::Bottleneck: 1x1 -> 3x3 (the stride) -> 1x1 (x4 channels), projection shortcut."""

        def __init__(self, cin, planes, stride):
            super().__init__()
            self.conv1, self.bn1 = nn.Conv2d(cin, planes, 1, bias=False), nn.BatchNorm2d(planes)
            self.conv2, self.bn2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False), nn.BatchNorm2d(planes)
            self.conv3, self.bn3 = nn.Conv2d(planes, planes * 4, 1, bias=False), nn.BatchNorm2d(planes * 4)
            self.downsample = None
            if stride != 1 or cin != planes * 4:
                self.downsample = nn.Sequential(nn.Conv2d(cin, planes * 4, 1, stride, bias=False),
                                                nn.BatchNorm2d(planes * 4))

        def forward(self, x):
            y = F.relu(self.bn1(self.conv1(x)))
            y = F.relu(self.bn2(self.conv2(y)))
            y = self.bn3(self.conv3(y))
            return F.relu(y + (x if self.downsample is None else self.downsample(x)))

    class ResNet50(nn.Module):
        """models::resnet50: 7x7 stride-2 stem, 3x3 stride-2 max-pool, 3/4/6/3 bottlenecks."""

        def __init__(self, num_classes=1000):
            super().__init__()
            self.conv1, self.bn1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            stages, cin = [], 64
            for i, (planes, n) in enumerate(zip([64, 128, 256, 512], [3, 4, 6, 3])):
                blocks = []
                for j in range(n):
                    blocks.append(Bottleneck(cin, planes, 2 if i > 0 and j == 0 else 1))
                    cin = planes * 4
                stages.append(nn.Sequential(*blocks))
            self.layers = nn.Sequential(*stages)
            self.fc = nn.Linear(2048, num_classes)

        def forward(self, x):
            x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
            return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.layers(x), 1), 1))

    return ResNet18Cifar, BertMiniMLM, ResNet50


def masked15_labels(torch, ids):
    """precis-bench's masked15_labels (benchmarks/suite_models.cpp): the ids at the 15 % of positions
    with the smallest splitmix64(1 + position) keys, -100 elsewhere: the very same positions."""
    mask64 = (1 << 64) - 1

    def splitmix64(x):
        z = (x + 0x9e3779b97f4a7c15) & mask64
        z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & mask64
        z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & mask64
        return z ^ (z >> 31)
    n = ids.numel()
    order = sorted(range(n), key=lambda i: splitmix64(1 + i))[:n * 15 // 100]
    labels = torch.full((n,), -100, dtype=torch.long)
    index = torch.tensor(order, dtype=torch.long)
    labels[index] = ids.reshape(-1)[index]
    return labels.reshape(ids.shape)


def checkpoint_mode(name):
    """"full" or "selective" for a "... checkpoint-MODE" case, else None."""
    return name.split("checkpoint-")[1] if "checkpoint-" in name else None


def make_step(torch, name, dtype):
    F = torch.nn.functional
    ResNet18Cifar, BertMiniMLM, _ = build_models(torch)
    torch.manual_seed(1)
    if name.startswith("resnet18_cifar"):
        model = ResNet18Cifar()
        model.checkpointing = checkpoint_mode(name)
        x, y = torch.randn(64, 3, 32, 32), torch.randint(0, 10, (64,))
        if not name.startswith("resnet18_cifar_nchw"):
            model = model.to(memory_format=torch.channels_last)
            x = x.contiguous(memory_format=torch.channels_last)
        loss_fn = lambda: F.cross_entropy(model(x), y)
    elif "masked15" in name:
        model = BertMiniMLM()
        model.checkpointing = checkpoint_mode(name)
        ids = torch.randint(0, 30522, (16, 128))
        labels = masked15_labels(torch, ids)
        loss_fn = lambda: model.masked_loss(ids, labels)
    else:
        model = BertMiniMLM()
        ids = torch.randint(0, 30522, (16, 128))
        loss_fn = lambda: F.cross_entropy(model(ids).reshape(-1, 30522), ids.reshape(-1))
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bf16"):
            loss = loss_fn()
        loss.backward()
        opt.step()
    return step


def make_gpu_step(torch, name, variant, device):
    """One training step of case `name` on `device` in `variant` (GPU_VARIANTS: f32, f16 autocast +
    GradScaler, or bf16 autocast; channels_last; torch.compile); waits for the GPU."""
    F = torch.nn.functional
    dtype, _, channels_last, compiled = GPU_VARIANTS[variant]
    _, BertMiniMLM, ResNet50 = build_models(torch)
    torch.manual_seed(1)
    if name.startswith("resnet50"):
        model = ResNet50().to(device)
        x = torch.randn(RESNET50_BATCH, 3, 224, 224, device=device)
        y = torch.randint(0, 1000, (RESNET50_BATCH,), device=device)
        if channels_last:
            model = model.to(memory_format=torch.channels_last)
            x = x.contiguous(memory_format=torch.channels_last)
        inputs, loss_of = (x,), lambda out: F.cross_entropy(out, y)
    else:
        model = BertMiniMLM().to(device)
        ids = torch.randint(0, 30522, (BERT_GPU_BATCH, 128), device=device)
        inputs, loss_of = (ids,), lambda out: F.cross_entropy(out.reshape(-1, 30522), ids.reshape(-1))
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    forward = torch.compile(model) if compiled else model
    amp = {"f16": torch.float16, "bf16": torch.bfloat16}.get(dtype)
    scaler = torch.amp.GradScaler("cuda", enabled=dtype == "f16")

    def work():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=amp or torch.float16, enabled=amp is not None):
            loss = loss_of(forward(*inputs))
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    if not variant.startswith("graphs-"):
        def step():
            work()
            torch.cuda.synchronize(device)
        return step
    # torch.cuda.graphs' whole-network capture: warm up on a side stream (the optimizer's momentum
    # buffers, cuDNN's benchmark search, the allocator), then capture the step into a graph whose
    # private pool holds its activations and gradients, and replay it.
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(3):
            work()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        work()

    def replay():
        graph.replay()
        torch.cuda.synchronize(device)
    return replay


def read_flag(get):
    """A backend flag as the child sees it; None where PyTorch refuses to say (mixed TF32 APIs)."""
    try:
        return bool(get())
    except RuntimeError:
        return None


def gpu_child(args):
    import warnings
    # PyTorch 2.9+ warns that allow_tf32 will be deprecated; the variants use it on purpose.
    warnings.filterwarnings("ignore", message=".*new API settings to control TF32.*")
    import torch
    device = torch.device(args.device)
    variant = args.child_variant
    dtype, tf32, channels_last, compiled = GPU_VARIANTS[variant]
    torch.backends.cudnn.benchmark = True
    if tf32 is not None:
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
    torch.cuda.reset_peak_memory_stats(device)
    t0 = time.perf_counter()
    step = make_gpu_step(torch, args.child, variant, device)
    for _ in range(2):  # warm-up as time_step's: cudnn.benchmark's search, compiling, the allocator
        step()
    warmup_s = time.perf_counter() - t0
    case_peak = torch.cuda.max_memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    median, best, reps = time_step(step, args.repeat, args.min_time, warmup=0)
    steps_peak = torch.cuda.max_memory_allocated(device)
    name, flops, items, per_step = next(c for c in GPU_CASES if c[0] == args.child)
    print(json.dumps({"suite": "models", "case": name, "impl": "torch", "dtype": dtype, "variant": variant,
                      "threads": torch.get_num_threads(), "median_ms": round(median, 4), "min_ms": round(best, 4),
                      "gflops": round(flops / (median * 1e6), 2), "reps": reps, "device": str(device),
                      items + "_per_s": round(per_step / (median * 1e-3), 1),
                      "peak_device_mb": round(max(case_peak, steps_peak) / 2**20, 1),
                      "peak_device_mb_steps": round(steps_peak / 2**20, 1), "warmup_s": round(warmup_s, 2),
                      "tf32_matmul": read_flag(lambda: torch.backends.cuda.matmul.allow_tf32),
                      "tf32_cudnn": read_flag(lambda: torch.backends.cudnn.allow_tf32),
                      "channels_last": channels_last, "compiled": compiled, "torch": torch.__version__}))


def require_gpu(device):
    """Exits with an error naming `device` unless torch can use it (checked in a child process, so
    that this one never initialises CUDA)."""
    code = ("import sys, torch; d = torch.device(sys.argv[1]); n = torch.cuda.device_count();"
            "sys.exit(0 if torch.cuda.is_available() and (d.index or 0) < n else "
            "f'torch_models.py --device {d}: no usable GPU (torch {torch.__version__}, CUDA available: '"
            "f'{torch.cuda.is_available()}, {n} devices visible)')")
    r = subprocess.run([sys.executable, "-c", code, device], stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit(r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"--device {device}: no usable GPU")


def run_gpu(args, variants):
    """Each (case, variant) in a child process, within --max-seconds; the records so far are
    written after each case, and a case that fails or is not run makes the exit status 1."""
    start = time.monotonic()
    require_gpu(args.device)
    records, missed = [], []
    log = sys.stdout if args.json else sys.stderr  # without --json, stdout is the JSON array
    for name, _, items, _ in GPU_CASES:
        for variant in case_variants(name, variants):
            dtype = GPU_VARIANTS[variant][0]
            if args.cases not in f"{name} {variant}" and args.cases not in f"{name} {dtype}":
                continue
            left = None if args.max_seconds is None else args.max_seconds - (time.monotonic() - start)
            if left is not None and left <= 0:
                missed.append(f"{name} {variant}: not started, --max-seconds {args.max_seconds:g} spent")
                print(f"{name:20s} {variant:18s} not run: --max-seconds {args.max_seconds:g} spent", file=log, flush=True)
                continue
            cmd = [sys.executable, os.path.abspath(__file__), "--child", name, "--child-variant", variant,
                   "--device", args.device, "--repeat", str(args.repeat), "--min-time", str(args.min_time)]
            try:
                run = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, timeout=left)
            except subprocess.TimeoutExpired:
                missed.append(f"{name} {variant}: stopped at --max-seconds {args.max_seconds:g}")
                print(f"{name:20s} {variant:18s} stopped: --max-seconds {args.max_seconds:g} reached", file=log, flush=True)
                continue
            lines = run.stdout.strip().splitlines()
            if run.returncode != 0 or not lines:
                missed.append(f"{name} {variant}: the child failed (exit {run.returncode}; its stderr is above)")
                print(f"{name:20s} {variant:18s} FAILED (exit {run.returncode})", file=log, flush=True)
                continue
            r = json.loads(lines[-1])
            print(f"{name:20s} {variant:18s} {r['device']}  median {r['median_ms']:8.2f} ms  min {r['min_ms']:8.2f} ms  "
                  f"{r[items + '_per_s']:9.0f} {items}/s  peak {r['peak_device_mb']:8.1f} MiB "
                  f"(steps {r['peak_device_mb_steps']:.1f})  warm-up {r['warmup_s']:.1f} s  torch {r['torch']}",
                  file=log, flush=True)
            r.pop("torch", None)
            records.append(r)
            if args.json:
                write_records(records, args.json)
    write_records(records, args.json)
    if missed:
        sys.exit(f"torch_models.py: {len(missed)} case(s) not measured: " + "; ".join(missed))


def child(args):
    import torch
    torch.set_num_threads(args.child_threads)
    base = status_mb("VmRSS")
    step = make_step(torch, args.child, args.child_dtype)
    median, best, reps = time_step(step, args.repeat, args.min_time)
    flops = dict(CASES)[args.child]
    print(json.dumps({"suite": "models", "case": args.child, "impl": "torch", "dtype": args.child_dtype,
                      "threads": args.child_threads, "median_ms": round(median, 4), "min_ms": round(best, 4),
                      "gflops": round(flops / (median * 1e6), 2), "reps": reps,
                      "peak_rss_mb": round(status_mb("VmHWM"), 1), "base_rss_mb": round(base, 1),
                      "torch": torch.__version__}))


def main():
    p = peer_arg_parser(__doc__)
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--child-dtype", help=argparse.SUPPRESS)
    p.add_argument("--child-threads", type=int, help=argparse.SUPPRESS)
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda[:N]: the GPU cases (see above)")
    p.add_argument("--variants", help="--device cuda: comma-separated variants (see above), or 'all' "
                                      f"(default: {','.join(DEFAULT_VARIANTS)})")
    p.add_argument("--max-seconds", type=float, help="--device cuda: no case starts or runs past S seconds")
    p.add_argument("--child-variant", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.device != "cpu" and args.device != "cuda" and not args.device.startswith("cuda:"):
        p.error(f"--device must be cpu, cuda or cuda:N, got {args.device!r}")
    if args.device == "cpu" and (args.variants is not None or args.max_seconds is not None):
        p.error("--variants and --max-seconds are for --device cuda")
    variants = DEFAULT_VARIANTS
    if args.variants == "all":
        variants = VARIANT_NAMES
    elif args.variants is not None:
        variants = [v.strip() for v in args.variants.split(",") if v.strip()]
        unknown = [v for v in variants if v not in VARIANT_NAMES]
        if unknown or not variants:
            p.error(f"--variants: unknown {', '.join(unknown) or '(none given)'}; "
                    f"known: {', '.join(VARIANT_NAMES)}, or all")
        variants = [v for v in VARIANT_NAMES if v in variants]  # the documented order

    reexec_with_malloc_tuning(args.no_malloc_tuning)
    if args.device != "cpu":
        if args.child:
            gpu_child(args)
        else:
            run_gpu(args, variants)
        return
    if args.child:
        child(args)
        return

    records = []
    print(f"GLIBC_TUNABLES={os.environ.get('GLIBC_TUNABLES', '')} OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '')}",
          file=sys.stderr)
    for name, _ in CASES:
        if args.cases not in name:
            continue
        for dtype in ("f32", "bf16"):
            for n in [int(t) for t in args.threads.split(",")]:
                cmd = [sys.executable, os.path.abspath(__file__), "--child", name, "--child-dtype", dtype,
                       "--child-threads", str(n), "--repeat", str(args.repeat), "--min-time", str(args.min_time)]
                out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
                r = json.loads(out.strip().splitlines()[-1])
                records.append(r)
                print(f"{name:20s} {dtype:4s} {n} threads  median {r['median_ms']:9.1f} ms  min {r['min_ms']:9.1f} ms  "
                      f"peak {r['peak_rss_mb']:7.1f} MB (base {r['base_rss_mb']:.1f})  torch {r['torch']}",
                      file=sys.stderr)
    for r in records:
        r.pop("torch", None)
    write_records(records, args.json)


if __name__ == "__main__":
    main()
