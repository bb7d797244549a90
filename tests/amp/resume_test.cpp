// Resuming mixed-precision training mid-run continues bit for bit. Everything a training loop
// carries — f16 model weights, the optimizer's fp32 masters and moments, the loss scaler (scale,
// trackers, history), the LR schedule, the accumulation counter, the data-loader position and the
// dropout RNG — is saved to one safetensors file at step k and loaded into fresh objects; the
// continued run must equal the uninterrupted one in every bit. The run includes overflow skips
// (init scale at the cap), scale growth, clipping through the scaler and dropout.
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include <catch2/catch.hpp>

#include "amp/grad_scaler.h"
#include "autograd/grad_mode.h"
#include "core/rng.h"
#include "data/data_loader.h"
#include "ops/functional.h"
#include "optim/accumulation.h"
#include "optim/adam.h"
#include "optim/lr_scheduler.h"
#include "tensor/factory.h"
#include "tensor/safetensors.h"
#include "tensor/state_dict.h"

namespace precis::amp {
namespace {

constexpr int64_t kIn = 8, kHidden = 32, kClasses = 4, kExamples = 96;

std::shared_ptr<data::TensorDataset> make_data() {
  Generator gen(11);
  Tensor x = randn({kExamples, kIn}, {}, &gen);
  Tensor y = randint(0, kClasses, {kExamples}, {.dtype = DType::i64}, &gen);
  return std::make_shared<data::TensorDataset>(std::vector<Tensor>{x, y});
}

// One training job: an f16 MLP (low-precision model mode) with dropout, AdamW, GradScaler,
// warmup + cosine schedule, accumulation over 2 micro-batches, a shuffling loader.
struct Job {
  std::vector<std::string> names = {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"};
  std::vector<Tensor> params;
  std::unique_ptr<optim::AdamW> opt;
  GradScaler scaler;
  std::unique_ptr<optim::WarmupDecayLR> sched;
  optim::GradAccumulator acc{2};
  data::DataLoader loader;

  Job(uint64_t init_seed, GradScalerOptions scaler_options)
      : scaler(scaler_options), loader(make_data(), {.batch_size = 8, .shuffle = true, .seed = 5}) {
    Generator gen(init_seed);
    for (const Shape& s : {Shape{kHidden, kIn}, Shape{kHidden}, Shape{kClasses, kHidden}, Shape{kClasses}})
      params.push_back(((rand(s, {}, &gen) - 0.5) * 0.6).to(DType::f16).requires_grad_());
    opt = std::make_unique<optim::AdamW>(params, optim::AdamWOptions{.lr = 2e-2});
    sched = std::make_unique<optim::WarmupDecayLR>(*opt, optim::WarmupDecayLROptions{.warmup_steps = 4, .total_steps = 40});
    std::vector<std::pair<std::string, Tensor>> named;
    for (size_t i = 0; i < params.size(); ++i) named.emplace_back(names[i], params[i]);
    scaler.set_parameter_names(named);
  }

  Tensor forward(const Tensor& x) const {
    Tensor h = relu(linear(x.to(DType::f16), params[0], params[1]));
    h = dropout(h, 0.1, /*training=*/true);  // draws from the default generator
    return linear(h, params[2], params[3]).to(DType::f32);
  }

  // Trains until `target` optimizer steps (applied or skipped) have been taken in total.
  void run_until(int64_t target) {
    while (acc.optimizer_steps() < target) {
      for (data::Batch& b : loader) {
        Tensor loss = cross_entropy(forward(b[0]), b[1]);
        scaler.scale(loss * acc.loss_scale()).backward();
        if (acc.micro_step()) {
          scaler.unscale_(*opt);
          scaler.clip_grad_norm_(*opt, 1.0);
          const StepResult r = scaler.step(*opt);
          scaler.update();
          sched->step(r.applied());
          opt->zero_grad();
          if (acc.optimizer_steps() >= target) break;
        }
      }
    }
  }

  NamedTensors checkpoint() const {
    StateDict d;
    for (size_t i = 0; i < params.size(); ++i) d["model." + names[i]] = params[i].detach().clone();
    state_merge(d, opt->state_dict(), "optimizer.");
    state_merge(d, scaler.state_dict(), "scaler.");
    state_merge(d, sched->state_dict(), "scheduler.");
    state_merge(d, acc.state_dict(), "accumulator.");
    d["data.epoch"] = state_int(loader.position().epoch);
    d["data.batch"] = state_int(loader.position().batch);
    // The generator's state is two u64; stored bit for bit in i64 tensors.
    const Generator& g = default_generator();
    d["rng.seed"] = state_int(static_cast<int64_t>(g.seed()));
    d["rng.offset"] = state_int(static_cast<int64_t>(g.offset()));
    return NamedTensors(d.begin(), d.end());
  }

  void restore(const SafetensorsFile& file) {
    const StateDict d(file.tensors.begin(), file.tensors.end());
    {
      NoGradGuard g;
      for (size_t i = 0; i < params.size(); ++i) params[i].copy_(file.get("model." + names[i]));
    }
    opt->load_state_dict(state_subset(d, "optimizer."));
    scaler.load_state_dict(state_subset(d, "scaler."));
    sched->load_state_dict(state_subset(d, "scheduler."));
    acc.load_state_dict(state_subset(d, "accumulator."));
    loader.set_position(state_get_int(d, "data.epoch", "checkpoint"), state_get_int(d, "data.batch", "checkpoint"));
    default_generator().set_state(static_cast<uint64_t>(state_get_int(d, "rng.seed", "checkpoint")),
                                  static_cast<uint64_t>(state_get_int(d, "rng.offset", "checkpoint")));
  }
};

// The raw bits of a tensor of `dtype` (whose elements are sizeof(Bits) bytes), for exact compares.
template <class Bits>
std::vector<Bits> raw_bits(const Tensor& t, DType dtype) {
  REQUIRE(t.dtype() == dtype);
  Tensor c = t.contiguous();
  std::vector<Bits> out(static_cast<size_t>(c.numel()));
  std::memcpy(out.data(), c.data_ptr(), out.size() * sizeof(Bits));
  return out;
}
std::vector<uint16_t> bits_of(const Tensor& t) { return raw_bits<uint16_t>(t, DType::f16); }
std::vector<uint32_t> bits_of_f32(const Tensor& t) { return raw_bits<uint32_t>(t, DType::f32); }

uint64_t bits_of(double v) {
  uint64_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

TEST_CASE("a mixed-precision run resumed from a safetensors checkpoint continues bit for bit", "[amp][resume]") {
  constexpr int64_t kCheckpoint = 9, kTotal = 24;
  // The scale starts at its cap, so f16 gradients overflow and the first steps are skipped; a
  // short growth interval lets it grow (and overflow) again later.
  const GradScalerOptions scaler_options{.init_scale = 16777216.0, .growth_interval = 4};

  manual_seed(42);
  Job full(/*init_seed=*/1, scaler_options);
  full.run_until(kCheckpoint);
  // The checkpoint goes through a real file.
  const std::string path =
      (std::filesystem::temp_directory_path() / ("precis_amp_resume_" + std::to_string(::getpid()) + ".safetensors"))
          .string();
  save_safetensors(path, full.checkpoint());
  full.run_until(kTotal);
  const uint64_t full_rng_offset = default_generator().offset();

  // Everything about the resumed job is fresh: other initial weights, default scaler options (the
  // saved ones are restored), another RNG state.
  manual_seed(999);
  Job resumed(/*init_seed=*/2, GradScalerOptions{});
  resumed.restore(load_safetensors(path));
  std::filesystem::remove(path);
  resumed.run_until(kTotal);

  // The run exercised what it should: skips, growth, clipping norms.
  const auto h_full = full.scaler.history();
  REQUIRE(h_full.size() == kTotal);
  int64_t skipped = 0;
  for (const HistoryEntry& e : h_full) skipped += !e.applied;
  CHECK(skipped >= 2);
  CHECK(skipped < kTotal / 2);
  bool grew = false;
  for (size_t i = 1; i < h_full.size(); ++i) grew = grew || h_full[i].scale > h_full[i - 1].scale;
  CHECK(grew);

  // Bit for bit: weights, masters and moments, scale, history, schedule, counters, data, RNG.
  for (size_t i = 0; i < full.params.size(); ++i) {
    INFO(full.names[i]);
    CHECK(bits_of(resumed.params[i]) == bits_of(full.params[i]));
    for (const char* key : {"master", "exp_avg", "exp_avg_sq", "step"})
      CHECK(bits_of_f32(resumed.opt->state(resumed.params[i], key)) == bits_of_f32(full.opt->state(full.params[i], key)));
  }
  CHECK(bits_of(resumed.scaler.get_scale()) == bits_of(full.scaler.get_scale()));
  const auto h_resumed = resumed.scaler.history();
  REQUIRE(h_resumed.size() == h_full.size());
  for (size_t i = 0; i < h_full.size(); ++i) {
    INFO("history entry " << i);
    CHECK(h_resumed[i].step == h_full[i].step);
    CHECK(bits_of(h_resumed[i].scale) == bits_of(h_full[i].scale));
    CHECK(h_resumed[i].applied == h_full[i].applied);
    CHECK(h_resumed[i].reason == h_full[i].reason);
    CHECK(bits_of(h_resumed[i].grad_norm) == bits_of(h_full[i].grad_norm));
  }
  CHECK(resumed.scaler.steps() == full.scaler.steps());
  CHECK(bits_of(resumed.sched->get_last_lr()[0]) == bits_of(full.sched->get_last_lr()[0]));
  CHECK(resumed.sched->last_step() == full.sched->last_step());
  CHECK(resumed.loader.position() == full.loader.position());
  CHECK(resumed.acc.optimizer_steps() == full.acc.optimizer_steps());
  CHECK(default_generator().offset() == full_rng_offset);
}

}  // namespace
}  // namespace precis::amp
