// The snippets of docs/mixed-precision.md, compiled and run by the test suite. A small MLP
// classifier trained three ways on the CPU:
//   1. autocast f16 + GradScaler + clipping + gradient accumulation + LR schedule (fp32 weights);
//   2. the low-precision model mode: f16 weights, fp32 master weights in AdamW, GradScaler;
//   3. autocast bf16 (no scaler needed), with a policy override and an audit.
// Each must learn; the program returns 1 otherwise.
#include <precis/precis.h>

#include <cstdio>
#include <iostream>
#include <vector>

using namespace precis;

namespace {

// 512 points in 2-D, 4 classes (the quadrant of a rotated point), as f32 inputs and i64 labels.
struct Data {
  Tensor x, y;
  Data() {
    Generator gen(0);
    x = randn({512, 2}, {}, &gen);
    Tensor u = x.slice(1, 0, 1) + 0.5 * x.slice(1, 1, 2), v = x.slice(1, 1, 2) - 0.5 * x.slice(1, 0, 1);
    y = (gt(u, 0.0).to(DType::i64) * 2 + gt(v, 0.0).to(DType::i64)).reshape({512});
  }
};

struct Mlp {
  Tensor w1, b1, w2, b2;
  Mlp(DType dtype, uint64_t seed) {
    Generator gen(seed);
    w1 = (randn({64, 2}, {}, &gen) * 0.5).to(dtype).requires_grad_();
    b1 = zeros({64}, {.dtype = dtype}).requires_grad_();
    w2 = (randn({4, 64}, {}, &gen) * 0.1).to(dtype).requires_grad_();
    b2 = zeros({4}, {.dtype = dtype}).requires_grad_();
  }
  std::vector<Tensor> parameters() const { return {w1, b1, w2, b2}; }
  std::vector<std::pair<std::string, Tensor>> named_parameters() const {
    return {{"fc1.weight", w1}, {"fc1.bias", b1}, {"fc2.weight", w2}, {"fc2.bias", b2}};
  }
  Tensor forward(const Tensor& x) const { return linear(relu(linear(x, w1, b1)), w2, b2); }
};

double accuracy(const Mlp& m, const Data& d) {
  NoGradGuard no_grad;
  Tensor pred = std::get<1>(max(m.forward(d.x.to(m.w1.dtype())), 1));
  return mean(eq(pred, d.y).to(DType::f32)).item<double>();
}

}  // namespace

int main() {
  const Data data;
  constexpr int64_t kMicro = 4, kMicroBatch = 32;  // 4 micro-batches of 32 = one step of 128

  // ---- 1. autocast f16 + scaler + clipping + accumulation + schedule ---------------------------
  Mlp model(DType::f32, 1);
  optim::SGD opt(model.parameters(), {.lr = 0.2, .momentum = 0.9});
  optim::WarmupDecayLR sched(opt, {.warmup_steps = 10, .total_steps = 120});
  amp::GradScaler scaler;  // init scale 2^16, x2 every 2000 clean steps, x0.5 on overflow
  scaler.set_parameter_names(model.named_parameters());  // for overflow reports
  optim::GradAccumulator acc(kMicro);
  int64_t skipped = 0;
  for (int64_t i = 0; i < 120 * kMicro; ++i) {
    const int64_t start = (i % 16) * kMicroBatch;  // micro-batches cycle through the data
    Tensor x = data.x.slice(0, start, start + kMicroBatch), y = data.y.slice(0, start, start + kMicroBatch);
    Tensor loss;
    {
      amp::Autocast autocast(DType::f16);         // linear runs in f16, cross_entropy in fp32
      loss = cross_entropy(model.forward(x), y);  // fp32 (the FP32 category)
    }
    scaler.scale(loss * acc.loss_scale()).backward();  // outside the region; grads add up
    if (acc.micro_step()) {                            // the 4th micro-batch: one optimizer step
      scaler.unscale_(opt);                            // once per optimizer step, before clipping
      scaler.clip_grad_norm_(opt, 1.0);                // reuses unscale_'s norms: no extra pass
      const amp::StepResult r = scaler.step(opt);      // skipped if any gradient is inf/NaN
      scaler.update();                                 // once, after every optimizer's step
      sched.step(r.applied());                         // the schedule counts applied steps only
      if (!r.applied()) {
        ++skipped;
        std::cout << "step skipped (" << amp::skip_reason_name(r.reason()) << "), scale " << r.scale_before()
                  << " -> " << r.scale_after() << "\n";
      }
      opt.zero_grad();
    }
  }
  const double acc1 = accuracy(model, data);
  std::cout << "1. autocast f16 + scaler: accuracy " << acc1 << ", scale " << scaler.get_scale() << ", skipped "
            << skipped << "\n";

  // ---- 2. low-precision model mode: f16 weights, fp32 masters ----------------------------------
  Mlp model16(DType::f16, 1);                      // half the weight memory
  optim::AdamW adamw(model16.parameters(), {.lr = 1e-2, .weight_decay = 0.0});
  amp::GradScaler scaler16;
  for (int64_t step = 0; step < 150; ++step) {
    const int64_t start = (step % 4) * 128;
    Tensor x = data.x.slice(0, start, start + 128).to(DType::f16);
    Tensor y = data.y.slice(0, start, start + 128);
    adamw.zero_grad();
    Tensor loss = cross_entropy(model16.forward(x).to(DType::f32), y);  // the loss in fp32
    scaler16.scale(loss).backward();      // f16 gradients, scaled so small ones survive
    scaler16.unscale_(adamw);             // f16 gradients stay scaled in storage (see the docs)
    scaler16.clip_grad_norm_(adamw, 1.0);
    scaler16.step(adamw);                 // fp32 masters updated, rounded into the f16 weights
    scaler16.update();
  }
  const double acc2 = accuracy(model16, data);
  std::cout << "2. f16 weights + fp32 masters: accuracy " << acc2 << ", master dtype "
            << dtype_name(adamw.state(model16.w1, "master").dtype()) << "\n";

  // ---- 3. autocast bf16 with a policy override and an audit ------------------------------------
  Mlp model_bf(DType::f32, 1);
  optim::Adam adam(model_bf.parameters(), {.lr = 1e-2});
  amp::set_category(OpId::relu, Category::FP32);  // e.g. pin an op to fp32 after an audit
  for (int64_t step = 0; step < 150; ++step) {
    const int64_t start = (step % 4) * 128;
    adam.zero_grad();
    Tensor loss;
    {
      amp::Autocast autocast(DType::bf16);  // the CPU default: fp32's range, no scaler needed
      loss = cross_entropy(model_bf.forward(data.x.slice(0, start, start + 128)), data.y.slice(0, start, start + 128));
    }
    loss.backward();
    adam.step();
  }
  amp::reset_categories();
  {
    amp::Audit audit;                        // what would fp16 face? magnitudes per op
    amp::Autocast autocast(DType::f16);
    NoGradGuard no_grad;
    model_bf.forward(data.x);
    std::cout << "3. audit:\n" << audit.report();
    std::cout << "   ops within 2x of the fp16 max: " << audit.near_fp16_limit().size() << "\n";
  }
  const double acc3 = accuracy(model_bf, data);
  std::cout << "3. autocast bf16: accuracy " << acc3 << "\n";

  // Checkpoint: the scaler's state is part of the run's state (save it with the optimizer's).
  StateDict ckpt;
  state_merge(ckpt, opt.state_dict(), "optimizer.");
  state_merge(ckpt, scaler.state_dict(), "scaler.");
  state_merge(ckpt, sched.state_dict(), "scheduler.");
  amp::GradScaler restored;
  restored.load_state_dict(state_subset(ckpt, "scaler."));

  if (!(acc1 > 0.9) || !(acc2 > 0.9) || !(acc3 > 0.9) || restored.get_scale() != scaler.get_scale()) {
    std::cerr << "the mixed-precision examples did not learn\n";
    return 1;
  }
  return 0;
}
