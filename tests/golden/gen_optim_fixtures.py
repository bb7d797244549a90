#!/usr/bin/env python3
"""Writes the PyTorch golden values for tests/optim/:

  fixtures/optim_trajectories.safetensors  optimizer trajectories on a fixed linear regression
  fixtures/lr_schedules.safetensors        learning rates (and momenta) of the LR schedulers

Needs torch and safetensors (only to regenerate; the C++ tests read the committed files).
Run from anywhere: python3 tests/golden/gen_optim_fixtures.py

The problem: X (32, 6) and Y (32, 3) fixed data, parameters W (6, 3) and b (3,), loss
mean((X W + b - Y)^2). The gradients are computed in float64 from the float32 parameters and
rounded to float32, so the C++ test (which does the same with plain loops) feeds the optimizer
the same gradients and the comparison is about the optimizer alone. The optimizers run with
foreach=False, fused=False (PyTorch's single-tensor implementation, whose operation order the
precis kernels follow). The parameters are small (18 and 3 elements), so PyTorch's CPU kernels
take their scalar (non-vectorised) path. W and b are saved after every 20 steps ("<config>.W.<k>").
"""
import math
import os

import torch
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.join(HERE, "fixtures")
STEPS = 200
EVERY = 20


def problem():
    g = torch.Generator().manual_seed(1234)
    # Data are multiples of 1/8 so that products with float32 parameters are exact in float64.
    X = torch.randint(-16, 17, (32, 6), generator=g).double() / 8
    W_true = torch.randn(6, 3, generator=g, dtype=torch.float64)
    Y = X @ W_true + 0.25 * torch.randint(-4, 5, (32, 3), generator=g).double() / 8
    W0 = (0.5 * torch.randn(6, 3, generator=g)).float()
    b0 = (0.5 * torch.randn(3, generator=g)).float()
    return X, Y, W0, b0


def grads(X, Y, W, b):
    R = X @ W.double() + b.double() - Y  # (32, 3)
    scale = 2.0 / R.numel()
    return (scale * (X.t() @ R)).float(), (scale * R.sum(0)).float()


CONFIGS = {
    "sgd": (torch.optim.SGD, dict(lr=0.05)),
    "sgd_momentum": (torch.optim.SGD, dict(lr=0.02, momentum=0.9)),
    "sgd_nesterov_wd": (torch.optim.SGD, dict(lr=0.02, momentum=0.9, nesterov=True, weight_decay=0.01)),
    "sgd_dampening_wd": (torch.optim.SGD, dict(lr=0.03, momentum=0.5, dampening=0.2, weight_decay=0.05)),
    "adam": (torch.optim.Adam, dict(lr=0.01)),
    "adam_wd_amsgrad": (torch.optim.Adam, dict(lr=0.01, betas=(0.8, 0.99), weight_decay=0.1, amsgrad=True)),
    "adamw": (torch.optim.AdamW, dict(lr=0.01, weight_decay=0.1)),
    "adamw_amsgrad": (torch.optim.AdamW, dict(lr=0.005, betas=(0.85, 0.995), eps=1e-6, weight_decay=0.05,
                                              amsgrad=True)),
}


def trajectories():
    X, Y, W0, b0 = problem()
    out = {"X": X, "Y": Y, "W0": W0, "b0": b0}
    for name, (cls, kw) in CONFIGS.items():
        W = W0.clone().requires_grad_()
        b = b0.clone().requires_grad_()
        opt = cls([W, b], foreach=False, fused=False, **kw)
        for step in range(1, STEPS + 1):
            gW, gb = grads(X, Y, W.detach(), b.detach())
            W.grad, b.grad = gW, gb
            opt.step()
            if step % EVERY == 0:
                out[f"{name}.W.{step}"] = W.detach().clone()
                out[f"{name}.b.{step}"] = b.detach().clone()
    save_file({k: v.contiguous() for k, v in out.items()}, os.path.join(OUT_DIR, "optim_trajectories.safetensors"))


def warmup_decay_factor(step, warmup, total, decay, base, min_lr):
    """The precis WarmupDecayLR rule as a LambdaLR factor (the conventional warmup/decay schedule)."""
    if step < warmup:
        return step / warmup
    if step >= total:
        return min_lr / base
    progress = (step - warmup) / (total - warmup)
    f = 0.5 * (1.0 + math.cos(math.pi * progress)) if decay == "cosine" else 1.0 - progress
    return (min_lr + (base - min_lr) * f) / base


def schedules():
    n = 100
    base = 0.1
    out = {}

    def run(name, make, opt_cls=torch.optim.SGD, opt_kw=None, momentum_key=None):
        p = torch.zeros(1, requires_grad=True)
        opt = opt_cls([p], lr=base, **(opt_kw or {}))
        sched = make(opt)
        lrs, moms = [], []
        for i in range(n):
            lrs.append(sched.get_last_lr()[0])
            if momentum_key == "momentum":
                moms.append(opt.param_groups[0]["momentum"])
            elif momentum_key == "beta1":
                moms.append(opt.param_groups[0]["betas"][0])
            opt.step()
            if i + 1 < n:
                sched.step()
        out[f"{name}.lr"] = torch.tensor(lrs, dtype=torch.float64)
        if momentum_key:
            out[f"{name}.momentum"] = torch.tensor(moms, dtype=torch.float64)

    S = torch.optim.lr_scheduler
    run("step_lr", lambda o: S.StepLR(o, step_size=7, gamma=0.5))
    run("multistep_lr", lambda o: S.MultiStepLR(o, milestones=[10, 25, 60], gamma=0.3))
    run("cosine_lr", lambda o: S.CosineAnnealingLR(o, T_max=40, eta_min=0.001))
    run("warmup_cosine", lambda o: S.LambdaLR(o, lambda s: warmup_decay_factor(s, 10, 80, "cosine", base, 0.005)))
    run("warmup_linear", lambda o: S.LambdaLR(o, lambda s: warmup_decay_factor(s, 5, 100, "linear", base, 0.0)))
    run("onecycle_sgd", lambda o: S.OneCycleLR(o, max_lr=0.1, total_steps=100), opt_kw=dict(momentum=0.9),
        momentum_key="momentum")
    run("onecycle_adam_linear",
        lambda o: S.OneCycleLR(o, max_lr=0.05, total_steps=100, pct_start=0.25, anneal_strategy="linear",
                               div_factor=10.0, final_div_factor=100.0),
        opt_cls=torch.optim.Adam, momentum_key="beta1")
    run("linear_lr", lambda o: S.LinearLR(o, start_factor=0.25, end_factor=0.9, total_iters=30))
    run("constant_lr", lambda o: S.ConstantLR(o, factor=0.5, total_iters=12))
    run("exponential_lr", lambda o: S.ExponentialLR(o, gamma=0.97))
    run("polynomial_lr", lambda o: S.PolynomialLR(o, total_iters=60, power=2.0))
    run("lambda_lr", lambda o: S.LambdaLR(o, lambda s: 1.0 / (1.0 + 0.1 * s)))
    run("sequential_warmup_cosine",
        lambda o: S.SequentialLR(o, [S.LinearLR(o, start_factor=0.1, total_iters=5),
                                     S.CosineAnnealingLR(o, T_max=95, eta_min=0.001)], milestones=[5]))
    run("sequential_three",
        lambda o: S.SequentialLR(o, [S.ConstantLR(o, factor=0.5, total_iters=10), S.ExponentialLR(o, gamma=0.95),
                                     S.StepLR(o, step_size=10, gamma=0.5)], milestones=[10, 40]))
    save_file(out, os.path.join(OUT_DIR, "lr_schedules.safetensors"))


if __name__ == "__main__":
    torch.set_num_threads(1)
    os.makedirs(OUT_DIR, exist_ok=True)
    trajectories()
    schedules()
    print("wrote", OUT_DIR)
