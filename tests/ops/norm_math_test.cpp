// The host/device math of the CUDA normalisation, softmax and class-index loss kernels
// (ops/math/norm_math.h), run on the host: each test composes the shared functions into the algorithm
// the CUDA kernel runs (ops/cuda/norm.cu: two-pass row moments, shifted channel sums, the affine
// backward coefficients, the fused cross-entropy row) and compares the result with the CPU kernel
// on the same data, in f32 and f64, with class weights, ignore_index and label smoothing. So the
// CUDA math is tested on machines without a GPU; the [cuda] tests (tests/cuda/cuda_norm_test.cpp)
// check the kernels themselves on a GPU.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "ops/contracts/kernels_loss.h"
#include "ops/contracts/kernels_norm.h"
#include "ops/math/norm_math.h"
#include "ops/op_table.h"
#include "tensor/factory.h"

using namespace precis;
using namespace precis::kernels;

namespace {

template <typename A>
std::vector<A> random_values(size_t n, uint32_t seed, double lo = -2.0, double hi = 3.0) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<A> v(n);
  for (A& x : v) x = static_cast<A>(d(gen));
  return v;
}

template <typename A>
Tensor tensor_of(const std::vector<A>& v, const Shape& shape) {
  return from_vector<A>(v, shape);
}

template <typename A>
Tensor out_like(const Shape& shape) {
  return empty(shape, {.dtype = dtype_of<A>()});
}

// |actual − expected| <= tol·(1 + |expected|) elementwise.
template <typename A>
void require_close(const Tensor& actual, const std::vector<A>& expected, const char* what) {
  const std::vector<double> a = actual.to_vector<double>();
  REQUIRE(a.size() == expected.size());
  const double tol = std::is_same_v<A, float> ? 2e-5 : 1e-12;
  for (size_t i = 0; i < a.size(); ++i) {
    const double e = static_cast<double>(expected[i]);
    INFO(what << " element " << i << ": CPU kernel " << a[i] << ", shared math " << e);
    REQUIRE(std::fabs(a[i] - e) <= tol * (1.0 + std::fabs(e)));
  }
}

// The CUDA row statistics: two passes, sums in double, mean and variance rounded to A.
template <typename A>
void row_moments(const A* x, int64_t n, A& mean, A& rstd, double eps) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += x[i];
  mean = n > 0 ? static_cast<A>(s / static_cast<double>(n)) : A(0);
  double q = 0;
  for (int64_t i = 0; i < n; ++i) q += static_cast<double>((x[i] - mean) * (x[i] - mean));
  rstd = norm_rstd<A>(n > 0 ? static_cast<double>(static_cast<A>(q / static_cast<double>(n))) : 0.0, eps);
}

}  // namespace

TEMPLATE_TEST_CASE("layer norm shared math matches the CPU kernels, forward and backward", "[ops][norm_math]", float,
                   double) {
  using A = TestType;
  const DType dt = dtype_of<A>();
  const int64_t M = 7, D = 37;
  const double eps = 1e-5;
  const auto x = random_values<A>(M * D, 1, -3, 5), w = random_values<A>(D, 2), b = random_values<A>(D, 3),
             g = random_values<A>(M * D, 4);
  Tensor out = out_like<A>({M, D}), mean = out_like<A>({M}), rstd = out_like<A>({M});
  kernel<LayerNormKernel>(OpId::layer_norm, DeviceType::cpu, dt)(out, mean, rstd, tensor_of(x, {M, D}),
                                                                 tensor_of(w, {D}), tensor_of(b, {D}), eps);
  std::vector<A> e_out(M * D), e_mean(M), e_rstd(M), e_dx(M * D), e_dw(D, 0), e_db(D, 0);
  std::vector<double> dw_acc(D, 0), db_acc(D, 0);
  for (int64_t r = 0; r < M; ++r) {
    const A* xr = x.data() + r * D;
    row_moments(xr, D, e_mean[r], e_rstd[r], eps);
    for (int64_t j = 0; j < D; ++j)
      e_out[r * D + j] = layer_norm_element(xr[j], e_mean[r], e_rstd[r], true, w[j], true, b[j]);
    A s1 = 0, s2 = 0;
    for (int64_t j = 0; j < D; ++j) {
      const A gw = g[r * D + j] * w[j], xh = (xr[j] - e_mean[r]) * e_rstd[r];
      s1 += gw;
      s2 += gw * xh;
      dw_acc[j] += g[r * D + j] * xh;
      db_acc[j] += g[r * D + j];
    }
    for (int64_t j = 0; j < D; ++j)
      e_dx[r * D + j] = layer_norm_grad_element(g[r * D + j] * w[j], (xr[j] - e_mean[r]) * e_rstd[r], e_rstd[r],
                                                s1 / static_cast<A>(D), s2 / static_cast<A>(D));
  }
  for (int64_t j = 0; j < D; ++j) {
    e_dw[j] = static_cast<A>(dw_acc[j]);
    e_db[j] = static_cast<A>(db_acc[j]);
  }
  require_close(out, e_out, "out");
  require_close(mean, e_mean, "mean");
  require_close(rstd, e_rstd, "rstd");
  Tensor dx = out_like<A>({M, D}), dw = out_like<A>({D}), db = out_like<A>({D});
  kernel<LayerNormBackwardKernel>(OpId::layer_norm_backward, DeviceType::cpu, dt)(
      dx, dw, db, tensor_of(g, {M, D}), tensor_of(x, {M, D}), tensor_of(w, {D}), mean, rstd);
  require_close(dx, e_dx, "dx");
  require_close(dw, e_dw, "dweight");
  require_close(db, e_db, "dbias");
}

TEMPLATE_TEST_CASE("batch norm shared math matches the CPU kernels: statistics, running update, backward",
                   "[ops][norm_math]", float, double) {
  using A = TestType;
  const DType dt = dtype_of<A>();
  const int64_t N = 3, C = 4, S = 10, M = N * S;
  const double eps = 1e-5, momentum = 0.1;
  // A large mean: the shifted sums keep the variance accurate.
  const auto x = random_values<A>(N * C * S, 5, 95, 105), w = random_values<A>(C, 6), b = random_values<A>(C, 7),
             g = random_values<A>(N * C * S, 8), rm0 = random_values<A>(C, 9), rv0 = random_values<A>(C, 10, 0.5, 2);
  for (bool training : {true, false}) {
    INFO("training " << training);
    Tensor out = out_like<A>({N, C, S}), sm = out_like<A>({C}), sr = out_like<A>({C});
    Tensor rm = tensor_of(rm0, {C}), rv = tensor_of(rv0, {C});
    kernel<BatchNormKernel>(OpId::batch_norm, DeviceType::cpu, dt)(out, sm, sr, tensor_of(x, {N, C, S}),
                                                                   tensor_of(w, {C}), tensor_of(b, {C}), rm, rv,
                                                                   training, momentum, eps);
    std::vector<A> e_sm(C), e_sr(C), e_rm = rm0, e_rv = rv0, e_out(N * C * S);
    for (int64_t c = 0; c < C; ++c) {
      if (training) {
        const A k = x[c * S];
        double s1 = 0, s2 = 0;
        for (int64_t n = 0; n < N; ++n)
          for (int64_t s = 0; s < S; ++s) {
            const A d = x[(n * C + c) * S + s] - k;
            s1 += d;
            s2 += d * d;
          }
        const ShiftedMoments mo = moments_from_shifted_sums(k, s1, s2, M);
        e_sm[c] = static_cast<A>(mo.mean);
        e_sr[c] = norm_rstd<A>(mo.var, eps);
        e_rm[c] = static_cast<A>(running_update(rm0[c], mo.mean, momentum));
        e_rv[c] = static_cast<A>(running_update(rv0[c], unbiased_variance(mo.var, M), momentum));
      } else {
        e_sm[c] = rm0[c];
        e_sr[c] = norm_rstd<A>(rv0[c], eps);
      }
      for (int64_t n = 0; n < N; ++n)
        for (int64_t s = 0; s < S; ++s) {
          const int64_t i = (n * C + c) * S + s;
          e_out[i] = norm_affine(x[i], e_sm[c], w[c] * e_sr[c], b[c]);
        }
    }
    require_close(out, e_out, "out");
    require_close(sm, e_sm, "save_mean");
    require_close(sr, e_sr, "save_rstd");
    require_close(rm, e_rm, "running_mean");
    require_close(rv, e_rv, "running_var");

    Tensor dx = out_like<A>({N, C, S}), dw = out_like<A>({C}), db = out_like<A>({C});
    kernel<BatchNormBackwardKernel>(OpId::batch_norm_backward, DeviceType::cpu, dt)(
        dx, dw, db, tensor_of(g, {N, C, S}), tensor_of(x, {N, C, S}), tensor_of(w, {C}), sm, sr, training);
    std::vector<A> e_dx(N * C * S), e_dw(C), e_db(C);
    for (int64_t c = 0; c < C; ++c) {
      double sg = 0, sgx = 0;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t s = 0; s < S; ++s) {
          const int64_t i = (n * C + c) * S + s;
          sg += g[i];
          sgx += g[i] * (x[i] - e_sm[c]);
        }
      e_db[c] = static_cast<A>(sg);
      e_dw[c] = static_cast<A>(sgx * e_sr[c]);
      const NormGradCoefs k = batch_norm_grad_coefs(w[c], e_sr[c], sg, sgx, M, training);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t s = 0; s < S; ++s) {
          const int64_t i = (n * C + c) * S + s;
          e_dx[i] = static_cast<A>(k.a) * g[i] + static_cast<A>(k.b) * (x[i] - e_sm[c]) + static_cast<A>(k.c);
        }
    }
    require_close(dx, e_dx, "dx");
    require_close(dw, e_dw, "dweight");
    require_close(db, e_db, "dbias");
  }
}

TEMPLATE_TEST_CASE("group norm shared math matches the CPU kernels, forward and backward", "[ops][norm_math]", float,
                   double) {
  using A = TestType;
  const DType dt = dtype_of<A>();
  const int64_t N = 2, C = 6, S = 5, G = 3, cg = C / G, L = cg * S;
  const double eps = 1e-5;
  const auto x = random_values<A>(N * C * S, 11, -1, 4), w = random_values<A>(C, 12), b = random_values<A>(C, 13),
             g = random_values<A>(N * C * S, 14);
  Tensor out = out_like<A>({N, C, S}), mean = out_like<A>({N, G}), rstd = out_like<A>({N, G});
  kernel<GroupNormKernel>(OpId::group_norm, DeviceType::cpu, dt)(out, mean, rstd, tensor_of(x, {N, C, S}),
                                                                 tensor_of(w, {C}), tensor_of(b, {C}), G, eps);
  std::vector<A> e_out(N * C * S), e_mean(N * G), e_rstd(N * G);
  for (int64_t t = 0; t < N * G; ++t) {
    row_moments(x.data() + t * L, L, e_mean[t], e_rstd[t], eps);
    for (int64_t j = 0; j < L; ++j) {
      const int64_t c = (t % G) * cg + j / S;
      e_out[t * L + j] = norm_affine(x[t * L + j], e_mean[t], w[c] * e_rstd[t], b[c]);
    }
  }
  require_close(out, e_out, "out");
  require_close(mean, e_mean, "mean");
  require_close(rstd, e_rstd, "rstd");

  Tensor dx = out_like<A>({N, C, S}), dw = out_like<A>({C}), db = out_like<A>({C});
  kernel<GroupNormBackwardKernel>(OpId::group_norm_backward, DeviceType::cpu, dt)(
      dx, dw, db, tensor_of(g, {N, C, S}), tensor_of(x, {N, C, S}), tensor_of(w, {C}), mean, rstd, G);
  std::vector<double> chan_g(N * C), chan_gx(N * C);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) {
      const int64_t t = n * G + c / cg;
      double sg = 0, sgx = 0;
      for (int64_t s = 0; s < S; ++s) {
        const int64_t i = (n * C + c) * S + s;
        sg += g[i];
        sgx += g[i] * (x[i] - e_mean[t]);
      }
      chan_g[n * C + c] = sg;
      chan_gx[n * C + c] = sgx * e_rstd[t];
    }
  std::vector<A> e_dx(N * C * S), e_dw(C), e_db(C);
  for (int64_t t = 0; t < N * G; ++t) {
    const int64_t n = t / G, c0 = (t % G) * cg;
    double sdy = 0, sdyx = 0;
    for (int64_t j = 0; j < cg; ++j) {
      sdy += w[c0 + j] * chan_g[n * C + c0 + j];
      sdyx += w[c0 + j] * chan_gx[n * C + c0 + j];
    }
    const NormGradCoefs k = group_norm_grad_coefs(e_rstd[t], sdy, sdyx, L);
    for (int64_t j = 0; j < cg; ++j)
      for (int64_t s = 0; s < S; ++s) {
        const int64_t c = c0 + j, i = (n * C + c) * S + s;
        const A ca = static_cast<A>(static_cast<double>(w[c]) * e_rstd[t]);
        e_dx[i] = ca * g[i] + static_cast<A>(k.b) * (x[i] - e_mean[t]) + static_cast<A>(k.c);
      }
  }
  for (int64_t c = 0; c < C; ++c) {
    double sw = 0, sb = 0;
    for (int64_t n = 0; n < N; ++n) {
      sw += chan_gx[n * C + c];
      sb += chan_g[n * C + c];
    }
    e_dw[c] = static_cast<A>(sw);
    e_db[c] = static_cast<A>(sb);
  }
  require_close(dx, e_dx, "dx");
  require_close(dw, e_dw, "dweight");
  require_close(db, e_db, "dbias");
}

TEMPLATE_TEST_CASE("softmax and log_softmax shared math matches the CPU kernels, rows and columns",
                   "[ops][norm_math]", float, double) {
  using A = TestType;
  const DType dt = dtype_of<A>();
  // (outer, D, inner): inner 1 is the row kernel's layout, inner 3 the column kernel's.
  for (int64_t inner : {int64_t{1}, int64_t{3}}) {
    const int64_t outer = 5, D = 19;
    INFO("inner " << inner);
    const auto x = random_values<A>(outer * D * inner, 15, -6, 6), g = random_values<A>(outer * D * inner, 16);
    for (bool log : {false, true}) {
      INFO("log " << log);
      const OpId fwd = log ? OpId::log_softmax : OpId::softmax, bwd = log ? OpId::log_softmax_backward
                                                                          : OpId::softmax_backward;
      Tensor y = out_like<A>({outer, D, inner});
      kernel<SoftmaxKernel>(fwd, DeviceType::cpu, dt)(y, tensor_of(x, {outer, D, inner}), 1);
      std::vector<A> e_y(x.size()), e_dx(x.size());
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t j = 0; j < inner; ++j) {
          const auto at = [&](int64_t d) { return (o * D + d) * inner + j; };
          A m = -INFINITY, s = 0;
          for (int64_t d = 0; d < D; ++d) m = x[at(d)] > m ? x[at(d)] : m;
          for (int64_t d = 0; d < D; ++d) s += std::exp(x[at(d)] - m);
          for (int64_t d = 0; d < D; ++d)
            e_y[at(d)] = log ? log_softmax_element(x[at(d)], m, std::log(s)) : softmax_element(x[at(d)], m, A(1) / s);
          A acc = 0;
          for (int64_t d = 0; d < D; ++d) acc += log ? g[at(d)] : g[at(d)] * e_y[at(d)];
          for (int64_t d = 0; d < D; ++d)
            e_dx[at(d)] = log ? log_softmax_grad_element(g[at(d)], e_y[at(d)], acc)
                              : softmax_grad_element(g[at(d)], e_y[at(d)], acc);
        }
      require_close(y, e_y, "y");
      Tensor dx = out_like<A>({outer, D, inner});
      kernel<SoftmaxBackwardKernel>(bwd, DeviceType::cpu, dt)(dx, tensor_of(g, {outer, D, inner}), y, 1);
      require_close(dx, e_dx, "dx");
    }
  }
}

TEMPLATE_TEST_CASE("cross-entropy shared math matches the CPU kernels: weights, ignore_index, label smoothing",
                   "[ops][norm_math]", float, double) {
  using A = TestType;
  const DType dt = dtype_of<A>();
  const int64_t M = 6, C = 11, ignore = 4;
  const auto x = random_values<A>(M * C, 17, -8, 8), w = random_values<A>(C, 18, 0.2, 2),
             grows = random_values<A>(M, 19);
  const std::vector<int64_t> t = {3, ignore, 0, 10, 7, ignore};
  for (bool weighted : {false, true})
    for (double eps : {0.0, 0.15}) {
      INFO("weighted " << weighted << ", label_smoothing " << eps);
      const Tensor wt = weighted ? tensor_of(w, {C}) : Tensor();
      Tensor loss = out_like<A>({M}), wrow = out_like<A>({M}), stats = out_like<A>({M, 2});
      kernel<CrossEntropyKernel>(OpId::cross_entropy, DeviceType::cpu, dt)(
          loss, wrow, stats, tensor_of(x, {M, C}), from_vector<int64_t>(t, {M}), wt, ignore, eps);
      Tensor gx = out_like<A>({M, C});
      kernel<CrossEntropyBackwardKernel>(OpId::cross_entropy_backward, DeviceType::cpu, dt)(
          gx, tensor_of(x, {M, C}), stats, from_vector<int64_t>(t, {M}), wt, tensor_of(grows, {M}), ignore, eps);
      A w_total = 0;
      for (int64_t c = 0; c < C; ++c) w_total += weighted ? w[c] : A(1);
      std::vector<A> e_loss(M), e_wrow(M), e_stats(2 * M), e_gx(M * C);
      for (int64_t r = 0; r < M; ++r) {
        const A* xr = x.data() + r * C;
        A m = -INFINITY, s = 0, gap = 0;
        for (int64_t c = 0; c < C; ++c) m = xr[c] > m ? xr[c] : m;
        for (int64_t c = 0; c < C; ++c) s += std::exp(xr[c] - m);
        for (int64_t c = 0; c < C; ++c) gap += (weighted ? w[c] : A(1)) * (m - xr[c]);
        const A log_sum = std::log(s);
        e_stats[2 * r] = m;
        e_stats[2 * r + 1] = log_sum;
        if (t[r] == ignore) continue;  // loss, weight and gradient stay 0
        const A w_t = weighted ? w[t[r]] : A(1);
        e_loss[r] = cross_entropy_row_loss(m, log_sum, xr[t[r]], w_t, static_cast<A>(eps), C, w_total, gap);
        e_wrow[r] = w_t;
        const CrossEntropyGradCoefs<A> k =
            cross_entropy_grad_coefs(grows[r], w_t, static_cast<A>(eps), C, w_total, log_sum);
        for (int64_t c = 0; c < C; ++c)
          e_gx[r * C + c] = cross_entropy_grad_element(xr[c], m, k, weighted ? w[c] : A(1), c == t[r]);
      }
      require_close(loss, e_loss, "loss_rows");
      require_close(wrow, e_wrow, "weight_rows");
      require_close(stats, e_stats, "row_stats");
      require_close(gx, e_gx, "grad_x");
    }
}

TEST_CASE("norm shared math: statistics helpers on exact cases", "[ops][norm_math]") {
  // Shifted sums of {10, 12, 14} with k = 10: Σ(x − k) = 6, Σ(x − k)² = 20 → mean 12, var 8/3.
  const ShiftedMoments mo = moments_from_shifted_sums(10.0, 6.0, 20.0, 3);
  CHECK(mo.mean == 12.0);
  CHECK(mo.var == Approx(8.0 / 3.0).epsilon(1e-15));
  // A negative E[x²] − mean² (cancellation) is clamped to 0. Far enough below zero that no
  // contraction of the expression into an fma (clang, nvcc) can turn it positive.
  CHECK(moments_from_shifted_sums(0.0, 1.0, 0.3, 3).var == 0.0);
  CHECK(unbiased_variance(8.0 / 3.0, 3) == Approx(4.0));
  CHECK(running_update(1.0, 3.0, 0.25) == 1.5);
  CHECK(norm_rstd<double>(3.0, 1.0) == 0.5);
  // Eval-mode batch-norm gradient is the plain scale; training adds the mean and projection terms.
  const NormGradCoefs e = batch_norm_grad_coefs(2.0, 0.5, 7.0, 3.0, 4, false);
  CHECK((e.a == 1.0 && e.b == 0.0 && e.c == 0.0));
  const NormGradCoefs t = batch_norm_grad_coefs(2.0, 0.5, 8.0, 4.0, 4, true);
  CHECK((t.a == 1.0 && t.b == -2.0 * 0.125 * 4.0 / 4.0 && t.c == -1.0 * 8.0 / 4.0));
  // Ignored rows and a zero label smoothing: the smoothing terms vanish exactly.
  CHECK(cross_entropy_row_loss<double>(1.0, 0.5, 1.0, 2.0, 0.0, 5, 99.0, 99.0) == 1.0);
  const CrossEntropyGradCoefs<double> k = cross_entropy_grad_coefs<double>(1.0, 1.0, 0.0, 4, 4.0, 0.0);
  CHECK((k.scale == 1.0 && k.s == 0.0 && k.hit == 1.0));
  CHECK(cross_entropy_grad_element<double>(0.0, 0.0, k, 1.0, true) == 0.0);
}
