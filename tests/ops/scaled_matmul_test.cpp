// scaled_matmul (the fp8 GEMM, docs/fp8.md): against a naive f64 reference over format pairs,
// output dtypes, strides and odd shapes; against PyTorch's torch._scaled_mm on the CPU
// (tests/golden/gen_fp8_fixtures.py, fixtures/fp8/scaled_mm.safetensors); amax; bad inputs; and
// on a GPU, the cuBLASLt kernel against the CPU's.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/float8.h"
#include "core/warning.h"
#include "ops/functional.h"
#include "tensor/factory.h"
#include "tensor/safetensors.h"
#include "tests/support/golden.h"
#include "tests/support/op_cases.h"
#include "tests/support/tensor_testing.h"

namespace precis::testing {
namespace {

Tensor scalar_f32(float v) { return full({}, v); }

// Random fp8 values spread over most of the format's range (plain cast of a scaled normal).
Tensor random_fp8(const Shape& s, DType dt, uint64_t seed) {
  Generator g(seed);
  const double spread = dt == DType::f8_e4m3 ? 448.0 / 8 : 57344.0 / 64;
  return (randn(s, {}, &g) * spread).to(dt);
}

// out[i][j] = sa·sb·Σ a[i][p]·b[p][j] in f64 (exact for these sizes), as a (M, N) f64 tensor.
Tensor naive(const Tensor& a, const Tensor& b, float sa, float sb) {
  const Tensor a64 = a.to(DType::f32).to(DType::f64).contiguous(), b64 = b.to(DType::f32).to(DType::f64).contiguous();
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  Tensor out = zeros({m, n}, {.dtype = DType::f64});
  const auto* pa = static_cast<const double*>(a64.data_ptr());
  const auto* pb = static_cast<const double*>(b64.data_ptr());
  auto* po = static_cast<double*>(out.data_ptr());
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) s += pa[i * k + p] * pb[p * n + j];
      po[i * n + j] = s * (static_cast<double>(sa) * static_cast<double>(sb));
    }
  return out;
}

// |actual - expected| within `ulps` units of the output dtype's rounding at each value, plus the
// fp32 accumulation's error bound (k · 2^-24 · Σ|products|, here bounded by k · 2^-24 · max|a|·max|b|·k).
void require_close_to_exact(const Tensor& actual, const Tensor& exact, const Tensor& a, const Tensor& b, float sa,
                            float sb, const std::string& what) {
  INFO(what);
  REQUIRE(actual.sizes() == exact.sizes());
  const Tensor act = actual.to(DType::f64).contiguous();
  const auto* x = static_cast<const double*>(act.data_ptr());
  const auto* e = static_cast<const double*>(exact.data_ptr());
  const double amax_a = max(abs(a.to(DType::f32))).item<float>(), amax_b = max(abs(b.to(DType::f32))).item<float>();
  const double k = static_cast<double>(a.size(1));
  const double acc_bound = k * k * 0x1p-24 * amax_a * amax_b * std::fabs(static_cast<double>(sa) * sb);
  const double unit = actual.dtype() == DType::bf16 ? 0x1p-8 : 0x1p-24;
  for (int64_t i = 0; i < exact.numel(); ++i) {
    const double tol = unit * std::fabs(e[i]) * 1.01 + acc_bound + 1e-30;
    if (std::fabs(x[i] - e[i]) > tol) {
      INFO("element " << i << ": got " << x[i] << ", exact " << e[i] << ", tolerance " << tol);
      REQUIRE(std::fabs(x[i] - e[i]) <= tol);
    }
  }
}

TEST_CASE("scaled_matmul matches an exact reference over formats, dtypes and layouts", "[ops][fp8][scaled_matmul]") {
  struct Pair { DType a, b; };
  const Pair pairs[] = {{DType::f8_e4m3, DType::f8_e4m3}, {DType::f8_e4m3, DType::f8_e5m2},
                        {DType::f8_e5m2, DType::f8_e4m3}};
  const Shape shapes[] = {{1, 1, 1}, {5, 7, 3}, {16, 32, 16}, {33, 64, 17}, {8, 300, 12}};
  uint64_t seed = 1;
  for (const Pair& p : pairs)
    for (const Shape& s : shapes)
      for (DType out_dtype : {DType::bf16, DType::f32})
        for (bool b_transposed : {false, true}) {
          const int64_t m = s[0], k = s[1], n = s[2];
          const Tensor a = random_fp8({m, k}, p.a, seed++);
          // b as given, or as the transpose of a dense (N, K): the layout torch._scaled_mm requires.
          const Tensor b = b_transposed ? random_fp8({n, k}, p.b, seed++).t() : random_fp8({k, n}, p.b, seed++);
          const float sa = 0.0390625f, sb = 3.0f;
          const auto r = scaled_matmul(a, b, scalar_f32(sa), scalar_f32(sb), {.out_dtype = out_dtype});
          REQUIRE(r.out.dtype() == out_dtype);
          REQUIRE_FALSE(r.amax.defined());
          require_close_to_exact(r.out, naive(a, b, sa, sb), a, b, sa, sb,
                                 std::string(dtype_name(p.a)) + " x " + std::string(dtype_name(p.b)) + " -> " +
                                     std::string(dtype_name(out_dtype)) + " " + shape_str(s) +
                                     (b_transposed ? " b column-major" : ""));
        }
}

TEST_CASE("scaled_matmul with small integer values is exact and its amax is max |out|", "[ops][fp8][scaled_matmul]") {
  // Integers up to 16 are exact in E4M3 and their dot products of length 8 are exact in bf16's
  // range here, so out must equal the integer product exactly, whatever the summation order.
  Generator g(7);
  const Tensor ai = randint(-4, 5, {6, 8}, {.dtype = DType::i64}, &g).to(DType::f32);
  const Tensor bi = randint(-4, 5, {8, 5}, {.dtype = DType::i64}, &g).to(DType::f32);
  const auto r = scaled_matmul(ai.to(DType::f8_e4m3), bi.to(DType::f8_e4m3), scalar_f32(0.5f), scalar_f32(0.25f),
                               {.out_dtype = DType::f32, .compute_amax = true});
  const Tensor want = matmul(ai, bi) * 0.125;
  INFO(allclose_report(r.out, want, {0.0, 0.0}));
  REQUIRE(allclose(r.out, want, {0.0, 0.0}));
  REQUIRE(r.amax.dtype() == DType::f32);
  REQUIRE(r.amax.dim() == 0);
  REQUIRE(r.amax.item<float>() == max(abs(want)).item<float>());
  // K = 0: zeros, amax 0; M = 0: empty.
  const auto z = scaled_matmul(zeros({3, 0}).to(DType::f8_e4m3), zeros({0, 2}).to(DType::f8_e4m3), scalar_f32(1),
                               scalar_f32(1), {.compute_amax = true});
  REQUIRE(same_bits_report(z.out, zeros({3, 2}, {.dtype = DType::bf16})).empty());
  REQUIRE(z.amax.item<float>() == 0.0f);
  REQUIRE(scaled_matmul(zeros({0, 4}).to(DType::f8_e4m3), zeros({4, 2}).to(DType::f8_e4m3), scalar_f32(1),
                        scalar_f32(1)).out.sizes() == Shape{0, 2});
}

TEST_CASE("scaled_matmul matches torch._scaled_mm on the CPU", "[ops][fp8][scaled_matmul][golden]") {
  const SafetensorsFile file = load_safetensors(testing::golden_dir() + "/fp8/scaled_mm.safetensors");
  std::map<std::string, Tensor> t(file.tensors.begin(), file.tensors.end());
  int cases = 0;
  for (const auto& [name, json] : file.metadata) {
    if (name == "generator") continue;
    ++cases;
    INFO(name);
    const GoldenArgs args = GoldenArgs::parse(json);
    const DType out_dtype = args.text("out_dtype") == "bf16" ? DType::bf16 : DType::f32;
    const Tensor a = t.at(name + ".a"), b = t.at(name + ".b"), want = t.at(name + ".out");
    REQUIRE(is_float8(a.dtype()));
    REQUIRE(want.dtype() == out_dtype);
    // b as torch got it: column-major.
    const Tensor b_cm = b.t().contiguous().t();
    const auto r = scaled_matmul(a, b_cm, t.at(name + ".scale_a"), t.at(name + ".scale_b"), {.out_dtype = out_dtype});
    // Both accumulate exact products in fp32; only the summation order differs, so f32 outputs
    // agree to a few fp32 ulps of the row's magnitude and bf16 outputs to one bf16 rounding.
    const Tensor got = r.out.to(DType::f64), ref = want.to(DType::f64);
    const double scale = max(abs(ref)).item<double>();
    const double tol = out_dtype == DType::f32 ? 1e-6 * scale : 0x1p-7 * scale;
    const double err = max(abs(got - ref)).item<double>();
    INFO("max error " << err << ", tolerance " << tol);
    REQUIRE(err <= tol);
    // Most bf16 elements are bit-identical (rounding can differ only near a tie).
    if (out_dtype == DType::bf16) {
      const double same = eq(r.out.to(DType::f32), want.to(DType::f32)).to(DType::f32).mean().item<double>();
      REQUIRE(same > 0.95);
    }
  }
  REQUIRE(cases >= 6);
  REQUIRE(file.metadata.at("generator").find("torch") != std::string::npos);
}

// [cuda]: the cuBLASLt fp8 kernel against the CPU's exact emulation.
TEST_CASE("scaled_matmul on CUDA matches the CPU within summation order", "[ops][fp8][scaled_matmul][cuda]") {
  PRECIS_REQUIRE_CUDA();
  const Device dev = Device::cuda(0);
  std::vector<std::string> warnings;
  const auto previous = set_warning_handler([&](const std::string& m) { warnings.push_back(m); });
  struct Case { int64_t m, k, n; DType a, b; DType out; bool fast; };
  const Case cases[] = {{64, 128, 32, DType::f8_e4m3, DType::f8_e4m3, DType::bf16, true},
                        {32, 64, 48, DType::f8_e5m2, DType::f8_e4m3, DType::f32, false},
                        {16, 256, 16, DType::f8_e4m3, DType::f8_e5m2, DType::bf16, false},
                        {5, 7, 3, DType::f8_e4m3, DType::f8_e4m3, DType::f32, false}};  // fallback shape
  uint64_t seed = 100;
  for (const Case& c : cases) {
    INFO(c.m << "x" << c.k << "x" << c.n << " " << dtype_name(c.a) << " x " << dtype_name(c.b));
    const Tensor a = random_fp8({c.m, c.k}, c.a, seed++), b = random_fp8({c.n, c.k}, c.b, seed++).t();
    const Tensor sa = scalar_f32(0.0625f), sb = scalar_f32(1.5f);
    const auto cpu = scaled_matmul(a, b, sa, sb, {.out_dtype = c.out, .compute_amax = true});
    const auto gpu = scaled_matmul(a.to(dev), b.to(dev), sa.to(dev), sb.to(dev),
                                   {.out_dtype = c.out, .compute_amax = true, .fast_accum = c.fast});
    REQUIRE(gpu.out.device() == dev);
    require_close_to_exact(gpu.out.to(Device::cpu()), naive(a, b, 0.0625f, 1.5f), a, b, 0.0625f, 1.5f, "cuda");
    const double tol = c.out == DType::f32 ? 1e-5 : 0x1p-7;
    REQUIRE(std::fabs(gpu.amax.item<float>() - cpu.amax.item<float>()) <= tol * cpu.amax.item<float>());
  }
  // The f32 fallback (exact, so the checks above cannot tell) ran for the one shape cuBLASLt's fp8
  // GEMM cannot take, and for no other.
  std::vector<std::string> fallbacks;
  for (const auto& w : warnings)
    if (w.starts_with("scaled_matmul:")) fallbacks.push_back(w);
  REQUIRE(fallbacks.size() == 1);
  CHECK(fallbacks[0].find("5, 7") != std::string::npos);
  // An operand 16 bytes into its storage: the heuristic is told the alignment (it assumes 256
  // bytes otherwise), so whatever it offers runs; fp8 or the fallback, the result is right.
  const Tensor big = random_fp8({17, 16}, DType::f8_e4m3, seed++);
  const Tensor b16 = random_fp8({32, 16}, DType::f8_e4m3, seed++).t();
  const Tensor a16 = big.narrow(0, 1, 16);
  const auto shifted = scaled_matmul(big.to(dev).narrow(0, 1, 16), b16.to(dev), scalar_f32(0.0625f).to(dev),
                                     scalar_f32(1.5f).to(dev), {.out_dtype = DType::f32});
  require_close_to_exact(shifted.out.to(Device::cpu()), naive(a16, b16, 0.0625f, 1.5f), a16, b16, 0.0625f, 1.5f,
                         "cuda, 16-byte offset");
  set_warning_handler(previous);
}

const bool kBadInputs = register_error_cases({
    PRECIS_BAD_INPUT(scaled_matmul, DTypeError, "bf16 operands instead of fp8",
                     scaled_matmul(ones({2, 3}, {.dtype = DType::bf16}), ones({3, 2}, {.dtype = DType::bf16}),
                                   full({}, 1.0), full({}, 1.0)),
                     "scaled_matmul", "f8_e4m3 or f8_e5m2", "[2, 3] bf16 cpu", "cast with the scale first"),
    PRECIS_BAD_INPUT(scaled_matmul, DTypeError, "two e5m2 operands",
                     scaled_matmul(ones({2, 3}).to(DType::f8_e5m2), ones({3, 2}).to(DType::f8_e5m2), full({}, 1.0),
                                   full({}, 1.0)),
                     "scaled_matmul", "both f8_e5m2", "make one operand f8_e4m3"),
    PRECIS_BAD_INPUT(scaled_matmul, ShapeError, "inner sizes that differ",
                     scaled_matmul(ones({2, 3}).to(DType::f8_e4m3), ones({4, 2}).to(DType::f8_e4m3), full({}, 1.0),
                                   full({}, 1.0)),
                     "scaled_matmul", "[2, 3]", "[4, 2]", "a.size(1) == b.size(0)"),
    PRECIS_BAD_INPUT(scaled_matmul, ShapeError, "a 3-D operand",
                     scaled_matmul(ones({2, 2, 3}).to(DType::f8_e4m3), ones({3, 2}).to(DType::f8_e4m3), full({}, 1.0),
                                   full({}, 1.0)),
                     "scaled_matmul", "2-D", "reshape"),
    PRECIS_BAD_INPUT(scaled_matmul, ShapeError, "a per-row scale",
                     scaled_matmul(ones({2, 3}).to(DType::f8_e4m3), ones({3, 2}).to(DType::f8_e4m3), ones({2}),
                                   full({}, 1.0)),
                     "scaled_matmul", "one value each", "per-tensor"),
    PRECIS_BAD_INPUT(scaled_matmul, DTypeError, "an f64 scale",
                     scaled_matmul(ones({2, 3}).to(DType::f8_e4m3), ones({3, 2}).to(DType::f8_e4m3),
                                   full({}, 1.0, {.dtype = DType::f64}), full({}, 1.0)),
                     "scaled_matmul", "must be f32", "f64"),
    PRECIS_BAD_INPUT(scaled_matmul, DTypeError, "an f16 output",
                     scaled_matmul(ones({2, 3}).to(DType::f8_e4m3), ones({3, 2}).to(DType::f8_e4m3), full({}, 1.0),
                                   full({}, 1.0), {.out_dtype = DType::f16}),
                     "scaled_matmul", "out_dtype f16", "DType::bf16 or DType::f32"),
    PRECIS_BAD_INPUT(scaled_matmul, ValueError, "an undefined scale",
                     scaled_matmul(ones({2, 3}).to(DType::f8_e4m3), ones({3, 2}).to(DType::f8_e4m3), Tensor(),
                                   full({}, 1.0)),
                     "scaled_matmul", "undefined"),
});

}  // namespace
}  // namespace precis::testing
