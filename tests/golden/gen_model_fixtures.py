#!/usr/bin/env python3
"""Golden values from PyTorch for the bundled models (models/resnet.h, models/bert.h). The C++ tests
(tests/models/golden_models_test.cpp) read the files this script writes; they never need Python.

Regenerate (needs torch, safetensors and numpy; torchvision and transformers are NOT needed: the
reference modules (ResNet below, its blocks and BertLayer in golden_common.py) mirror torchvision's
ResNet and Hugging Face's BertLayer, names included):

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

import torch
import torch.nn as nn
from safetensors.torch import save_file

from golden_common import (BasicBlock, BertLayer, Bottleneck, generator, randn, round_state, uniform,
                           write_safetensors)

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.join(HERE, "fixtures", "models")

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)

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


# ---- fixtures ----------------------------------------------------------------------------------

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


def padding_mask():
    """i64 (2, 8): the second sequence has 5 tokens and 3 padding positions."""
    mask = torch.ones(2, 8, dtype=torch.int64)
    mask[1, 5:] = 0
    return mask


def gen_blocks():
    # (torch seed for the module's init, name, module, its inputs drawn from the fixture's
    # generator after round_state, the note stored as "block")
    blocks = [
        (11, "basic_block", lambda: BasicBlock(4, 8, 2).train(), lambda g: {"input": randn(g, 2, 4, 8, 8)},
         {"module": "BasicBlock", "in_planes": 4, "planes": 8, "stride": 2, "train": True}),
        (12, "bottleneck", lambda: Bottleneck(8, 4, 2).train(), lambda g: {"input": randn(g, 2, 8, 6, 6)},
         {"module": "Bottleneck", "in_planes": 8, "planes": 4, "stride": 2, "train": True}),
        (13, "bert_layer", lambda: BertLayer(32, 4, 64).eval(),
         lambda g: {"input": randn(g, 2, 8, 32), "attention_mask": padding_mask()},
         {"module": "BertLayer", "hidden": 32, "heads": 4, "intermediate": 64, "layer_norm_eps": 1e-12}),
    ]
    for seed, name, make, inputs, note in blocks:
        torch.manual_seed(seed)
        g = generator(f"models/{name}")
        module = make()
        round_state(module, g)
        block_fixture(f"{name}.safetensors", module, inputs(g), g, note)


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
