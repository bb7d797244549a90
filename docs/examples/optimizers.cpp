// The snippets of docs/optimizers.md, compiled and run by the test suite. Trains a linear
// regression in f32 (SGD + momentum + a schedule + clipping) and in bf16 (low-precision model
// mode: AdamW keeps fp32 master weights) with gradient accumulation, and checks that both learn.
#include <precis/precis.h>

#include <cmath>
#include <iostream>

using namespace precis;

namespace {

// y = x·w_true + 0.5, 256 samples of 4 features.
struct Data {
  Tensor x, y;
  Data() {
    manual_seed(0);
    x = randn({256, 4});
    Tensor w_true = from_vector<float>({1.0f, -2.0f, 0.5f, 3.0f}, {4, 1});
    y = matmul(x, w_true) + 0.5;
  }
};

float mse(const Tensor& pred, const Tensor& y) { return mean((pred - y) * (pred - y)).item<float>(); }

}  // namespace

int main() {
  const Data data;

  // ---- f32 model, one optimizer with two parameter groups, a schedule and clipping ----------
  Tensor w = zeros({4, 1}).requires_grad_();
  Tensor b = zeros({1}).requires_grad_();
  optim::SGD opt(std::vector<optim::ParamGroup<optim::SGDOptions>>{
                     {{w}},                                           // the defaults below
                     {{b}, optim::SGDOptions{.lr = 0.05, .momentum = 0.9}},  // its own options
                 },
                 {.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-4});
  optim::WarmupDecayLR sched(opt, {.warmup_steps = 10, .total_steps = 200, .decay = optim::Decay::Cosine});
  for (int step = 0; step < 200; ++step) {
    opt.zero_grad();
    Tensor loss = mean(pow(matmul(data.x, w) + b - data.y, 2.0));
    loss.backward();
    optim::clip_grad_norm_({w, b}, /*max_norm=*/10.0);
    opt.step();
    sched.step();
  }
  const float loss32 = mse(matmul(data.x, w) + b, data.y);
  std::cout << "f32 SGD: loss " << loss32 << ", lr now " << sched.get_last_lr()[0] << "\n";

  // ---- bf16 model (low-precision model mode) with gradient accumulation over 4 micro-batches ----
  Tensor w16 = zeros({4, 1}, {.dtype = DType::bf16}).requires_grad_();
  Tensor b16 = zeros({1}, {.dtype = DType::bf16}).requires_grad_();
  optim::AdamW adamw({w16, b16}, {.lr = 0.05, .weight_decay = 0.0});
  optim::GradAccumulator acc(4);
  for (int i = 0; i < 4 * 300; ++i) {
    const int64_t m = i % 4;  // micro-batch m: rows [64m, 64m + 64)
    Tensor x = data.x.slice(0, 64 * m, 64 * m + 64).to(DType::bf16);
    Tensor y = data.y.slice(0, 64 * m, 64 * m + 64);
    Tensor loss = mean(pow((matmul(x, w16) + b16).to(DType::f32) - y, 2.0));
    (loss * acc.loss_scale()).backward();  // averages the 4 micro-batch gradients
    if (acc.micro_step()) {
      adamw.step();                        // updates fp32 masters, writes bf16 weights
      adamw.zero_grad();
    }
  }
  const Tensor master = adamw.state(w16, "master");  // the fp32 copy the updates accumulate in
  const float loss16 = mse(matmul(data.x, master) + adamw.state(b16, "master"), data.y);
  std::cout << "bf16 AdamW (fp32 masters): loss " << loss16 << " after " << acc.optimizer_steps() << " steps\n";

  // Saving and resuming: one StateDict for the optimizer, the scheduler and the accumulator.
  StateDict ckpt;
  state_merge(ckpt, opt.state_dict(), "optimizer.");
  state_merge(ckpt, sched.state_dict(), "scheduler.");
  opt.load_state_dict(state_subset(ckpt, "optimizer."));
  sched.load_state_dict(state_subset(ckpt, "scheduler."));

  if (!(loss32 < 0.01f) || !(loss16 < 0.05f)) {
    std::cerr << "the examples did not learn\n";
    return 1;
  }
  return 0;
}
