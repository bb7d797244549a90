// ZeroOptimizer (ZeRO-1) against plain DistributedDataParallel under any world size (1 without
// mpirun): reduce_scatter's sums are all_reduce's, the whole recipe (Adam, f16 autocast, loss
// scaler with an injected overflow, clipping, two accumulation micro-batches) gives the same bits
// in parameters, optimizer state and scale, the state is 1/N per rank, and the state dict is the
// unsharded one (resuming from it, or from a plain optimizer's, continues bit for bit).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <map>

#include "amp/autocast.h"
#include "amp/grad_scaler.h"
#include "core/grad_mode.h"
#include "dist/ddp.h"
#include "dist/zero.h"
#include "ops/functional.h"
#include "optim/adam.h"
#include "optim/clip_grad.h"
#include "optim/sgd.h"
#include "tensor/factory.h"
#include "tensor/safetensors.h"
#include "tensor/state_dict.h"
#include "tests/dist/wave.h"

using namespace precis;
using dist::DistributedDataParallel;
using dist::ZeroOptimizer;
using dist_testing::wave;

namespace {

// Three layers whose weights span several kShardAlign blocks and, with a small bucket cap,
// several buckets, so that shard boundaries cut parameters.
struct Mlp {
  Tensor w0, b0, w1, b1, w2, b2;
  Mlp() {
    w0 = wave({100, 400}, 1.0, 0.05);
    b0 = wave({100}, 2.0, 0.01);
    w1 = wave({180, 100}, 3.0, 0.1);
    b1 = wave({180}, 4.0, 0.01);
    w2 = wave({5, 180}, 5.0, 0.1);
    b2 = wave({5}, 6.0, 0.01);
    for (Tensor* p : {&w0, &b0, &w1, &b1, &w2, &b2}) p->requires_grad_(true);
  }
  DistributedDataParallel::NamedTensors named() const {
    return {{"w0", w0}, {"b0", b0}, {"w1", w1}, {"b1", b1}, {"w2", w2}, {"b2", b2}};
  }
  std::vector<Tensor> params() const { return {w0, b0, w1, b1, w2, b2}; }
  // The loss of (rank, step, micro-batch)'s batch, under f16 autocast.
  Tensor loss(int rank, int step, int micro) const {
    constexpr int64_t kBatch = 6;
    Tensor x = wave({kBatch, 400}, 100.0 * step + 10.0 * micro + rank + 1, 1.0);
    std::vector<int64_t> y;
    for (int64_t i = 0; i < kBatch; ++i) y.push_back((i + step + micro + rank) % 5);
    amp::Autocast autocast(DType::f16);
    Tensor h = relu(linear(x, w0, b0));
    h = relu(linear(h, w1, b1));
    return cross_entropy(linear(h, w2, b2).to(DType::f32), from_vector<int64_t>(y, {kBatch}));
  }
};

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.sizes() != b.sizes()) return false;
  Tensor x = a.detach().contiguous(), y = b.detach().contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), static_cast<size_t>(x.numel()) * x.element_size()) == 0;
}

// Whether two state dicts have the same keys and the same bits under each.
bool same_state(const StateDict& a, const StateDict& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [k, v] : a) {
    auto it = b.find(k);
    if (it == b.end() || !same_bits(v, it->second)) {
      UNSCOPED_INFO("state entry " << k << " differs");
      return false;
    }
  }
  return true;
}

std::unique_ptr<optim::Optimizer> make_adam(std::vector<std::vector<Tensor>> shards) {
  return std::make_unique<optim::Adam>(shards[0], optim::AdamOptions{.lr = 1e-2, .weight_decay = 1e-3});
}

constexpr double kMaxNorm = 0.25;
constexpr int kOverflowStep = 3;

// One training run of `steps` steps from step `first`: two micro-batches per step (the first
// under no_sync), f16 autocast, scaler, clipping, and at kOverflowStep an overflow on rank 0
// only. Counts the skipped and the clipped steps.
struct Counts {
  int skipped = 0, clipped = 0;
};
Counts train(DistributedDataParallel& ddp, optim::Optimizer& opt, amp::GradScaler& scaler, const Mlp& net, int first,
             int steps) {
  Counts c;
  const int rank = ddp.process_group().rank();
  for (int s = first; s < first + steps; ++s) {
    for (int m = 0; m < 2; ++m) {
      ddp.require_sync(m == 1);
      Tensor loss = net.loss(rank, s, m);
      // Gradients past f16's range in the autocast region's backward, the loss itself finite.
      if (s == kOverflowStep && m == 1 && rank == 0) loss = loss * 1e30;
      scaler.scale(loss).backward();
    }
    scaler.unscale_(opt);
    const double norm = scaler.clip_grad_norm_(opt, kMaxNorm).item<double>();
    amp::StepResult r = scaler.step(opt);
    scaler.update();
    opt.zero_grad();
    c.skipped += r.applied() ? 0 : 1;
    c.clipped += r.applied() && norm > kMaxNorm ? 1 : 0;
  }
  return c;
}

dist::DistributedDataParallelOptions small_buckets(amp::GradScaler* scaler) {
  return {.bucket_cap_mb = 0.1, .first_bucket_cap_mb = 0.02, .scaler = scaler};
}

}  // namespace

TEST_CASE("zero: reduce_scatter gives all_reduce's sums bit for bit wherever the block sits in the buffer",
          "[dist][zero]") {
  auto pg = dist::init_process_group();
  const int64_t n = pg->size();
  for (int64_t count : {1000, 40000, 300000}) {
    // Values of many magnitudes, so that a different summation order would show.
    Tensor mine = wave({count}, pg->rank() + 0.5, 1.0) * exp(wave({count}, pg->rank() + 7.0, 20.0));
    Tensor reduced = mine.clone();
    pg->all_reduce(reduced, dist::ReduceOp::sum)->wait();
    for (int64_t shift : {0, 777, 3 * 16384 + 5}) {
      const int64_t block = (count + shift + n - 1) / n;
      Tensor in = zeros({block * n});
      in.narrow(0, shift, count).copy_(mine);
      Tensor out = full({block}, -1.0);
      pg->reduce_scatter(in, out, dist::ReduceOp::sum)->wait();
      const int64_t lo = std::max<int64_t>(pg->rank() * block, shift);
      const int64_t hi = std::min<int64_t>((pg->rank() + 1) * block, shift + count);
      if (hi <= lo) continue;
      INFO("count " << count << " shift " << shift << " rank " << pg->rank());
      CHECK(same_bits(out.narrow(0, lo - pg->rank() * block, hi - lo), reduced.narrow(0, lo - shift, hi - lo)));
    }
  }
  Tensor in = full({2 * n}, 1.0), bad = zeros({3});
  CHECK_THROWS_AS(pg->reduce_scatter(in, bad, dist::ReduceOp::sum), ShapeError);
}

TEST_CASE("zero: Adam, f16 autocast, scaler with an overflow, clipping and 2 micro-batches equal plain DDP bit for bit",
          "[dist][zero]") {
  auto pg = dist::init_process_group();
  constexpr int kSteps = 9;
  const amp::GradScalerOptions so{.init_scale = 1024.0, .growth_interval = 3};

  Mlp plain_net;
  amp::GradScaler plain_scaler(so);
  DistributedDataParallel plain_ddp(pg, plain_net.named(), {}, small_buckets(&plain_scaler));
  auto plain_opt = make_adam({plain_net.params()});
  const Counts pc = train(plain_ddp, *plain_opt, plain_scaler, plain_net, 0, kSteps);

  Mlp net;
  amp::GradScaler scaler(so);
  DistributedDataParallel ddp(pg, net.named(), {}, small_buckets(&scaler));
  ZeroOptimizer opt(ddp, net.params(), make_adam);
  REQUIRE(ddp.sharded());
  REQUIRE(ddp.bucket_parameter_names().size() >= 2);
  const Counts zc = train(ddp, opt, scaler, net, 0, kSteps);

  // The run exercised what it claims to: one skipped step, clipped steps.
  CHECK(pc.skipped == 1);
  CHECK(pc.clipped >= 2);
  CHECK(zc.skipped == pc.skipped);
  CHECK(zc.clipped == pc.clipped);
  CHECK(scaler.get_scale() == plain_scaler.get_scale());
  for (size_t i = 0; i < net.params().size(); ++i) {
    INFO("parameter " << i);
    CHECK(same_bits(net.params()[i], plain_net.params()[i]));
  }
  CHECK(same_state(opt.state_dict(), plain_opt->state_dict()));
}

TEST_CASE("zero: clip_grad_norm_ without a scaler (SGD, f32) equals plain DDP's clipping bit for bit", "[dist][zero]") {
  auto pg = dist::init_process_group();
  auto make_sgd = [](std::vector<std::vector<Tensor>> shards) -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<optim::SGD>(shards[0], optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
  };
  Mlp plain_net, net;
  DistributedDataParallel plain_ddp(pg, plain_net.named(), {}, small_buckets(nullptr));
  auto plain_opt = make_sgd({plain_net.params()});
  DistributedDataParallel ddp(pg, net.named(), {}, small_buckets(nullptr));
  ZeroOptimizer opt(ddp, net.params(), make_sgd);
  int clipped = 0;
  for (int s = 0; s < 4; ++s) {
    plain_net.loss(pg->rank(), s, 0).backward();
    const double plain_norm = optim::clip_grad_norm_(plain_net.params(), 0.2).item<double>();
    plain_opt->step();
    plain_opt->zero_grad();
    net.loss(pg->rank(), s, 0).backward();
    const double norm = opt.clip_grad_norm_(0.2).item<double>();
    opt.step();
    opt.zero_grad();
    CHECK(norm == plain_norm);
    clipped += norm > 0.2;
  }
  CHECK(clipped >= 2);
  for (size_t i = 0; i < net.params().size(); ++i) {
    INFO("parameter " << i);
    CHECK(same_bits(net.params()[i], plain_net.params()[i]));
  }
  CHECK(same_state(opt.state_dict(), plain_opt->state_dict()));
  CHECK_THROWS_AS(opt.clip_grad_norm_(1.0, 1.0), NotImplementedError);
}

TEST_CASE("zero: with find_unused_parameters a parameter no rank used is not stepped, as with plain DDP",
          "[dist][zero]") {
  // Its shard pieces get no gradient, so weight decay and momentum leave it alone (before: a zero
  // gradient, and SGD's weight decay moved it).
  auto pg = dist::init_process_group();
  auto make_sgd = [](std::vector<std::vector<Tensor>> shards) -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<optim::SGD>(shards[0], optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 0.5});
  };
  Mlp plain_net, net;
  const Tensor plain_spare = wave({3000}, 7.0, 0.1).requires_grad_(true);
  const Tensor spare = wave({3000}, 7.0, 0.1).requires_grad_(true);
  const Tensor before = spare.detach().clone();
  auto with_spare = [](DistributedDataParallel::NamedTensors named, const Tensor& s) {
    named.emplace_back("spare", s);
    return named;
  };
  dist::DistributedDataParallelOptions o = small_buckets(nullptr);
  o.find_unused_parameters = true;
  DistributedDataParallel plain_ddp(pg, with_spare(plain_net.named(), plain_spare), {}, o);
  std::vector<Tensor> plain_params = plain_net.params(), params = net.params();
  plain_params.push_back(plain_spare);
  params.push_back(spare);
  auto plain_opt = make_sgd({plain_params});
  DistributedDataParallel ddp(pg, with_spare(net.named(), spare), {}, o);
  ZeroOptimizer opt(ddp, params, make_sgd);
  for (int s = 0; s < 3; ++s) {
    plain_net.loss(pg->rank(), s, 0).backward();
    plain_opt->step();
    plain_opt->zero_grad();
    net.loss(pg->rank(), s, 0).backward();
    opt.step();
    opt.zero_grad();
  }
  CHECK(same_bits(spare, before));
  CHECK(same_bits(plain_spare, before));
  for (size_t i = 0; i < params.size(); ++i) {
    INFO("parameter " << i);
    CHECK(same_bits(params[i], plain_params[i]));
  }
}

TEST_CASE("zero: each rank holds 1/N of the optimizer state, and the ranks together hold plain DDP's",
          "[dist][zero]") {
  auto pg = dist::init_process_group();
  Mlp net;
  DistributedDataParallel ddp(pg, net.named(), {}, small_buckets(nullptr));
  ZeroOptimizer opt(ddp, net.params(), make_adam);
  net.loss(pg->rank(), 0, 0).backward();
  opt.step();
  int64_t mine = 0;
  for (const Tensor& piece : opt.parameters())
    for (const char* key : {"exp_avg", "exp_avg_sq"})
      if (Tensor t = opt.state(piece, key); t.defined()) mine += t.numel();
  int64_t total = 0;
  for (const Tensor& p : net.params()) total += 2 * p.numel();
  Tensor all = from_vector<int64_t>({mine});
  pg->all_reduce(all, dist::ReduceOp::sum)->wait();
  CHECK(all.item<int64_t>() == total);
  // Padding and alignment make shards unequal by at most a block per bucket.
  const int64_t buckets = static_cast<int64_t>(ddp.bucket_parameter_names().size());
  CHECK(mine <= total / pg->size() + 2 * buckets * ZeroOptimizer::kShardAlign);
}

TEST_CASE("zero: the state dict is the unsharded one; loading it, or a plain optimizer's, continues bit for bit",
          "[dist][zero]") {
  auto pg = dist::init_process_group();
  const amp::GradScalerOptions so{.init_scale = 1024.0, .growth_interval = 3};
  Mlp ref;
  amp::GradScaler ref_scaler(so);
  DistributedDataParallel ref_ddp(pg, ref.named(), {}, small_buckets(&ref_scaler));
  ZeroOptimizer ref_opt(ref_ddp, ref.params(), make_adam);
  train(ref_ddp, ref_opt, ref_scaler, ref, 0, 6);

  for (bool from_plain : {false, true}) {
    INFO((from_plain ? "from a plain Adam's state dict" : "from a ZeroOptimizer's state dict"));
    // The first 3 steps, saved.
    Mlp first;
    amp::GradScaler first_scaler(so);
    DistributedDataParallel first_ddp(pg, first.named(), {}, small_buckets(&first_scaler));
    StateDict saved;
    if (from_plain) {
      auto opt = make_adam({first.params()});
      train(first_ddp, *opt, first_scaler, first, 0, 3);
      saved = opt->state_dict();
    } else {
      ZeroOptimizer opt(first_ddp, first.params(), make_adam);
      train(first_ddp, opt, first_scaler, first, 0, 3);
      saved = opt.state_dict();
    }
    // A new job, set up as at the start, then given the saved parameters, optimizer and scaler
    // (after the optimizer exists, as precis-train resumes).
    Mlp resumed;
    amp::GradScaler scaler(so);
    DistributedDataParallel ddp(pg, resumed.named(), {}, small_buckets(&scaler));
    ZeroOptimizer opt(ddp, resumed.params(), make_adam);
    {
      NoGradGuard no_grad;
      for (size_t i = 0; i < resumed.params().size(); ++i) Tensor(resumed.params()[i]).detach().copy_(first.params()[i]);
    }
    scaler.load_state_dict(first_scaler.state_dict());
    opt.load_state_dict(saved);
    CHECK(same_state(opt.state_dict(), saved));  // the round trip through the shards loses nothing
    train(ddp, opt, scaler, resumed, 3, 3);
    for (size_t i = 0; i < ref.params().size(); ++i) {
      INFO("parameter " << i);
      CHECK(same_bits(resumed.params()[i], ref.params()[i]));
    }
    CHECK(same_state(opt.state_dict(), ref_opt.state_dict()));
  }
}

TEST_CASE("zero: misuse is a typed error naming the problem", "[dist][zero]") {
  auto pg = dist::init_process_group();
  Mlp net;
  DistributedDataParallel ddp(pg, net.named(), {}, small_buckets(nullptr));
  Tensor stranger = zeros({3}).requires_grad_(true);
  CHECK_THROWS_AS(ZeroOptimizer(ddp, {net.w0, stranger}, make_adam), ValueError);
  Mlp other;
  DistributedDataParallel ddp2(pg, other.named(), {}, small_buckets(nullptr));
  ZeroOptimizer opt(ddp2, other.params(), make_adam);
  CHECK_THROWS_AS(ZeroOptimizer(ddp2, other.params(), make_adam), StateError);
  StateDict wrong;
  CHECK_THROWS_AS(opt.load_state_dict(wrong), ValueError);
}

TEST_CASE("zero: clipping the model's parameters is refused while a ZeroOptimizer shards their gradients",
          "[dist][zero]") {
  // Their .grad is the rank's unreduced gradient; clipping it changed nothing the optimizer steps
  // (before: no error, and no clipping).
  auto pg = dist::init_process_group();
  Mlp net;
  DistributedDataParallel ddp(pg, net.named(), {}, small_buckets(nullptr));
  {
    ZeroOptimizer opt(ddp, net.params(), make_adam);
    net.loss(pg->rank(), 0, 0).backward();
    CHECK_THROWS_AS(optim::clip_grad_norm_(net.params(), 0.1), StateError);
    CHECK_THROWS_WITH(optim::clip_grad_norm_(net.params(), 0.1), Catch::Contains("opt.clip_grad_norm_(max_norm)"));
    CHECK_THROWS_AS(optim::clip_grad_value_({net.b0}, 0.1), StateError);
    CHECK_THROWS_AS(optim::grad_norms(net.params()), StateError);
    CHECK(opt.clip_grad_norm_(0.1).item<double>() > 0.0);  // the way that works
    optim::clip_grad_value_(opt.parameters(), 0.1);
  }
  CHECK_NOTHROW(optim::clip_grad_norm_(net.params(), 0.1));  // lifted with the optimizer
}

// Resharding across world sizes, driven by tests/dist/zero_reshard.sh: PRECIS_ZERO_RESHARD=save
// (at np 2) trains 3 steps and writes parameters, optimizer and scaler state to
// $PRECIS_ZERO_RESHARD_DIR/ckpt.safetensors; =resume (at np 3 and np 1) loads it into a
// ZeroOptimizer, whose state_dict() must give the file's state back bit for bit, and continues 3
// steps beside plain DDP resumed from the same file: the two must agree bit for bit. (Hidden tag:
// the plain dist runs skip it.)
TEST_CASE("zero: a state saved at one world size resumes at another", "[.zero_reshard]") {
  const char* mode = std::getenv("PRECIS_ZERO_RESHARD");
  const char* dir = std::getenv("PRECIS_ZERO_RESHARD_DIR");
  REQUIRE(mode != nullptr);
  REQUIRE(dir != nullptr);
  const std::string path = std::string(dir) + "/ckpt.safetensors";
  auto pg = dist::init_process_group();
  const amp::GradScalerOptions so{.init_scale = 1024.0, .growth_interval = 3};
  auto set_params = [](const Mlp& net, const StateDict& params) {
    NoGradGuard no_grad;
    const auto named = net.named();
    for (const auto& [name, t] : named) Tensor(t).detach().copy_(params.at(name));
  };
  if (std::string(mode) == "save") {
    Mlp net;
    amp::GradScaler scaler(so);
    DistributedDataParallel ddp(pg, net.named(), {}, small_buckets(&scaler));
    ZeroOptimizer opt(ddp, net.params(), make_adam);
    const Counts c = train(ddp, opt, scaler, net, 0, 5);  // past kOverflowStep: one skipped step
    CHECK(c.skipped == 1);
    StateDict all;
    for (const auto& [name, t] : net.named()) all["model." + name] = t.detach();
    state_merge(all, opt.state_dict(), "optimizer.");  // a collective: every rank
    state_merge(all, scaler.state_dict(), "scaler.");
    if (pg->rank() == 0) save_safetensors(path, NamedTensors(all.begin(), all.end()), {{"world_size", std::to_string(pg->size())}});
    pg->barrier()->wait();
    return;
  }
  REQUIRE(std::string(mode) == "resume");
  const SafetensorsFile file = load_safetensors(path);
  StateDict all;
  for (const std::string& name : file.names()) all[name] = file.get(name);
  INFO("saved at np " << file.metadata.at("world_size") << ", resumed at np " << pg->size());
  const StateDict saved_opt = state_subset(all, "optimizer."), saved_params = state_subset(all, "model.");

  Mlp plain_net;
  amp::GradScaler plain_scaler(so);
  DistributedDataParallel plain_ddp(pg, plain_net.named(), {}, small_buckets(&plain_scaler));
  auto plain_opt = make_adam({plain_net.params()});
  set_params(plain_net, saved_params);
  plain_opt->load_state_dict(saved_opt);
  plain_scaler.load_state_dict(state_subset(all, "scaler."));

  Mlp net;
  amp::GradScaler scaler(so);
  DistributedDataParallel ddp(pg, net.named(), {}, small_buckets(&scaler));
  ZeroOptimizer opt(ddp, net.params(), make_adam);
  set_params(net, saved_params);
  opt.load_state_dict(saved_opt);
  scaler.load_state_dict(state_subset(all, "scaler."));
  CHECK(same_state(opt.state_dict(), saved_opt));  // resharded without losing a bit

  train(plain_ddp, *plain_opt, plain_scaler, plain_net, 5, 4);
  train(ddp, opt, scaler, net, 5, 4);
  for (size_t i = 0; i < net.params().size(); ++i) {
    INFO("parameter " << i);
    CHECK(same_bits(net.params()[i], plain_net.params()[i]));
  }
  CHECK(same_state(opt.state_dict(), plain_opt->state_dict()));
  CHECK(scaler.get_scale() == plain_scaler.get_scale());
}
