// Autocast output dtypes for every op of the table (docs/design/precision.md): one invocation per op, run under
// bf16 and f16 regions with fp32 and low-precision inputs (mixed for Promote ops), checked against
// the op's category. A coverage check makes a new op add its entry here, and an override test
// proves each op really calls the autocast hook with its own id and runs on what it returns.
#include <functional>
#include <set>

#include <catch2/catch.hpp>

#include "amp/autocast.h"
#include "core/device.h"
#include "core/rng.h"
#include "ops/detail/attention_softmax.h"
#include "ops/functional.h"
#include "tests/support/tensor_testing.h"

namespace precis::amp {
namespace {

// A seeded input of dtype dt (values drawn in f32 and rounded).
Tensor in(const Shape& s, DType dt, uint64_t seed = 1) { return testing::randn_input(s, false, seed, DType::f32).to(dt); }
Tensor positive(const Shape& s, DType dt, uint64_t seed = 1) {
  return testing::uniform_input(s, 0.5, 2.0, false, seed, DType::f32).to(dt);
}
Tensor i64(std::vector<int64_t> v, const Shape& s) { return from_vector<int64_t>(v, s); }

// One invocation of an op. `run(a, b)` calls it with its first floating input in dtype a and the
// other floating inputs in dtype b (a == b except in the mixed runs of Promote ops) and returns
// the output whose dtype the category decides.
struct Entry {
  OpId op;
  std::function<Tensor(DType a, DType b)> run;
  // False where the output dtype does not follow the op's own casts (comparisons give bool; a
  // composite's inner ops decide its result), so only the Banned override can show the hook.
  bool dtype_follows_cast = true;
  // True for a loss computed in fp32 from GEMMs in the region's dtype (linear_cross_entropy, a
  // Lower op): under a region its result is fp32, as cross_entropy's is.
  bool fp32_result = false;
};

const std::vector<Entry>& entries() {
  static const std::vector<Entry> table = [] {
    std::vector<Entry> e;
    using D = DType;
    auto unary = [&](OpId op, Tensor (*f)(const Tensor&), bool pos = false) {
      e.push_back({op, [f, pos](D a, D) { return f(pos ? positive({3, 4}, a) : in({3, 4}, a)); }});
    };
    // ---- data movement and views: Passthrough, never cast
    e.push_back({OpId::cast, [](D a, D) { return cast(cast(in({3}, a), D::f64), a); }});
    e.push_back({OpId::clone, [](D a, D) { return in({3}, a).clone(); }});
    e.push_back({OpId::to_device, [](D a, D) {
                   Tensor x = in({3}, a);
                   return cuda_is_available() ? x.to(Device::cuda(0)).to(Device::cpu()) : x;
                 }});
    e.push_back({OpId::view, [](D a, D) { return in({2, 3}, a).view({3, 2}); }});
    e.push_back({OpId::permute, [](D a, D) { return in({2, 3}, a).permute({1, 0}); }});
    e.push_back({OpId::slice, [](D a, D) { return in({4, 3}, a).slice(0, 1, 3); }});
    e.push_back({OpId::expand, [](D a, D) { return in({3, 1}, a).expand({3, 4}); }});
    // ---- unary
    unary(OpId::neg, &neg);
    unary(OpId::abs, &abs);
    unary(OpId::exp, &exp);
    unary(OpId::log, &log, true);
    unary(OpId::sqrt, &sqrt, true);
    unary(OpId::rsqrt, &rsqrt, true);
    unary(OpId::tanh, &tanh);
    unary(OpId::sigmoid, &sigmoid);
    unary(OpId::silu, &silu);
    unary(OpId::relu, &relu);
    e.push_back({OpId::leaky_relu, [](D a, D) { return leaky_relu(in({3, 4}, a), 0.2); }});
    e.push_back({OpId::gelu, [](D a, D) { return gelu(in({3, 4}, a), "tanh"); }});
    e.push_back({OpId::pow_scalar, [](D a, D) { return pow(positive({3, 4}, a), 1.5); }});
    // ---- binary
    using Bin = Tensor (*)(const Tensor&, const Tensor&);
    auto binary = [&](OpId op, Bin f, bool follows = true) {
      e.push_back({op, [f](D a, D b) { return f(in({3, 4}, a, 1), positive({4}, b, 2)); }, follows});
    };
    e.push_back({OpId::add, [](D a, D b) { return add(in({3, 4}, a, 1), in({4}, b, 2), 0.5); }});
    e.push_back({OpId::sub, [](D a, D b) { return sub(in({3, 4}, a, 1), in({4}, b, 2)); }});
    binary(OpId::mul, &mul);
    binary(OpId::div, &div);
    binary(OpId::maximum, static_cast<Bin>(&maximum));
    binary(OpId::minimum, static_cast<Bin>(&minimum));
    binary(OpId::eq, static_cast<Bin>(&eq), false);
    binary(OpId::ne, static_cast<Bin>(&ne), false);
    binary(OpId::lt, static_cast<Bin>(&lt), false);
    binary(OpId::le, static_cast<Bin>(&le), false);
    binary(OpId::gt, static_cast<Bin>(&gt), false);
    binary(OpId::ge, static_cast<Bin>(&ge), false);
    e.push_back({OpId::where, [](D a, D b) {
                   Tensor cond = from_vector<bool>({true, false, true, false}, {4});
                   return where(cond, in({3, 4}, a, 1), in({4}, b, 2));
                 }});
    e.push_back({OpId::masked_fill, [](D a, D) {
                   return masked_fill(in({3, 4}, a), from_vector<bool>({true, false, false, true}, {4}), 2.0);
                 }});
    // ---- reductions
    e.push_back({OpId::sum, [](D a, D) { return sum(in({3, 4}, a), {1}); }});
    e.push_back({OpId::mean, [](D a, D) { return mean(in({3, 4}, a)); }});
    e.push_back({OpId::var, [](D a, D) { return var(in({3, 4}, a), {0}); }});
    e.push_back({OpId::max, [](D a, D) { return std::get<0>(max(in({3, 4}, a), 1)); }});
    // ---- linear algebra
    e.push_back({OpId::matmul, [](D a, D b) { return matmul(in({2, 3}, a, 1), in({3, 4}, b, 2)); }});
    e.push_back({OpId::linear, [](D a, D b) { return linear(in({2, 3}, a, 1), in({4, 3}, b, 2), in({4}, b, 3)); }});
    // ---- joining and indexing
    e.push_back({OpId::cat, [](D a, D b) { return cat({in({2, 3}, a, 1), in({1, 3}, b, 2)}, 0); }});
    e.push_back({OpId::stack, [](D a, D b) { return stack({in({2, 3}, a, 1), in({2, 3}, b, 2)}, 1); }});
    e.push_back({OpId::index_select, [](D a, D) { return index_select(in({4, 3}, a), 0, i64({3, 0}, {2})); }});
    e.push_back({OpId::gather, [](D a, D) { return gather(in({2, 3}, a), 1, i64({2, 0, 1, 1}, {2, 2})); }});
    e.push_back({OpId::index_add, [](D a, D b) { return index_add(in({4, 3}, a, 1), 0, i64({1, 1}, {2}), in({2, 3}, b, 2)); }});
    e.push_back({OpId::scatter_add, [](D a, D b) {
                   return scatter_add(in({2, 3}, a, 1), 1, i64({2, 0, 0, 1}, {2, 2}), in({2, 2}, b, 2));
                 }});
    // ---- neural-network ops
    e.push_back({OpId::conv2d, [](D a, D b) {
                   return conv2d(in({1, 2, 5, 5}, a, 1), in({3, 2, 3, 3}, b, 2), in({3}, b, 3), {1, 1}, {1, 1});
                 }});
    // conv1d is conv2d on a view: conv2d's own hook decides its result.
    e.push_back({OpId::conv1d, [](D a, D b) { return conv1d(in({1, 2, 7}, a, 1), in({3, 2, 3}, b, 2), in({3}, b, 3)); },
                 false});
    e.push_back({OpId::conv_transpose2d, [](D a, D b) {
                   return conv_transpose2d(in({1, 2, 3, 3}, a, 1), in({2, 3, 3, 3}, b, 2), in({3}, b, 3), {2}, {1});
                 }});
    e.push_back({OpId::max_pool2d, [](D a, D) { return max_pool2d(in({1, 2, 4, 4}, a), {2, 2}); }});
    e.push_back({OpId::max_pool1d, [](D a, D) { return max_pool1d(in({1, 2, 6}, a), 2); }});
    e.push_back({OpId::avg_pool1d, [](D a, D) { return avg_pool1d(in({1, 2, 6}, a), 2); }});
    e.push_back({OpId::avg_pool2d, [](D a, D) { return avg_pool2d(in({1, 2, 4, 4}, a), {2, 2}); }});
    e.push_back({OpId::adaptive_avg_pool2d, [](D a, D) { return adaptive_avg_pool2d(in({1, 2, 5, 5}, a), {2, 2}); }});
    e.push_back({OpId::batch_norm, [](D a, D b) {
                   // Running statistics are fp32 buffers, updated in place and never cast.
                   Tensor rm = zeros({3}), rv = ones({3});
                   return batch_norm(in({4, 3, 2}, a, 1), rm, rv, in({3}, b, 2), in({3}, b, 3), true);
                 }});
    e.push_back({OpId::layer_norm, [](D a, D b) { return layer_norm(in({2, 4}, a, 1), {4}, in({4}, b, 2), in({4}, b, 3)); }});
    e.push_back({OpId::group_norm, [](D a, D b) { return group_norm(in({2, 4, 3}, a, 1), 2, in({4}, b, 2), in({4}, b, 3)); }});
    e.push_back({OpId::softmax, [](D a, D) { return softmax(in({2, 5}, a), 1); }});
    e.push_back({OpId::log_softmax, [](D a, D) { return log_softmax(in({2, 5}, a), -1); }});
    e.push_back({OpId::cross_entropy, [](D a, D) { return cross_entropy(in({3, 5}, a), i64({0, 4, 2}, {3})); }});
    e.push_back({OpId::linear_cross_entropy,
                 [](D a, D b) { return linear_cross_entropy(in({3, 4}, a, 1), in({5, 4}, b, 2), in({5}, b, 3), i64({0, 4, 2}, {3})); },
                 false, true});
    e.push_back({OpId::linear_gelu, [](D a, D b) { return linear_gelu(in({3, 4}, a, 1), in({5, 4}, b, 2), in({5}, b, 3)); }});
    e.push_back({OpId::nll_loss, [](D a, D) { return nll_loss(log_softmax(in({3, 5}, a), 1), i64({1, 0, 3}, {3})); }});
    // mse_loss and the logits loss are composites ending in an FP32 mean: a Lower override of
    // the op itself is undone by its inner ops, so only the Banned override shows their hook.
    e.push_back({OpId::mse_loss, [](D a, D b) { return mse_loss(in({3, 4}, a, 1), in({3, 4}, b, 2)); }, false});
    e.push_back({OpId::l1_loss, [](D a, D b) { return l1_loss(in({3, 4}, a, 1), in({3, 4}, b, 2)); }, false});
    e.push_back({OpId::smooth_l1_loss, [](D a, D b) { return smooth_l1_loss(in({3, 4}, a, 1), in({3, 4}, b, 2)); },
                 false});
    e.push_back({OpId::huber_loss, [](D a, D b) { return huber_loss(in({3, 4}, a, 1), in({3, 4}, b, 2)); }, false});
    e.push_back({OpId::binary_cross_entropy_with_logits,
                 [](D a, D b) {
                   return binary_cross_entropy_with_logits(in({3, 4}, a, 1), testing::uniform_input({3, 4}, 0, 1, false, 2, DType::f32).to(b));
                 },
                 false});
    // Banned by default (the first test sees its hook throw); a composite of FP32 logs and mean.
    e.push_back({OpId::binary_cross_entropy,
                 [](D a, D b) {
                   return binary_cross_entropy(testing::uniform_input({3, 4}, 0.1, 0.9, false, 1, DType::f32).to(a),
                                               testing::uniform_input({3, 4}, 0, 1, false, 2, DType::f32).to(b));
                 },
                 false});
    e.push_back({OpId::embedding, [](D a, D) { return embedding(i64({2, 0, 2}, {3}), in({4, 3}, a)); }});
    e.push_back({OpId::dropout, [](D a, D) {
                   Generator g(5);
                   return dropout(in({3, 4}, a), 0.5, true, &g);
                 }});
    e.push_back({OpId::dropout_add, [](D a, D b) {
                   Generator g(5);
                   return dropout_add(in({3, 4}, a, 1), in({3, 4}, b, 2), 0.5, true, &g);
                 }});
    // Its inner matmuls are Lower themselves, so a Passthrough override of the op cannot show in
    // the output dtype; the Banned override does.
    e.push_back({OpId::scaled_dot_product_attention,
                 [](D a, D b) { return scaled_dot_product_attention(in({2, 3, 4}, a, 1), in({2, 5, 4}, b, 2), in({2, 5, 4}, b, 3)); },
                 false});
    e.push_back({OpId::attention_softmax, [](D a, D) {
                   Generator g(5);
                   return attention_softmax(in({2, 3, 4}, a), Tensor(), true, 0.5, 0.1, &g);
                 }});
    e.push_back({OpId::erf, [](D a, D) { return erf(in({3, 4}, a)); }});
    e.push_back({OpId::pad, [](D a, D) { return pad(in({2, 3}, a), {1, 2}); }});
    e.push_back({OpId::interpolate, [](D a, D) {
                   return interpolate(in({1, 2, 3, 3}, a), {.size = {5, 4}, .mode = InterpolateMode::bilinear});
                 }});
    return e;
  }();
  return table;
}

// Rows with no entry: backward-only kernels (called by the engine, whose backward runs in the
// forward's dtypes, never by users under autocast), cross_entropy_with_grad (called only by
// linear_cross_entropy, on operands autocast has already cast), copy and fill (kernels behind
// Tensor::to, copy_ and fill_, which autocast never touches), unscale_grads (the loss scaler's own
// pass) and the optimizer and clipping kernels (called by optim/ on gradients, never under autocast),
// and scaled_matmul (fp8 operands and an explicit output dtype: autocast has nothing to choose;
// docs/fp8.md).
const std::set<OpId> kNoEntry = {
    OpId::copy,
    OpId::fill,
    OpId::relu_backward,
    OpId::gelu_backward,
    OpId::conv2d_backward,
    OpId::max_pool2d_backward,
    OpId::avg_pool2d_backward,
    OpId::adaptive_avg_pool2d_backward,
    OpId::batch_norm_backward,
    OpId::layer_norm_backward,
    OpId::group_norm_backward,
    OpId::softmax_backward,
    OpId::log_softmax_backward,
    OpId::attention_softmax_backward,
    OpId::cross_entropy_backward,
    OpId::cross_entropy_with_grad,
    OpId::gelu_epilogue,           // called only by linear_gelu, on operands autocast has cast
    OpId::gelu_epilogue_backward,
    OpId::unscale_grads,
    OpId::sgd_step,
    OpId::adam_step,
    OpId::grad_norms,
    OpId::clip_grad_norm,
    OpId::clip_grad_value,
    OpId::scaled_matmul,
    OpId::fp8_scaled_cast,  // an explicit fp8 output dtype, as scaled_matmul's
};

// Ops that by design do not call the autocast hook: views alias their input (a cast would break
// the aliasing), cast is autocast's own mechanism, and clone / to_device promise their input's
// dtype. Their category is Passthrough and an override has no effect (checked below).
const std::set<OpId> kNoHook = {OpId::view,  OpId::permute, OpId::slice,     OpId::expand,
                                OpId::cast,  OpId::clone,   OpId::to_device};

// The dtype `category` gives under a region of `low` for inputs (a, b); nullopt for Banned.
std::optional<DType> expected(Category category, DType low, DType a, DType b) {
  switch (category) {
    case Category::Lower: return low;
    case Category::FP32: return DType::f32;
    case Category::Promote: return promote_types(a, b);
    case Category::Passthrough: return a;
    case Category::Banned: return std::nullopt;
  }
  return std::nullopt;
}

// to_device's entry needs a device to copy to: without one it is skipped (loudly: PRECIS_CUDA_PART).
bool skip(const Entry& e, bool gpu) { return e.op == OpId::to_device && !gpu; }

// [cuda]: with a GPU present to_device's entry copies to cuda:0 and back.
TEST_CASE("every op's output dtype under autocast follows its category", "[amp][autocast][ops][cuda]") {
  const bool gpu = PRECIS_CUDA_PART("to_device's entry, cpu to cuda and back");
  for (DType low : {DType::bf16, DType::f16}) {
    // fp32 inputs, inputs already in either low dtype, and for Promote ops mixed low/fp32 inputs.
    std::vector<std::pair<DType, DType>> uniform = {{DType::f32, DType::f32}, {DType::bf16, DType::bf16}, {DType::f16, DType::f16}};
    std::vector<std::pair<DType, DType>> mixed = {{DType::bf16, DType::f32}, {DType::f32, DType::f16}, {DType::f16, DType::bf16}};
    for (const Entry& e : entries()) {
      if (skip(e, gpu)) continue;
      const Category c = op_info(e.op).category;
      std::vector<std::pair<DType, DType>> runs = uniform;
      if (c == Category::Promote) runs.insert(runs.end(), mixed.begin(), mixed.end());
      for (const auto& [a, b] : runs) {
        INFO(op_name(e.op) << " (" << category_name(c) << ") under a " << dtype_name(low) << " region, inputs "
                           << dtype_name(a) << "/" << dtype_name(b));
        Autocast ac(low);
        const std::optional<DType> want =
            e.fp32_result && c != Category::Banned ? std::optional<DType>(DType::f32) : expected(c, low, a, b);
        if (!want) {
          PRECIS_REQUIRE_THROWS_WITH_ALL(e.run(a, b), DTypeError, op_name(e.op), "binary_cross_entropy_with_logits");
          continue;
        }
        const Tensor out = e.run(a, b);
        if (out.is_floating_point()) {
          CHECK(out.dtype() == *want);
        } else {
          CHECK(out.dtype() == DType::boolean);  // comparisons: computed in the category's dtype, bool out
        }
      }
    }
  }
}

TEST_CASE("every op of the table has an autocast entry or a listed exemption", "[amp][autocast][ops][coverage]") {
  std::set<OpId> have;
  for (const Entry& e : entries()) CHECK(have.insert(e.op).second);  // one entry per op
  std::string missing;
  for (int i = 0; i < kNumOps; ++i) {
    const OpId op = static_cast<OpId>(i);
    if (have.count(op) == 0 && kNoEntry.count(op) == 0) missing += std::string(op_name(op)) + "\n";
    if (have.count(op) != 0 && kNoEntry.count(op) != 0) missing += std::string(op_name(op)) + " (listed as exempt too)\n";
  }
  INFO("ops of ops/op_list.def without an entry in tests/amp/autocast_ops_test.cpp:\n" << missing);
  CHECK(missing.empty());
}

TEST_CASE("every public op calls the autocast hook with its own id and runs on what it returns",
          "[amp][autocast][ops][cuda]") {
  const bool gpu = PRECIS_CUDA_PART("to_device's entry, cpu to cuda and back");
  struct Reset {
    ~Reset() { reset_categories(); }
  } reset;
  for (const Entry& e : entries()) {
    if (skip(e, gpu)) continue;
    const Category c = op_info(e.op).category;
    INFO(op_name(e.op));
    Autocast ac(DType::bf16);
    if (kNoHook.count(e.op) != 0) {
      set_category(e.op, Category::Lower);
      CHECK(e.run(DType::f32, DType::f32).dtype() == DType::f32);  // no hook: the override is ignored
      reset_categories();
      continue;
    }
    // Banned is observable for every op, whatever its output: the hook throws at the entry.
    if (c != Category::Banned) {
      set_category(e.op, Category::Banned);
      PRECIS_REQUIRE_THROWS_WITH_ALL(e.run(DType::f32, DType::f32), DTypeError, op_name(e.op), "not allowed under autocast");
      reset_categories();
    }
    // A category that changes the dtype of fp32 inputs must change the output's: the op computes
    // on the hook's result, not on its own arguments.
    if (!e.dtype_follows_cast) continue;
    const Category flipped = c == Category::Lower ? Category::Passthrough : Category::Lower;
    const DType want = flipped == Category::Lower ? DType::bf16 : DType::f32;
    set_category(e.op, flipped);
    CHECK(e.run(DType::f32, DType::f32).dtype() == want);
    reset_categories();
  }
}

}  // namespace
}  // namespace precis::amp
