// Autocast: output dtypes per category, the weight-cast cache, nesting, overrides, custom ops,
// and gradients reaching fp32 parameters.
#include <catch2/catch.hpp>

#include "amp/audit.h"
#include "amp/autocast.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "ops/functional.h"
#include "ops/precision.h"
#include "tests/support/tensor_testing.h"

namespace precis::amp {
namespace {

Tensor f32(const Shape& s) { return testing::randn_input(s, false, 3, DType::f32); }

TEST_CASE("each category gives its dtype under a bf16 region", "[amp][autocast]") {
  Tensor a = f32({4, 4}), b = f32({4, 4});
  Tensor lowp = a.to(DType::bf16);
  Autocast ac(DType::bf16);
  CHECK(is_autocast_enabled(DeviceType::cpu));
  CHECK(matmul(a, b).dtype() == DType::bf16);                 // Lower
  CHECK(linear(a, b, f32({4})).dtype() == DType::bf16);       // Lower
  CHECK(exp(lowp).dtype() == DType::f32);                     // FP32
  CHECK(sum(lowp).dtype() == DType::f32);                     // FP32
  CHECK(mean(lowp, {1}).dtype() == DType::f32);               // FP32
  CHECK(add(lowp, a).dtype() == DType::f32);                  // Promote: widest
  CHECK(add(lowp, lowp).dtype() == DType::bf16);              // Promote: already equal
  // Promote, a zero-dim operand: widens nothing (PyTorch's result_type), so a bf16 activation
  // times an fp32 scale stays bf16; two zero-dim operands promote as usual.
  const Tensor scale = full({}, 0.5, {.dtype = DType::f32});
  CHECK(mul(lowp, scale).dtype() == DType::bf16);
  CHECK(mul(lowp, scale).to(DType::f32).to_vector<float>() == mul(lowp.to(DType::f32), 0.5).to_vector<float>());
  CHECK(add(scale, full({}, 1.0, {.dtype = DType::bf16})).dtype() == DType::f32);
  CHECK(cat({lowp, a}, 0).dtype() == DType::f32);             // Promote (list)
  CHECK(relu(lowp).dtype() == DType::bf16);                   // Passthrough
  CHECK(relu(a).dtype() == DType::f32);                       // Passthrough
  CHECK(matmul(a.to(DType::f64), b.to(DType::f64)).dtype() == DType::f64);  // f64 is never cast
}

TEST_CASE("f16 regions and disabled inner regions", "[amp][autocast]") {
  Tensor a = f32({2, 3}), b = f32({3, 2});
  {
    Autocast ac(DType::f16);
    CHECK(matmul(a, b).dtype() == DType::f16);
    {
      Autocast off(DType::f16, DeviceType::cpu, /*enabled=*/false);
      CHECK_FALSE(is_autocast_enabled(DeviceType::cpu));
      CHECK(matmul(a, b).dtype() == DType::f32);
    }
    CHECK(matmul(a, b).dtype() == DType::f16);
  }
  CHECK_FALSE(is_autocast_enabled(DeviceType::cpu));
  CHECK(matmul(a, b).dtype() == DType::f32);
  CHECK_THROWS_AS(Autocast(DType::f32), DTypeError);
  CHECK(default_autocast_dtype(DeviceType::cpu) == DType::bf16);
  CHECK(default_autocast_dtype(DeviceType::cuda) == DType::f16);
}

TEST_CASE("a CUDA region does not touch CPU ops", "[amp][autocast]") {
  Autocast ac(DType::f16, DeviceType::cuda);
  CHECK(matmul(f32({2, 2}), f32({2, 2})).dtype() == DType::f32);
}

TEST_CASE("gradients reach fp32 parameters as fp32 through the casts", "[amp][autocast]") {
  Tensor w = f32({3, 3}).requires_grad_();
  Tensor x = f32({2, 3});
  Tensor loss;
  {
    Autocast ac(DType::bf16);
    Tensor y = matmul(x, w);
    CHECK(y.dtype() == DType::bf16);
    loss = sum(y);  // FP32 category: fp32 loss
    CHECK(loss.dtype() == DType::f32);
  }
  loss.backward();
  REQUIRE(w.grad().defined());
  CHECK(w.grad().dtype() == DType::f32);
  // d sum(x w) / dw = xᵀ 1, computed from bf16-rounded x (the forward's inputs).
  Tensor expected = matmul(x.to(DType::bf16).to(DType::f32).t(), ones({2, 3}));
  PRECIS_REQUIRE_CLOSE(w.grad(), expected, DType::bf16);
}

TEST_CASE("the weight cache serves one copy per parameter and never a stale one", "[amp][autocast]") {
  Tensor w = f32({4, 4}).requires_grad_();
  Tensor x = f32({2, 4});
  {
    Autocast ac(DType::bf16);
    Tensor y1 = matmul(x, w), y2 = matmul(x, w);
    CHECK(cache_size() == 1);
    // Same cached bf16 copy of w in both graphs: the cast node is shared.
    CHECK(y1.grad_fn()->next_edges()[1].fn == y2.grad_fn()->next_edges()[1].fn);
    const float before = matmul(x, w).to_vector<float>()[0];
    {
      NoGradGuard g;  // an in-place update (an optimizer step) bumps the version
      w.fill_(0.5);
    }
    const float after = matmul(x, w).to_vector<float>()[0];
    CHECK(after != before);
    CHECK(cache_size() == 2);
    // A copy made under no_grad has no backward node and is not served to grad-mode code.
    Tensor y_nograd;
    {
      NoGradGuard g;
      y_nograd = matmul(x, w);
    }
    CHECK_FALSE(y_nograd.requires_grad());
    Tensor y_grad = matmul(x, w);
    CHECK(y_grad.requires_grad());
    {
      Autocast inner(DType::bf16);
      CHECK(cache_size() == 3);  // the inner region shares the outer's cache
    }
    CHECK(cache_size() == 3);
  }
  CHECK(cache_size() == 0);  // dropped when the outermost region exits
}

TEST_CASE("only fp32 leaves that require grad are cached", "[amp][autocast]") {
  Autocast ac(DType::bf16);
  Tensor activation = f32({2, 2});
  matmul(activation, activation);
  CHECK(cache_size() == 0);
}

TEST_CASE("categories can be overridden at run time", "[amp][autocast]") {
  Tensor a = f32({2, 2});
  set_category(OpId::matmul, Category::FP32);
  {
    Autocast ac(DType::bf16);
    CHECK(category(OpId::matmul) == Category::FP32);
    CHECK(matmul(a.to(DType::bf16), a).dtype() == DType::f32);
    set_category(OpId::relu, Category::Lower);
    CHECK(relu(a).dtype() == DType::bf16);
  }
  reset_categories();
  CHECK(category(OpId::matmul) == Category::Lower);
  CHECK(category(OpId::relu) == Category::Passthrough);
}

TEST_CASE("user ops declare a category", "[amp][autocast]") {
  static const CustomOp my_gemm = register_custom_op("my_gemm", Category::Lower);
  static const CustomOp my_unsafe = register_custom_op("my_unsafe", Category::Banned);
  Tensor a = f32({2});
  CHECK(autocast(my_gemm, a)[0].dtype() == DType::f32);  // outside a region: unchanged
  Autocast ac(DType::f16);
  auto [x, y] = autocast(my_gemm, a, a);
  CHECK(x.dtype() == DType::f16);
  CHECK(y.dtype() == DType::f16);
  PRECIS_REQUIRE_THROWS_WITH_ALL(autocast(my_unsafe, a), DTypeError, "my_unsafe", "Banned");
}

TEST_CASE("backward inside a region runs in the forward's dtypes", "[amp][autocast]") {
  Tensor w = f32({3, 3}).requires_grad_();
  Autocast ac(DType::bf16);
  Tensor loss = sum(matmul(f32({2, 3}), w));
  loss.backward();  // the engine suspends autocast; the grad arrives as f32
  CHECK(w.grad().dtype() == DType::f32);
}

}  // namespace
}  // namespace precis::amp

namespace precis::amp {
namespace {

TEST_CASE("the audit records dtypes and magnitudes and flags values near the fp16 limit", "[amp][audit]") {
  Tensor w = full({4, 4}, 100.0).requires_grad_();
  Tensor x = full({2, 4}, 200.0);
  Audit audit;
  {
    Autocast ac(DType::bf16);
    Tensor y = matmul(x, w);      // inputs up to 200; output 4·200·100 = 80000 > 65504
    Tensor z = relu(y);           // sees 80000 (bf16)
    (void)sum(z * 0.001);
  }
  const auto recs = audit.records();
  auto find = [&](const std::string& name) {
    for (const auto& r : recs)
      if (r.op == name) return r;
    FAIL("op " << name << " not recorded");
    return AuditRecord{};
  };
  const AuditRecord mm = find("matmul");
  CHECK(mm.calls == 1);
  CHECK(mm.dtypes == std::vector<DType>{DType::bf16});
  CHECK(mm.max_abs == 200.0);
  const AuditRecord r = find("relu");
  CHECK(r.max_abs == Approx(80000.0).epsilon(0.01));
  const auto near = audit.near_fp16_limit();
  REQUIRE_FALSE(near.empty());
  CHECK((near[0].op == "relu" || near[0].op == "mul"));
  CHECK(audit.report().find("within 2x of the fp16 maximum") != std::string::npos);
}

TEST_CASE("without an audit nothing is recorded, and audits nest", "[amp][audit]") {
  CHECK(active_audit() == nullptr);
  Audit outer;
  {
    Audit inner;
    CHECK(active_audit() == &inner);
    relu(full({2}, 1.0));
    CHECK(inner.records().size() == 1);
  }
  CHECK(active_audit() == &outer);
  CHECK(outer.records().empty());
}

}  // namespace
}  // namespace precis::amp

namespace precis::amp {
namespace {

TEST_CASE("amp's policy is in the ops' precision hook exactly while a region or an audit is open", "[amp][autocast]") {
  REQUIRE(precision_policy() == nullptr);  // the ops' fast path: nothing to call
  {
    amp::Autocast outer(DType::bf16);
    PrecisionPolicy* installed = precision_policy();
    REQUIRE(installed != nullptr);
    {
      amp::Audit audit;
      amp::Autocast inner(DType::bf16, DeviceType::cpu, /*enabled=*/false);
      REQUIRE(precision_policy() == installed);
    }
    REQUIRE(precision_policy() == installed);
    // The hook casts as the table says: linear is Lower.
    Tensor x = randn({2, 3});
    const auto [cast] = apply_precision(OpId::linear, x);
    REQUIRE(cast.dtype() == DType::bf16);
  }
  REQUIRE(precision_policy() == nullptr);
  {
    amp::Audit audit;  // an audit alone installs it too, and casts nothing
    REQUIRE(precision_policy() != nullptr);
    Tensor x = randn({2, 3});
    REQUIRE(apply_precision(OpId::linear, x)[0].dtype() == DType::f32);
  }
  REQUIRE(precision_policy() == nullptr);
}

}  // namespace
}  // namespace precis::amp

namespace precis::amp {
namespace {

// A user op as docs/mixed-precision.md writes one: its category through amp::autocast, then ops.
Tensor scaled_gemm(const Tensor& a, const Tensor& b) {
  static const CustomOp op = register_custom_op("scaled_gemm", Category::Lower);
  auto [a_, b_] = autocast(op, a, b);
  return matmul(a_, b_) * 0.5;
}

TEST_CASE("an audit over a model with a custom op lists that op, with the dtype it ran in", "[amp][audit]") {
  Tensor w = full({4, 4}, 3.0).requires_grad_();
  Tensor x = full({2, 4}, 7.0);
  Audit audit;
  {
    Autocast ac(DType::bf16);
    (void)relu(scaled_gemm(x, w));
  }
  {
    (void)scaled_gemm(x, w);  // outside autocast: recorded in f32
  }
  AuditRecord custom;
  for (const AuditRecord& r : audit.records())
    if (r.op == "scaled_gemm") custom = r;
  REQUIRE(custom.calls == 2);
  CHECK(custom.dtypes == std::vector<DType>{DType::bf16, DType::f32});
  CHECK(custom.f32_precisions == std::vector<Float32Precision>{Float32Precision::ieee});
  CHECK(custom.max_abs == 7.0);
  CHECK(audit.report().find("scaled_gemm") != std::string::npos);
}

TEST_CASE("a custom op casts exactly as a built-in op of its category", "[amp][autocast]") {
  static const CustomOp promote = register_custom_op("my_promote", Category::Promote);
  static const CustomOp fp32 = register_custom_op("my_fp32", Category::FP32);
  const Tensor a = randn({3}).to(DType::bf16), b = randn({3}), s = full({}, 2.0);
  Autocast ac(DType::bf16);
  for (const auto& [op, custom] : {std::pair{OpId::add, promote}, std::pair{OpId::softmax, fp32}}) {
    const auto builtin = apply_precision(op, a, b, s);
    const auto mine = autocast(custom, a, b, s);
    for (size_t i = 0; i < builtin.size(); ++i) CHECK(mine[i].dtype() == builtin[i].dtype());
  }
}

TEST_CASE("the policy answers a category query without casting or recording", "[amp][autocast][audit]") {
  CHECK(precision_category(OpId::cross_entropy, DeviceType::cpu) == Category::Passthrough);  // no policy
  Audit audit;
  CHECK(precision_category(OpId::cross_entropy, DeviceType::cpu) == Category::Passthrough);  // autocast off
  {
    Autocast ac(DType::bf16);
    CHECK(precision_category(OpId::cross_entropy, DeviceType::cpu) == Category::FP32);
    CHECK(precision_category(OpId::linear, DeviceType::cpu) == Category::Lower);
    CHECK(precision_category(OpId::linear, DeviceType::cuda) == Category::Passthrough);  // not this region's device
    set_category(OpId::cross_entropy, Category::Lower);
    CHECK(precision_category(OpId::cross_entropy, DeviceType::cpu) == Category::Lower);
    reset_categories();
    // linear_cross_entropy asks what cross_entropy would do; the audit sees only the call made.
    (void)linear_cross_entropy(randn({3, 4}), randn({5, 4}), Tensor(), from_vector<int64_t>({0, 4, 2}));
  }
  bool fused = false, plain = false;
  for (const AuditRecord& r : audit.records()) {
    fused = fused || r.op == "linear_cross_entropy";
    plain = plain || r.op == "cross_entropy";
  }
  CHECK(fused);
  CHECK_FALSE(plain);
}

}  // namespace
}  // namespace precis::amp
