// The vectorised CPU dropout (issue 16) against the scalar rule it must keep bit for bit: the
// vector Philox generator (ops/cpu/philox_vec.h, AVX2 and AVX-512 copies) against
// philox_stream_block, one kernel row (ops/cpu/dropout_row.h) starting anywhere inside a Philox
// block against ops/math/dropout_math.h element by element, and the registered kernel over shapes,
// strides and thread counts that cut rows at unaligned places.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <vector>

#include "core/dtype_visit.h"
#include "core/opmath.h"
#include "core/philox.h"
#include "core/thread_pool.h"
#include "ops/cpu/dropout_row.h"
#include "ops/cpu/philox_vec.h"
#include "ops/math/dropout_math.h"
#include "ops/contracts/kernels_loss.h"
#include "ops/op_table.h"
#include "tensor/factory.h"
#include "tests/support/tensor_testing.h"

using namespace precis;

namespace {

constexpr DType kFloatDtypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16};

template <typename T>
bool same_bits(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

// Seeded values in [-4, 4) with specials mixed in (±inf, NaN, −0, an fp32 subnormal, and 60000,
// which the scale takes past the f16 range), so dropped and kept specials are both compared.
template <typename T>
std::vector<T> inputs(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-4.0f, 4.0f);
  const float specials[] = {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(), -0.0f, 1e-40f, 60000.0f};
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = convert<T>(i % 7 == 3 ? specials[(i / 7) % 6] : u(gen));
  return v;
}

// The element's output under the documented rule, one Philox block per element.
template <typename T>
T reference(T x, uint64_t seed, uint64_t offset, int64_t index, double p) {
  using C = opmath_t<T>;
  const C scale = static_cast<C>(1.0 / (1.0 - p));
  const bool keep = kernels::dropout_keep_at(seed, offset, index, kernels::dropout_keep_threshold(p));
  return keep ? store_op<T>(kernels::dropout_scaled(load_op(x), scale)) : store_op<T>(C(0));
}

}  // namespace

#if PRECIS_VEC_EXP_AVX512
TEST_CASE("the vector Philox generator gives philox_stream_block's lanes on every path", "[ops][dropout][rng]") {
  const uint64_t keys[] = {0, 42, 0x853c49e6748fea9bULL, 0xFFFFFFFF00000001ULL, 0xdeadbeefcafebabeULL};
  // Counters whose low word wraps inside a vector (carry into the high word), a high word already
  // set, and the 2^64 wrap.
  const uint64_t firsts[] = {0,           1,          5,           12345,       (uint64_t{1} << 32) - 17,
                             (uint64_t{1} << 32) - 3, (uint64_t{1} << 32) - 9, (uint64_t{7} << 32) | 3,
                             0xFFFFFFFFFFFFFFF5ULL,   0xABCDEF00FFFFFFFAULL};
  using Fn = void (*)(uint64_t, uint64_t, int64_t, uint32_t*);
  std::vector<std::pair<const char*, Fn>> paths = {{"dispatch", &cpu::philox_stream_lanes},
                                                   {"avx2", &cpu::philox_stream_lanes_avx2}};
  if (cpu::vec_detail::use_avx512())
    paths.push_back({"avx512", &cpu::philox_stream_lanes_avx512});
  else
    WARN("this CPU has no AVX-512F: the AVX-512 Philox path is not tested here");
  constexpr uint32_t kSentinel = 0xA5A5A5A5u;
  int64_t compared = 0;
  for (const auto& [name, fn] : paths)
    for (uint64_t key : keys)
      for (uint64_t first : firsts)
        for (int64_t n = 0; n <= 70; ++n) {
          std::vector<uint32_t> out(static_cast<size_t>(4 * n + 8), kSentinel);
          fn(key, first, n, out.data());
          for (int64_t k = 0; k < n; ++k) {
            const PhiloxBlock want = philox_stream_block(key, first + static_cast<uint64_t>(k));
            for (int l = 0; l < 4; ++l)
              if (out[static_cast<size_t>(4 * k + l)] != want.v[l]) {
                INFO(name << " key " << key << " first " << first << " n " << n << " block " << k << " lane " << l);
                REQUIRE(out[static_cast<size_t>(4 * k + l)] == want.v[l]);
              }
            ++compared;
          }
          for (size_t t = static_cast<size_t>(4 * n); t < out.size(); ++t) REQUIRE(out[t] == kSentinel);
        }
  REQUIRE(compared > 0);
}
#endif

TEST_CASE("a dropout row starting anywhere in a Philox block matches the scalar rule bit for bit",
          "[ops][dropout]") {
  std::vector<int64_t> lengths;
  for (int64_t n = 0; n <= 70; ++n) lengths.push_back(n);
  for (int64_t n : {255, 256, 257, 600, 1030}) lengths.push_back(n);  // several steps of the row
  for (DType dt : kFloatDtypes)
    visit_floating_dtype(dt, [&]<typename T>() {
      using C = opmath_t<T>;
      for (int64_t stride : {1, 3}) {
        const std::vector<T> x = inputs<T>(static_cast<size_t>(1030 * stride), 5);
        for (int64_t first = 0; first <= 17; ++first)
          for (int64_t n : lengths) {
            const double p = n % 2 == 0 ? 0.3 : 0.9;
            const uint64_t seed = 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(first), offset = 1000 + n;
            std::vector<T> out(static_cast<size_t>(n + 3), convert<T>(123.0f));
            cpu::dropout_row<T>(out.data(), x.data(), stride, n, first, seed, offset,
                                kernels::dropout_keep_threshold(p), static_cast<C>(1.0 / (1.0 - p)));
            for (int64_t j = 0; j < n; ++j) {
              const T want = reference(x[static_cast<size_t>(j * stride)], seed, offset, first + j, p);
              if (!same_bits(out[static_cast<size_t>(j)], want)) {
                INFO(dtype_name(dt) << " stride " << stride << " first " << first << " n " << n << " element " << j
                                    << ": got " << static_cast<double>(load_op(out[static_cast<size_t>(j)]))
                                    << ", want " << static_cast<double>(load_op(want)));
                REQUIRE(same_bits(out[static_cast<size_t>(j)], want));
              }
            }
            for (int64_t j = n; j < n + 3; ++j) REQUIRE(same_bits(out[static_cast<size_t>(j)], convert<T>(123.0f)));
          }
      }
    });
}

TEST_CASE("a dropout row packs its mask bit for bit, and masked_row applies it again without the draw",
          "[ops][dropout]") {
  // Lengths around the 8-lane packs, the 32-bit words and the 256-element steps; rows starting
  // inside a Philox block. The mask's bit j must be the scalar rule's decision for element
  // first + j, the padding bits of the last word 0, and masked_row's output dropout_row's.
  std::vector<int64_t> lengths;
  for (int64_t n = 0; n <= 70; ++n) lengths.push_back(n);
  for (int64_t n : {255, 256, 257, 600, 1030}) lengths.push_back(n);
  for (DType dt : kFloatDtypes)
    visit_floating_dtype(dt, [&]<typename T>() {
      using C = opmath_t<T>;
      const std::vector<T> x = inputs<T>(1030, 7);
      for (int64_t first : {0, 1, 3, 130})
        for (int64_t n : lengths) {
          const double p = n % 2 == 0 ? 0.3 : 0.7;
          const uint64_t seed = 4242 + static_cast<uint64_t>(n), offset = 17;
          const uint32_t threshold = kernels::dropout_keep_threshold(p);
          const C scale = static_cast<C>(1.0 / (1.0 - p));
          const size_t words = static_cast<size_t>((n + 31) / 32);
          std::vector<uint32_t> keep(words + 1, 0xA5A5A5A5u);  // garbage to overwrite, and a guard word
          std::vector<T> drawn(static_cast<size_t>(n)), replayed(static_cast<size_t>(n), convert<T>(9.0f));
          cpu::dropout_row<T>(drawn.data(), x.data(), 1, n, first, seed, offset, threshold, scale, keep.data());
          for (int64_t j = 0; j < 32 * static_cast<int64_t>(words); ++j) {
            const bool bit = (keep[static_cast<size_t>(j / 32)] >> (j % 32)) & 1u;
            const bool want = j < n && kernels::dropout_keep_at(seed, offset, first + j, threshold);
            INFO(dtype_name(dt) << " first " << first << " n " << n << " bit " << j);
            REQUIRE(bit == want);
          }
          REQUIRE(keep[words] == 0xA5A5A5A5u);
          cpu::masked_row<T>(replayed.data(), x.data(), n, keep.data(), scale);
          for (int64_t j = 0; j < n; ++j) {
            INFO(dtype_name(dt) << " first " << first << " n " << n << " element " << j);
            REQUIRE(same_bits(replayed[static_cast<size_t>(j)], drawn[static_cast<size_t>(j)]));
          }
        }
    });
}

TEST_CASE("the dropout kernel matches the scalar rule for any layout and thread count", "[ops][dropout]") {
  struct Case {
    Shape shape;
    int layout;  // 0 contiguous, 1 non-contiguous copy, 2 transposed view (tiled rows)
  };
  std::vector<Case> cases;
  for (int64_t len : {1, 5, 17, 33, 70})
    for (int layout : {0, 1}) cases.push_back({{3, len}, layout});
  cases.push_back({{45, 37}, 2});    // the tiled strided walk cuts rows into 32-element pieces
  cases.push_back({{7, 9001}, 0});   // two threads split inside rows at unaligned places
  cases.push_back({{7, 9001}, 1});
  const int threads = get_num_threads();
  for (DType dt : kFloatDtypes)
    for (const Case& c : cases)
      for (int nthreads : {1, 2}) {
        set_num_threads(nthreads);
        int64_t n = 1;
        for (int64_t s : c.shape) n *= s;
        visit_floating_dtype(dt, [&]<typename T>() {
          const std::vector<T> values = inputs<T>(static_cast<size_t>(n), 11);
          Tensor x = empty(c.shape, {.dtype = dt});
          std::memcpy(x.data_ptr(), values.data(), values.size() * sizeof(T));
          if (c.layout == 1) x = testing::non_contiguous(x);
          if (c.layout == 2) x = x.t();
          const double p = 0.25;
          const uint64_t seed = 77, offset = 3;
          Tensor out = empty(x.sizes(), {.dtype = dt});
          kernel<kernels::DropoutKernel>(OpId::dropout, DeviceType::cpu, dt)(out, x, p, PhiloxDraw{seed, offset});
          const Tensor xc = x.contiguous();
          const T* xs = xc.data_ptr<T>();
          const T* os = out.data_ptr<T>();
          for (int64_t i = 0; i < n; ++i)
            if (!same_bits(os[i], reference(xs[i], seed, offset, i, p))) {
              INFO(dtype_name(dt) << " shape " << x.describe() << " threads " << nthreads << " element " << i);
              REQUIRE(same_bits(os[i], reference(xs[i], seed, offset, i, p)));
            }
        });
      }
  set_num_threads(threads);
}
