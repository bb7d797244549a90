// DistributedDataParallel on a small MLP with batch norm, under any world size (1 without mpirun):
// construction checks and broadcast, the mean of the gradients, bucketing, no_sync, unused
// parameters, the loss scaler's consensus, and exactness against one process accumulating.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>

#include "amp/grad_scaler.h"
#include "core/grad_mode.h"
#include "dist/ddp.h"
#include "ops/functional.h"
#include "optim/sgd.h"
#include "tensor/factory.h"
#include "tests/dist/wave.h"

using namespace precis;
using dist::DistributedDataParallel;

namespace {

// Counts the collectives that pass through it (and the all_reduce sizes, in order).
class CountingGroup : public dist::ProcessGroup {
 public:
  explicit CountingGroup(std::shared_ptr<dist::ProcessGroup> inner) : inner_(std::move(inner)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  int local_rank() const override { return inner_->local_rank(); }
  std::string backend() const override { return "counting(" + inner_->backend() + ")"; }
  std::shared_ptr<dist::Work> all_reduce(const Tensor& t, dist::ReduceOp op) override {
    reduce_numels.push_back(t.numel());
    return inner_->all_reduce(t, op);
  }
  std::shared_ptr<dist::Work> broadcast(const Tensor& t, int root) override {
    ++broadcasts;
    return inner_->broadcast(t, root);
  }
  std::shared_ptr<dist::Work> all_gather(const Tensor& in, const Tensor& out) override {
    ++gathers;
    return inner_->all_gather(in, out);
  }
  std::shared_ptr<dist::Work> barrier() override { return inner_->barrier(); }
  std::vector<int64_t> reduce_numels;
  int broadcasts = 0, gathers = 0;

 private:
  std::shared_ptr<dist::ProcessGroup> inner_;
};

using dist_testing::wave;

struct Net {
  Tensor w1, b1, gamma, beta, w2, b2, rm, rv;
  explicit Net(double seed) {
    w1 = wave({8, 6}, seed);
    b1 = wave({8}, seed + 1, 0.1);
    gamma = full({8}, 1.0);
    beta = zeros({8});
    w2 = wave({3, 8}, seed + 2);
    b2 = wave({3}, seed + 3, 0.1);
    for (Tensor* p : {&w1, &b1, &gamma, &beta, &w2, &b2}) p->requires_grad_(true);
    rm = zeros({8});
    rv = full({8}, 1.0);
  }
  DistributedDataParallel::NamedTensors params() const {
    return {{"fc1.weight", w1}, {"fc1.bias", b1}, {"bn.weight", gamma}, {"bn.bias", beta},
            {"fc2.weight", w2}, {"fc2.bias", b2}};
  }
  DistributedDataParallel::NamedTensors buffers() const { return {{"bn.running_mean", rm}, {"bn.running_var", rv}}; }
  std::vector<Tensor> tensors() const { return {w1, b1, gamma, beta, w2, b2}; }
  Tensor loss(int64_t first, int64_t count) const {
    std::vector<float> x;
    std::vector<int64_t> y;
    for (int64_t i = first; i < first + count; ++i) {
      for (int j = 0; j < 6; ++j) x.push_back(static_cast<float>(std::sin(0.37 * i + 0.11 * j * j + 0.5 * j)));
      y.push_back(i % 3);
    }
    Tensor h = linear(from_vector<float>(x, {count, 6}), w1, b1);
    h = relu(batch_norm(h, rm, rv, gamma, beta, /*training=*/true));
    return cross_entropy(linear(h, w2, b2), from_vector<int64_t>(y, {count}));
  }
};

std::vector<float> flat_grads(const Net& net) {
  std::vector<float> out;
  for (const Tensor& p : net.tensors()) {
    auto g = p.grad().to_vector<float>();
    out.insert(out.end(), g.begin(), g.end());
  }
  return out;
}

std::vector<float> flat_values(const Net& net) {
  std::vector<float> out;
  for (const Tensor& p : net.tensors()) {
    auto v = p.detach().to_vector<float>();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Whether every rank holds the same bits in `v`.
bool same_on_every_rank(dist::ProcessGroup& pg, const std::vector<float>& v) {
  Tensor mine = from_vector<float>(v, {static_cast<int64_t>(v.size())});
  Tensor all = zeros({pg.size(), static_cast<int64_t>(v.size())});
  pg.all_gather(mine, all)->wait();
  for (int r = 0; r < pg.size(); ++r)
    if (!same_bits(all.select(0, r).to_vector<float>(), v)) return false;
  return true;
}

constexpr int64_t kBatch = 4;  // examples per rank per step

}  // namespace

TEST_CASE("ddp: construction copies rank 0's parameters and buffers to every rank", "[dist][ddp]") {
  auto pg = dist::init_process_group();
  Net net(1.0 + pg->rank());  // rank-dependent initialisation
  {
    NoGradGuard g;
    net.rm.fill_(static_cast<double>(pg->rank()));
  }
  DistributedDataParallel ddp(pg, net.params(), net.buffers());
  CHECK(same_bits(flat_values(net), flat_values(Net(1.0))));
  CHECK(net.rm.to_vector<float>() == std::vector<float>(8, 0.0f));
}

TEST_CASE("ddp: construction and pre_forward broadcast once per dtype, and every dtype arrives bit for bit",
          "[dist][ddp]") {
  auto pg = dist::init_process_group();
  auto counting = std::make_shared<CountingGroup>(pg);
  const double r = 1.0 + pg->rank();
  Net net(r);
  Tensor steps = full({1}, 7.0 * r, {.dtype = DType::i64});
  Tensor wide = full({5}, 0.1 * r, {.dtype = DType::f64});
  auto buffers = net.buffers();
  buffers.push_back({"bn.num_batches_tracked", steps});
  buffers.push_back({"extra.f64", wide});
  DistributedDataParallel ddp(counting, net.params(), buffers);
  CHECK(counting->broadcasts == 3);  // f32 parameters and buffers, i64, f64
  CHECK(same_bits(flat_values(net), flat_values(Net(1.0))));
  CHECK(steps.item<int64_t>() == 7);
  CHECK(wide.to_vector<double>() == std::vector<double>(5, 0.1));
  {
    NoGradGuard g;
    net.rv.fill_(r);
    steps.fill_(r);
  }
  counting->broadcasts = 0;
  ddp.pre_forward();
  CHECK(counting->broadcasts == (pg->size() == 1 ? 0 : 3));
  CHECK(net.rv.to_vector<float>() == std::vector<float>(8, 1.0f));
  CHECK(steps.item<int64_t>() == 1);
}

TEST_CASE("ddp: ranks with different parameters fail on every rank with a message naming the difference",
          "[dist][ddp]") {
  auto pg = dist::init_process_group();
  if (pg->size() == 1) {
    WARN("SKIPPED the mismatch cases: they need at least 2 ranks (run under mpirun -np 2)");
    return;
  }
  const bool odd = pg->rank() == pg->size() - 1;
  Net net(1.0);
  auto params = net.params();
  if (odd) params.emplace_back("extra.weight", zeros({2}).requires_grad_(true));
  CHECK_THROWS_WITH(DistributedDataParallel(pg, params, net.buffers()), Catch::Contains("extra.weight"));
  auto params2 = net.params();
  if (odd) params2[4].second = zeros({3, 9}).requires_grad_(true);
  CHECK_THROWS_WITH(DistributedDataParallel(pg, params2, net.buffers()),
                    Catch::Contains("fc2.weight") && Catch::Contains("[3, 9]") && Catch::Contains("[3, 8]"));
}

TEST_CASE("ddp: after backward every rank holds the mean of the ranks' gradients", "[dist][ddp]") {
  auto pg = dist::init_process_group();
  const int n = pg->size();
  Net net(1.0);
  DistributedDataParallel ddp(pg, net.params(), net.buffers());
  ddp.pre_forward();
  net.loss(pg->rank() * kBatch, kBatch).backward();
  // Reference: each rank's gradient computed here, averaged in f64.
  std::vector<double> mean;
  for (int k = 0; k < n; ++k) {
    Net ref(1.0);
    ref.loss(k * kBatch, kBatch).backward();
    auto g = flat_grads(ref);
    if (mean.empty()) mean.assign(g.size(), 0.0);
    for (size_t i = 0; i < g.size(); ++i) mean[i] += g[i] / static_cast<double>(n);
  }
  auto got = flat_grads(net);
  REQUIRE(got.size() == mean.size());
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(mean[i]).margin(1e-6));
  CHECK(same_on_every_rank(*pg, got));
}

TEST_CASE("ddp: buckets follow reverse registration order, launch in order, and give the same bits as one bucket",
          "[dist][ddp]") {
  auto pg = dist::init_process_group();
  auto counting = std::make_shared<CountingGroup>(pg);
  Net one(1.0), many(1.0);
  DistributedDataParallel ddp_one(pg, one.params());
  DistributedDataParallel ddp_many(counting, many.params(), {},
                                   {.bucket_cap_mb = 1e-9, .first_bucket_cap_mb = 1e-9});
  CHECK(ddp_one.bucket_parameter_names().size() == 1);
  auto names = ddp_many.bucket_parameter_names();
  REQUIRE(names.size() == 6);
  CHECK(names.front() == std::vector<std::string>{"fc2.bias"});
  CHECK(names.back() == std::vector<std::string>{"fc1.weight"});
  one.loss(pg->rank() * kBatch, kBatch).backward();
  counting->reduce_numels.clear();
  // Launches happen inside backward (these hooks run after DDP's own, as nodes run, before any
  // end-of-backward callback): when bn.bias's gradient is in, fc2's and bn.bias's buckets are in
  // flight while fc1's gradients are still to be computed; when fc1.weight's is, all six are.
  size_t at_bn_bias = 0, at_fc1_weight = 0;
  many.beta.register_post_accumulate_grad_hook([&](const Tensor&) { at_bn_bias = counting->reduce_numels.size(); });
  many.w1.register_post_accumulate_grad_hook([&](const Tensor&) { at_fc1_weight = counting->reduce_numels.size(); });
  many.loss(pg->rank() * kBatch, kBatch).backward();
  CHECK(at_bn_bias >= 3);
  CHECK(at_bn_bias <= 4);
  CHECK(at_fc1_weight == 6);
  // fc2.bias first ... fc1.weight last, and the loss scaler's flag at the tail of the last bucket.
  CHECK(counting->reduce_numels == std::vector<int64_t>{3, 24, 8, 8, 8, 48 + 1});
  CHECK(same_bits(flat_grads(one), flat_grads(many)));
  // The default caps: the first (1 MiB) bucket takes all of this small model.
  DistributedDataParallel::NamedTensors big{{"a", zeros({300000}).requires_grad_(true)},
                                            {"b", zeros({300000}).requires_grad_(true)}};
  DistributedDataParallel ddp_big(pg, big);
  CHECK(ddp_big.bucket_parameter_names() == std::vector<std::vector<std::string>>{{"b"}, {"a"}});
}

TEST_CASE("ddp: no_sync accumulates locally without collectives; the next synced backward reduces the sum",
          "[dist][ddp]") {
  auto pg = dist::init_process_group();
  auto counting = std::make_shared<CountingGroup>(pg);
  Net net(1.0);
  DistributedDataParallel ddp(counting, net.params());
  counting->reduce_numels.clear();
  {
    auto guard = ddp.no_sync();
    CHECK_FALSE(ddp.require_sync());
    net.loss(pg->rank() * 2 * kBatch, kBatch).backward();
  }
  CHECK(counting->reduce_numels.empty());
  CHECK(ddp.require_sync());
  net.loss(pg->rank() * 2 * kBatch + kBatch, kBatch).backward();
  CHECK(counting->reduce_numels.size() == 1);
  CHECK(same_on_every_rank(*pg, flat_grads(net)));
}

TEST_CASE("ddp: an unused parameter is an error naming it, unless find_unused_parameters", "[dist][ddp]") {
  auto pg = dist::init_process_group();
  Net net(1.0);
  Tensor unused = zeros({5}).requires_grad_(true);
  auto params = net.params();
  params.emplace_back("head.unused", unused);
  {
    DistributedDataParallel ddp(pg, params);
    CHECK_THROWS_WITH(net.loss(pg->rank() * kBatch, kBatch).backward(), Catch::Contains("head.unused"));
  }
  for (const Tensor& p : net.tensors()) p.set_grad(Tensor());
  DistributedDataParallel ddp(pg, params, {}, {.find_unused_parameters = true});
  net.loss(pg->rank() * kBatch, kBatch).backward();
  CHECK_FALSE(unused.grad().defined());  // no rank used it: none, as PyTorch's
  CHECK(same_on_every_rank(*pg, flat_grads(net)));
}

TEST_CASE("ddp: find_unused_parameters leaves a parameter no rank used untouched and averages one some rank used",
          "[dist][ddp]") {
  // PyTorch all-reduces the ranks' used-maps: a parameter unused everywhere keeps its .grad (none
  // stays none, so weight decay and momentum leave it alone); one used on some rank gets the mean
  // with the others' zeros. Before, both got the mean of zeros and the optimizer decayed the first.
  auto pg = dist::init_process_group();
  Net net(1.0);
  Tensor nowhere = full({4}, 2.0).requires_grad_(true);
  Tensor on_rank0 = zeros({3}).requires_grad_(true);
  Tensor stale = zeros({2}).requires_grad_(true);
  stale.set_grad(full({2}, 7.0));  // a gradient from before, zero_grad(set_to_none = false) style
  auto params = net.params();
  params.emplace_back("head.nowhere", nowhere);
  params.emplace_back("head.on_rank0", on_rank0);
  params.emplace_back("head.stale", stale);
  auto counting = std::make_shared<CountingGroup>(pg);
  DistributedDataParallel ddp(counting, params, {}, {.find_unused_parameters = true});
  std::vector<Tensor> all = net.tensors();
  for (const Tensor& p : {nowhere, on_rank0, stale}) all.push_back(p);
  optim::SGD opt(all, {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.5});
  counting->reduce_numels.clear();
  Tensor loss = net.loss(pg->rank() * kBatch, kBatch);
  if (pg->rank() == 0) loss = add(loss, sum(on_rank0 * 3.0));
  loss.backward();
  CHECK(counting->reduce_numels.size() == 2);  // the gradients' bucket, then the used-map
  CHECK(counting->reduce_numels.back() == 9);  // one entry per parameter
  CHECK_FALSE(nowhere.grad().defined());
  CHECK(stale.grad().to_vector<float>() == std::vector<float>(2, 7.0f));
  REQUIRE(on_rank0.grad().defined());
  CHECK(on_rank0.grad().to_vector<float>() == std::vector<float>(3, 3.0f / static_cast<float>(pg->size())));
  opt.step();
  CHECK(nowhere.detach().to_vector<float>() == std::vector<float>(4, 2.0f));  // not decayed
  CHECK(same_on_every_rank(*pg, flat_grads(net)));
  // The next synced pass starts from a clean used-map: on_rank0 is unused everywhere now.
  opt.zero_grad();
  net.loss(pg->rank() * kBatch, kBatch).backward();
  CHECK_FALSE(on_rank0.grad().defined());
}

TEST_CASE("ddp: find_unused_parameters reduces a gradient accumulated under no_sync that the synced pass skips",
          "[dist][ddp]") {
  // PyTorch's reducer reduces an unused parameter's existing .grad; this one zeroed its bucket
  // slot and then overwrote the accumulated gradient with the (zero) mean.
  auto pg = dist::init_process_group();
  Net net(1.0);
  Tensor extra = zeros({3}).requires_grad_(true);
  auto params = net.params();
  params.emplace_back("head.extra", extra);
  DistributedDataParallel ddp(pg, params, {}, {.find_unused_parameters = true});
  {
    auto guard = ddp.no_sync();
    add(net.loss(pg->rank() * kBatch, kBatch), sum(extra * static_cast<double>(pg->rank() + 1))).backward();
  }
  net.loss(pg->rank() * kBatch, kBatch).backward();  // extra takes no part in the synced pass
  const float mean = static_cast<float>(pg->size() + 1) / 2.0f;  // of the ranks' 1, 2, ...
  CHECK(extra.grad().to_vector<float>() == std::vector<float>(3, mean));
  CHECK(same_on_every_rank(*pg, flat_grads(net)));
}

TEST_CASE("ddp: a NaN loss on one rank makes every rank skip and keep its scale, the scaler named or not, "
          "with no extra collective",
          "[dist][ddp][amp]") {
  auto pg = dist::init_process_group();
  const int bad = pg->size() - 1;
  std::vector<size_t> collectives;
  for (bool inject : {false, true}) {
    for (bool with_scaler : {false, true}) {
      auto counting = std::make_shared<CountingGroup>(pg);
      Net net(1.0);
      amp::GradScaler scaler({.init_scale = 1024.0, .hysteresis = 1});
      DistributedDataParallel ddp(counting, net.params(), net.buffers(),
                                  {.scaler = with_scaler ? &scaler : nullptr});
      optim::SGD opt(net.tensors(), {.lr = 0.1});
      counting->reduce_numels.clear();
      Tensor loss = net.loss(pg->rank() * kBatch, kBatch);
      if (inject && pg->rank() == bad) loss = loss * std::numeric_limits<double>::quiet_NaN();
      scaler.scale(loss).backward();
      collectives.push_back(counting->reduce_numels.size());
      const auto before = flat_values(net);
      auto result = scaler.step(opt);
      scaler.update();
      // All ranks agree on everything the scaler decided; unnamed, DDP reduces the flag of the
      // scaler that scaled this thread's loss (before, the NaN rank kept its scale and the others
      // backed off).
      CHECK(same_on_every_rank(*pg, {static_cast<float>(scaler.get_scale()), result.applied() ? 1.0f : 0.0f}));
      if (inject) {
        CHECK_FALSE(result.applied());
        CHECK(scaler.get_scale() == 1024.0);  // a non-finite loss is not an overflow: no back-off
        CHECK(same_bits(flat_values(net), before));
      } else {
        CHECK(result.applied());
      }
    }
  }
  for (size_t c : collectives) CHECK(c == collectives.front());  // one bucket each time, flag or not
}

TEST_CASE("ddp: an inf gradient on one rank makes every rank back off identically", "[dist][ddp][amp]") {
  auto pg = dist::init_process_group();
  Net net(1.0);
  amp::GradScaler scaler({.init_scale = 1024.0, .hysteresis = 1});
  DistributedDataParallel ddp(pg, net.params(), net.buffers(), {.scaler = &scaler});
  optim::SGD opt(net.tensors(), {.lr = 0.1});
  if (pg->rank() == 0)
    net.w2.register_hook([](const Tensor& g) { return full_like(g, std::numeric_limits<double>::infinity()); });
  const auto before = flat_values(net);
  scaler.scale(net.loss(pg->rank() * kBatch, kBatch)).backward();
  auto result = scaler.step(opt);
  scaler.update();
  CHECK_FALSE(result.applied());
  CHECK(scaler.get_scale() == 512.0);
  CHECK(same_bits(flat_values(net), before));
  CHECK(same_on_every_rank(*pg, {static_cast<float>(scaler.get_scale())}));
}

TEST_CASE("ddp: N ranks with batch B each equal one process accumulating N micro-batches of B", "[dist][ddp]") {
  auto pg = dist::init_process_group();
  const int n = pg->size();
  constexpr int kSteps = 4;
  Net ddp_net(1.0), ref(1.0);
  DistributedDataParallel ddp(pg, ddp_net.params(), ddp_net.buffers());
  optim::SGD opt(ddp_net.tensors(), {.lr = 0.1, .momentum = 0.9});
  optim::SGD ref_opt(ref.tensors(), {.lr = 0.1, .momentum = 0.9});
  for (int step = 0; step < kSteps; ++step) {
    const int64_t first = static_cast<int64_t>(step) * n * kBatch;
    ddp.pre_forward();
    ddp_net.loss(first + pg->rank() * kBatch, kBatch).backward();
    opt.step();
    opt.zero_grad();
    for (int k = 0; k < n; ++k) (ref.loss(first + k * kBatch, kBatch) * (1.0 / n)).backward();
    ref_opt.step();
    ref_opt.zero_grad();
  }
  const auto got = flat_values(ddp_net), want = flat_values(ref);
  if ((n & (n - 1)) == 0 && n <= 2) {
    // 1/n and the loss scaling 1/n are powers of two, and a two-term sum is commutative: bit for bit.
    CHECK(same_bits(got, want));
  } else {
    // 1/3 rounds, and MPI's three-term sum order need not be the accumulation's: close, not equal.
    for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).margin(1e-5));
  }
  CHECK(same_on_every_rank(*pg, got));
}

TEST_CASE("ddp: f16, bf16 and f64 parameters are averaged exactly on integer gradients", "[dist][ddp]") {
  auto pg = dist::init_process_group();
  const int n = pg->size(), r = pg->rank();
  for (DType d : {DType::f16, DType::bf16, DType::f64}) {
    INFO(dtype_name(d));
    Tensor w = zeros({4}, {.dtype = d}).requires_grad_(true);
    Tensor v = zeros({3}, {.dtype = d}).requires_grad_(true);
    DistributedDataParallel ddp(pg, {{"w", w}, {"v", v}});
    // d(loss)/dw = 2·(r + 1) everywhere: the mean over the ranks is n + 1, exact in every dtype.
    Tensor loss = (w * (2.0 * (r + 1))).sum() + (v * 4.0).sum();
    loss.backward();
    CHECK(w.grad().dtype() == d);
    CHECK(w.grad().to(DType::f64).to_vector<double>() == std::vector<double>(4, n + 1.0));
    CHECK(v.grad().to(DType::f64).to_vector<double>() == std::vector<double>(3, 4.0));
  }
}
