// fp8_linear (amp/fp8_linear.h) against an f64 reference built from the same quantization: each
// operand cast with its state's current scale by the saturating rule, dequantized exactly, and the
// three GEMMs formed in f64. The products of the fp8 GEMMs are exact and their sums fp32, so for
// f32 outputs only fp32 summation separates them (bf16 outputs: one bf16 rounding). Over three
// steps with update() between them, so the delayed scales move; the states record the amaxes.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "amp/audit.h"
#include "amp/fp8_linear.h"
#include "autograd/grad_mode.h"
#include "core/float8.h"
#include "core/rng.h"
#include "ops/functional.h"
#include "optim/sgd.h"
#include "tensor/factory.h"
#include "tests/support/tensor_testing.h"

using namespace precis;
using namespace precis::amp;

namespace {

// Exact value of saturate_fp8(v · scale) · scale_inv, as the GEMM sees the operand.
double dequantized(float v, float scale, float scale_inv, Fp8Format f) {
  const uint8_t b = precis::detail::float_to_f8_bits_saturating(v * scale, f);
  const float w = f == Fp8Format::e4m3 ? precis::detail::f8e4m3_bits_to_float(b) : precis::detail::f8e5m2_bits_to_float(b);
  return static_cast<double>(w) * static_cast<double>(scale_inv);
}

std::vector<double> dequantize(const Tensor& t, const DelayedScalingState& s, Fp8Format f) {
  const float scale = s.scale().item<float>(), inv = s.scale_inv().item<float>();
  std::vector<double> out;
  for (float v : t.to(DType::f32).to_vector<float>()) out.push_back(dequantized(v, scale, inv, f));
  return out;
}

void require_close(const Tensor& got, const std::vector<double>& want, double rel, const char* what) {
  const std::vector<double> g = got.to(DType::f64).to_vector<double>();
  REQUIRE(g.size() == want.size());
  double scale = 0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  for (size_t i = 0; i < g.size(); ++i) {
    INFO(what << "[" << i << "]: got " << g[i] << ", want " << want[i]);
    REQUIRE(std::abs(g[i] - want[i]) <= rel * scale);
  }
}

}  // namespace

TEST_CASE("fp8_linear: the three GEMMs equal an f64 reference of the same quantization, step after step",
          "[amp][fp8]") {
  const int64_t m = 24, k = 40, n = 16;
  for (DType x_dtype : {DType::f32, DType::bf16}) {
    INFO("x " << dtype_name(x_dtype));
    manual_seed(12);
    const Tensor w = (randn({n, k}) * 0.2).requires_grad_();
    const Tensor b = randn({n}).requires_grad_();
    Fp8LinearState state(Device::cpu(), {.amax_history_len = 4});
    for (int step = 0; step < 3; ++step) {
      INFO("step " << step);
      const Tensor x = (randn({2, m / 2, k}) * (1.0 + step)).to(x_dtype).requires_grad_();
      // The incoming gradient, small so that the E5M2 scale matters, in x's dtype as autograd passes it.
      const Tensor g = (randn({2, m / 2, n}) * 1e-3).to(x_dtype);
      // The operands as the GEMMs will see them, with the scales of this step.
      const std::vector<double> xq = dequantize(x.detach(), state.input, Fp8Format::e4m3);
      const std::vector<double> wq = dequantize(w.detach(), state.weight, Fp8Format::e4m3);
      const std::vector<double> gq = dequantize(g, state.grad_output, Fp8Format::e5m2);
      const std::vector<float> bv = b.detach().to_vector<float>(), gv = g.to(DType::f32).to_vector<float>();
      std::vector<double> y(m * n), dx(m * k, 0.0), dw(n * k, 0.0), db(n, 0.0);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double acc = bv[j];
          for (int64_t c = 0; c < k; ++c) acc += xq[i * k + c] * wq[j * k + c];
          y[i * n + j] = acc;
          db[j] += gv[i * n + j];
          for (int64_t c = 0; c < k; ++c) {
            dx[i * k + c] += gq[i * n + j] * wq[j * k + c];
            dw[j * k + c] += gq[i * n + j] * xq[i * k + c];
          }
        }
      w.set_grad(Tensor());
      b.set_grad(Tensor());
      const Tensor out = fp8_linear(x, w, b, state);
      REQUIRE(out.sizes() == Shape{2, m / 2, n});
      REQUIRE(out.dtype() == x_dtype);
      const double rel = x_dtype == DType::bf16 ? 1.0 / 128 : 1e-5;  // bf16: the GEMM's and the add's roundings
      require_close(out, y, rel, "y");
      out.backward(g);
      require_close(x.grad(), dx, x_dtype == DType::bf16 ? 1.0 / 128 : 1e-5, "dx");
      require_close(w.grad(), dw, 1e-5, "dw");
      require_close(b.grad(), db, 1e-5, "db");
      // Each cast recorded its amax in the step's slot (slot 0).
      CHECK(state.input.amax_history().to_vector<float>()[0] == max(abs(x.detach())).to(DType::f32).item<float>());
      CHECK(state.weight.amax_history().to_vector<float>()[0] == max(abs(w.detach())).item<float>());
      CHECK(state.grad_output.amax_history().to_vector<float>()[0] == max(abs(g)).to(DType::f32).item<float>());
      state.update();
    }
    CHECK(state.input.scale().item<float>() != 1.0f);  // the delayed scales moved
    CHECK(state.grad_output.scale().item<float>() > 1000.0f);
  }
}

TEST_CASE("fp8_linear refuses bad operands, naming them", "[amp][fp8]") {
  Fp8LinearState state;
  const Tensor x = randn({4, 8}), w = randn({3, 8});
  PRECIS_REQUIRE_THROWS_WITH_ALL(fp8_linear(x, randn({3, 7}), Tensor(), state), ShapeError, "fp8_linear", "(N, K)");
  PRECIS_REQUIRE_THROWS_WITH_ALL(fp8_linear(x, w, randn({4}), state), ShapeError, "bias", "(N) = (3)");
  PRECIS_REQUIRE_THROWS_WITH_ALL(fp8_linear(x.to(DType::f64), w, Tensor(), state), DTypeError, "x", "f64");
  PRECIS_REQUIRE_THROWS_WITH_ALL(fp8_linear(x, w.to(DType::f16), Tensor(), state), DTypeError, "weight", "f16");
  // A state round-trips through its state dict, every operand's entries included.
  const StateDict d = state.state_dict();
  CHECK(d.count("input.amax_history") == 1);
  CHECK(d.count("grad_output.scale_inv") == 1);
  Fp8LinearState other;
  CHECK_NOTHROW(other.load_state_dict(d));
}

// [cuda]: cuBLASLt's fp8 GEMMs (dimensions multiples of 16) against the CPU's exact emulation: the
// same casts, so only fp32 summation order (and the forward's fast accumulation) separates them.
TEST_CASE("fp8_linear on CUDA matches the CPU within summation order", "[amp][fp8][cuda]") {
  PRECIS_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  manual_seed(13);
  const Tensor x = randn({32, 48}).to(DType::bf16), w = randn({16, 48}) * 0.2, b = randn({16});
  const Tensor g = (randn({32, 16}) * 1e-3).to(DType::bf16);
  auto run = [&](Device d) {
    Fp8LinearState state(d, {.amax_history_len = 4});
    const Tensor xd = x.to(d).requires_grad_(), wd = w.to(d).requires_grad_(), bd = b.to(d).requires_grad_();
    for (int step = 0; step < 2; ++step) {  // the second step runs with delayed scales
      wd.set_grad(Tensor());
      bd.set_grad(Tensor());
      xd.set_grad(Tensor());
      fp8_linear(xd, wd, bd, state).backward(g.to(d));
      state.update();
    }
    return std::vector<Tensor>{fp8_linear(xd, wd, bd, state).to(Device::cpu()), xd.grad().to(Device::cpu()),
                               wd.grad().to(Device::cpu()), state.grad_output.scale().to(Device::cpu())};
  };
  const std::vector<Tensor> cpu = run(Device::cpu()), cuda = run(gpu);
  PRECIS_REQUIRE_SAME_BITS(cuda[3], cpu[3]);  // the scales: element-wise ops and a max
  PRECIS_REQUIRE_CLOSE(cuda[0].to(DType::f32), cpu[0].to(DType::f32), DType::bf16);
  PRECIS_REQUIRE_CLOSE(cuda[1].to(DType::f32), cpu[1].to(DType::f32), DType::bf16);
  PRECIS_REQUIRE_CLOSE(cuda[2], cpu[2], DType::f32);
}

TEST_CASE("an Audit names fp8_linear's three operands, the output gradient's from backward", "[amp][fp8][audit]") {
  Fp8LinearState state;
  const Tensor x = randn({6, 8}).requires_grad_(), w = randn({4, 8}).requires_grad_();
  amp::Audit audit;
  fp8_linear(x, w, Tensor(), state).sum().backward();
  std::vector<std::string> names;
  for (const Fp8AuditRecord& r : audit.fp8_records()) names.push_back(r.operand);
  CHECK(names == std::vector<std::string>{"fp8_linear grad_output (6, 4)", "fp8_linear input (6, 8)",
                                          "fp8_linear weight (4, 8)"});
}

namespace {
// Weight casts an Audit saw for a weight of `shape_text`.
int64_t weight_casts(const Audit& audit, const std::string& shape) {
  for (const Fp8AuditRecord& r : audit.fp8_records())
    if (r.operand == "fp8_linear weight " + shape) return r.casts;
  return 0;
}
}  // namespace

// Transformer Engine casts a weight once per optimizer step: the micro-batches of a step reuse the
// cast (the same bits as casting again), and update(), an optimizer step (the weight's version)
// or another weight start a new one.
TEST_CASE("fp8_linear casts the weight once per step: later micro-batches reuse it, bit for bit", "[amp][fp8]") {
  auto run = [](bool cached, int64_t* casts) {
    manual_seed(21);
    const Tensor w = (randn({16, 32}) * 0.2).requires_grad_();
    Fp8LinearState state(Device::cpu(), {.amax_history_len = 4});
    if (!cached) state.weight_cache = nullptr;
    optim::SGD opt({w}, {.lr = 0.1});
    Audit audit;
    for (int step = 0; step < 3; ++step) {
      for (int micro = 0; micro < 2; ++micro) {
        const Tensor y = fp8_linear(randn({8, 32}), w, Tensor(), state);
        sum(mul(y, y)).backward();
      }
      opt.step();
      opt.zero_grad();
      state.update();
    }
    *casts = weight_casts(audit, "(16, 32)");
    return std::make_pair(w.detach().clone(), state.weight.amax_history().clone());
  };
  int64_t cached_casts = 0, plain_casts = 0;
  const auto [cached_w, cached_history] = run(true, &cached_casts);
  const auto [plain_w, plain_history] = run(false, &plain_casts);
  CHECK(cached_casts == 3);
  CHECK(plain_casts == 6);
  PRECIS_REQUIRE_SAME_BITS(cached_w, plain_w);
  PRECIS_REQUIRE_SAME_BITS(cached_history, plain_history);

  // Within a step: a weight changed in place is cast again.
  Fp8LinearState state;
  const Tensor w = randn({4, 8});
  Audit audit;
  (void)fp8_linear(randn({2, 8}), w, Tensor(), state);
  (void)fp8_linear(randn({2, 8}), w, Tensor(), state);
  CHECK(weight_casts(audit, "(4, 8)") == 1);
  Tensor(w).copy_(mul(w, 2.0));  // in place: the version moves
  (void)fp8_linear(randn({2, 8}), w, Tensor(), state);
  CHECK(weight_casts(audit, "(4, 8)") == 2);
}
