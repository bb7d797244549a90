// The host/device math of the CUDA indexing, pooling and dropout kernels (ops/math/index_math.h,
// ops/math/pool_math.h, ops/math/dropout_math.h, core/philox.h), run on the host exactly as the CUDA kernels
// run it (one output element per call, the same pointers and strides) and compared bit for bit
// with the CPU kernels: so the device math is tested on machines without a GPU.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <tuple>
#include <vector>

#include "core/dtype_visit.h"
#include "core/opmath.h"
#include "core/philox.h"
#include "core/rng.h"
#include "ops/math/dropout_math.h"
#include "ops/functional.h"
#include "ops/math/index_math.h"
#include "ops/contracts/kernels.h"
#include "ops/contracts/kernels_conv.h"
#include "ops/contracts/kernels_loss.h"
#include "ops/op_table.h"
#include "ops/math/pool_math.h"
#include "tensor/factory.h"
#include "tests/support/tensor_testing.h"

using namespace precis;
using kernels::PoolGeometry;

namespace {

constexpr DType kFloating[] = {DType::f32, DType::f64, DType::f16, DType::bf16};
constexpr DType kAddable[] = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64};

// Seeded values drawn from `levels` evenly spaced steps in [lo, hi] (few levels: ties), as dtype.
Tensor stepped(const Shape& shape, double lo, double hi, int levels, uint32_t seed, DType dtype) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> pick(0, levels - 1);
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = lo + (hi - lo) * pick(gen) / (levels - 1);
  return from_vector<double>(v, shape).to(dtype);
}

// Whether a and b have the same bits (NaN equal to the same NaN; +0 unequal to -0).
template <typename T>
bool same_bits(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

PoolGeometry geometry_of(const Tensor& x, const Tensor& out, const kernels::Pool2dParams& p) {
  return kernels::pool_geometry(x.size(2), x.size(3), out.size(2), out.size(3), p);
}

struct PoolCase {
  int64_t kernel[2], stride[2], padding[2], dilation[2];
  bool ceil_mode;
};
const PoolCase kPoolCases[] = {
    {{2, 2}, {2, 2}, {0, 0}, {1, 1}, false}, {{3, 3}, {2, 2}, {1, 1}, {1, 1}, false},
    {{3, 3}, {2, 2}, {1, 1}, {1, 1}, true},  {{3, 3}, {1, 1}, {1, 1}, {2, 2}, false},
    {{2, 2}, {3, 3}, {1, 1}, {1, 1}, true},  {{3, 2}, {2, 1}, {1, 0}, {1, 2}, true},
    {{1, 1}, {1, 1}, {0, 0}, {1, 1}, false},
};

std::vector<int64_t> vec2(const int64_t (&a)[2]) { return {a[0], a[1]}; }

kernels::Pool2dParams params_of(const PoolCase& c) {
  kernels::Pool2dParams p;
  for (int d = 0; d < 2; ++d) {
    p.kernel[d] = c.kernel[d];
    p.stride[d] = c.stride[d];
    p.padding[d] = c.padding[d];
    p.dilation[d] = c.dilation[d];
  }
  return p;
}

// The CUDA pooling kernels' thread loops, on the host: forward over (plane, oh, ow), backward over
// (plane, ih, iw).
template <typename T, typename F>
Tensor simulate(const Shape& shape, DType dt, F&& element) {
  Tensor out = empty(shape, {.dtype = dt});
  T* o = out.data_ptr<T>();
  const int64_t per = shape[2] * shape[3];
  for (int64_t plane = 0; plane < shape[0] * shape[1]; ++plane)
    for (int64_t e = 0; e < per; ++e) o[plane * per + e] = element(plane, e / shape[3], e % shape[3]);
  return out;
}

template <typename T>
void require_same_tensor(const Tensor& actual, const Tensor& expected) {
  REQUIRE(actual.sizes() == expected.sizes());
  const T* a = actual.data_ptr<T>();
  const T* b = expected.data_ptr<T>();
  for (int64_t i = 0; i < actual.numel(); ++i) {
    INFO("flat index " << i << ": " << load_op(a[i]) << " vs CPU " << load_op(b[i]));
    REQUIRE(same_bits(a[i], b[i]));
  }
}

}  // namespace

TEST_CASE("philox_stream_block is the CPU generator's block", "[ops][cuda_math][rng]") {
  // Random123's known answer for the zero counter and key, through the host/device function.
  const PhiloxBlock z = philox4x32_10(0, 0, 0, 0, 0);
  REQUIRE((z.v[0] == 0x6627e8d5u && z.v[1] == 0xe169c58du && z.v[2] == 0xbc57ac4cu && z.v[3] == 0x9b00dbd8u));
  for (uint64_t seed : {uint64_t{0}, uint64_t{42}, uint64_t{0x853c49e6748fea9bULL}}) {
    const Generator g(seed);
    for (uint64_t index : {uint64_t{0}, uint64_t{1}, uint64_t{12345}, (uint64_t{7} << 32) | 3u}) {
      const std::array<uint32_t, 4> want = g.block(index);
      const PhiloxBlock got = philox_stream_block(seed, index);
      for (int k = 0; k < 4; ++k) REQUIRE(got.v[k] == want[k]);
    }
  }
}

TEST_CASE("the dropout mask functions give the CPU kernel's mask and values", "[ops][cuda_math][dropout]") {
  for (DType dt : kFloating) {
    for (const double p : {0.1, 0.5, 0.9}) {
      for (const bool strided : {false, true}) {
        const uint64_t seed = 1234 + static_cast<uint64_t>(p * 10), offset = 77;
        // 3·7·5 = 105 elements: the last Philox block is partly used.
        Tensor x = testing::uniform_input({3, 7, 5}, 0.5, 2.0, false, 9, dt);
        if (strided) x = testing::non_contiguous(x);
        Tensor out = empty(x.sizes(), {.dtype = dt});
        kernel<kernels::DropoutKernel>(OpId::dropout, DeviceType::cpu, dt)(out, x, p, PhiloxDraw{seed, offset});
        const Tensor xc = x.contiguous();
        const uint32_t threshold = kernels::dropout_keep_threshold(p);
        int64_t kept = 0;
        visit_floating_dtype(dt, [&]<typename T>() {
          using C = opmath_t<T>;
          const C scale = static_cast<C>(1.0 / (1.0 - p));
          const T* xs = xc.data_ptr<T>();
          const T* os = out.data_ptr<T>();
          for (int64_t i = 0; i < out.numel(); ++i) {
            const bool keep = kernels::dropout_keep_at(seed, offset, i, threshold);
            kept += keep ? 1 : 0;
            // The documented rule, from the generator itself: lane i % 4 of block offset + i / 4,
            // as a uniform in [0, 1), below 1 − p.
            const std::array<uint32_t, 4> lanes = Generator(seed).block(offset + static_cast<uint64_t>(i / 4));
            REQUIRE(keep == (uint32_to_unit_float(lanes[static_cast<size_t>(i % 4)]) < 1.0 - p));
            const T want = keep ? store_op<T>(kernels::dropout_scaled(load_op(xs[i]), scale)) : store_op<T>(C(0));
            INFO(dtype_name(dt) << " p " << p << " element " << i);
            REQUIRE(same_bits(os[i], want));
          }
        });
        // A mask that kept everything or nothing would pass the comparison above vacuously.
        CHECK(std::abs(static_cast<double>(kept) / 105.0 - (1.0 - p)) < 0.2);
      }
    }
  }
}

TEST_CASE("the pooling window functions match the CPU pooling kernels bit for bit", "[ops][cuda_math][pool]") {
  for (DType dt : kFloating) {
    for (const PoolCase& c : kPoolCases) {
      for (const Shape& shape : {Shape{2, 3, 7, 6}, Shape{1, 2, 5, 5}}) {
        INFO(dtype_name(dt) << " kernel " << c.kernel[0] << "x" << c.kernel[1] << " stride " << c.stride[0] << "x"
                            << c.stride[1] << " padding " << c.padding[0] << "x" << c.padding[1] << " dilation "
                            << c.dilation[0] << "x" << c.dilation[1] << " ceil " << c.ceil_mode << " input "
                            << shape_str(shape));
        const kernels::Pool2dParams p = params_of(c);
        visit_floating_dtype(dt, [&]<typename T>() {
          // max: few levels (ties: the first maximum wins) and a NaN.
          Tensor x = stepped(shape, -2, 2, 5, 3, dt);
          x.data_ptr<T>()[7] = store_op<T>(std::numeric_limits<float>::quiet_NaN());
          const auto [out, idx] =
              max_pool2d_with_indices(x, vec2(c.kernel), vec2(c.stride), vec2(c.padding), vec2(c.dilation), c.ceil_mode);
          const PoolGeometry g = geometry_of(x, out, p);
          const T* xd = x.data_ptr<T>();
          const int64_t* id = idx.data_ptr<int64_t>();
          Tensor sim_idx = empty(out.sizes(), {.dtype = DType::i64});
          const Tensor sim = simulate<T>(out.sizes(), dt, [&](int64_t plane, int64_t oh, int64_t ow) {
            const auto r = kernels::max_pool2d_window(xd + plane * g.h * g.w, g, oh, ow);
            sim_idx.data_ptr<int64_t>()[(plane * g.ho + oh) * g.wo + ow] = r.index;
            return store_op<T>(r.value);
          });
          require_same_tensor<T>(sim, out);
          require_same_tensor<int64_t>(sim_idx, idx);

          const Tensor gout = stepped(out.sizes(), -1, 1, 7, 4, dt);
          Tensor gx = empty(x.sizes(), {.dtype = dt});
          kernel<kernels::MaxPool2dBackwardKernel>(OpId::max_pool2d_backward, DeviceType::cpu, dt)(gx, gout, idx, p);
          const T* gd = gout.data_ptr<T>();
          const Tensor sim_gx = simulate<T>(x.sizes(), dt, [&](int64_t plane, int64_t ih, int64_t iw) {
            const int64_t o = plane * g.ho * g.wo;
            return store_op<T>(kernels::max_pool2d_backward_at(gd + o, id + o, g, ih, iw));
          });
          require_same_tensor<T>(sim_gx, gx);

          // avg: both divisor rules and an override (the override needs no padding rule).
          if (c.dilation[0] != 1 || c.dilation[1] != 1) return;  // avg pooling has no dilation
          for (const auto& [include_pad, divisor] : {std::pair{true, int64_t{0}}, std::pair{false, int64_t{0}},
                                                     std::pair{true, int64_t{5}}}) {
            kernels::Pool2dParams pa = p;
            pa.count_include_pad = include_pad;
            pa.divisor_override = divisor;
            const Tensor xa = testing::uniform_input(shape, -3, 3, false, 5, dt);
            const Tensor aout = avg_pool2d(xa, vec2(c.kernel), vec2(c.stride), vec2(c.padding), c.ceil_mode,
                                           include_pad, divisor);
            const PoolGeometry ga = geometry_of(xa, aout, pa);
            const T* xad = xa.data_ptr<T>();
            require_same_tensor<T>(simulate<T>(aout.sizes(), dt, [&](int64_t plane, int64_t oh, int64_t ow) {
                                     return store_op<T>(kernels::avg_pool2d_window(xad + plane * ga.h * ga.w, ga, oh, ow));
                                   }),
                                   aout);
            const Tensor ag = testing::uniform_input(aout.sizes(), -1, 1, false, 6, dt);
            Tensor agx = empty(xa.sizes(), {.dtype = dt});
            kernel<kernels::AvgPool2dBackwardKernel>(OpId::avg_pool2d_backward, DeviceType::cpu, dt)(agx, ag, pa);
            const T* agd = ag.data_ptr<T>();
            require_same_tensor<T>(simulate<T>(xa.sizes(), dt, [&](int64_t plane, int64_t ih, int64_t iw) {
                                     return store_op<T>(
                                         kernels::avg_pool2d_backward_at(agd + plane * ga.ho * ga.wo, ga, ih, iw));
                                   }),
                                   agx);
          }
        });
      }
    }
  }
}

TEST_CASE("the adaptive pooling functions match the CPU kernels bit for bit", "[ops][cuda_math][pool]") {
  for (DType dt : kFloating) {
    for (const std::vector<int64_t>& size : {std::vector<int64_t>{1, 1}, {3, 4}, {7, 6}, {10, 9}, {4, 3}, {2, 5}}) {
      INFO(dtype_name(dt) << " output " << size[0] << "x" << size[1]);
      visit_floating_dtype(dt, [&]<typename T>() {
        const Tensor x = testing::uniform_input({2, 3, 7, 6}, -3, 3, false, 8, dt);
        const Tensor out = adaptive_avg_pool2d(x, size);
        const PoolGeometry g = geometry_of(x, out, {});
        const T* xd = x.data_ptr<T>();
        require_same_tensor<T>(simulate<T>(out.sizes(), dt, [&](int64_t plane, int64_t oh, int64_t ow) {
                                 return store_op<T>(kernels::adaptive_avg_pool2d_window(xd + plane * g.h * g.w, g, oh, ow));
                               }),
                               out);
        const Tensor gout = testing::uniform_input(out.sizes(), -1, 1, false, 9, dt);
        Tensor gx = empty(x.sizes(), {.dtype = dt});
        kernel<kernels::AdaptiveAvgPool2dBackwardKernel>(OpId::adaptive_avg_pool2d_backward, DeviceType::cpu, dt)(gx,
                                                                                                                 gout);
        const T* gd = gout.data_ptr<T>();
        require_same_tensor<T>(simulate<T>(x.sizes(), dt, [&](int64_t plane, int64_t ih, int64_t iw) {
                                 return store_op<T>(
                                     kernels::adaptive_avg_pool2d_backward_at(gd + plane * g.ho * g.wo, g, ih, iw));
                               }),
                               gx);
      });
    }
  }
}

// The reference grouping of a 1-D index of length k by value (the host grouping the CUDA
// index_add used before it grouped on the device): positions[offsets[r] ... offsets[r+1]) are the
// i with index[i] == r, increasing (a stable counting sort). offsets: size + 1 entries,
// positions: k. Returns the first i whose index is outside [0, size), or −1 when all are valid
// (then the arrays are filled).
static int64_t group_index_rows(const int64_t* index, int64_t k, int64_t size, int64_t* offsets, int64_t* positions) {
  for (int64_t r = 0; r <= size; ++r) offsets[r] = 0;
  for (int64_t i = 0; i < k; ++i) {
    if (index[i] < 0 || index[i] >= size) return i;
    ++offsets[index[i] + 1];
  }
  for (int64_t r = 0; r < size; ++r) offsets[r + 1] += offsets[r];
  // offsets[r] doubles as row r's write cursor, then is restored from the next row's start.
  for (int64_t i = 0; i < k; ++i) positions[offsets[index[i]]++] = i;
  for (int64_t r = size; r > 0; --r) offsets[r] = offsets[r - 1];
  offsets[0] = 0;
  return -1;
}

TEST_CASE("group_index_rows groups positions by row in increasing order and rejects bad indices",
          "[ops][cuda_math][index]") {
  const std::vector<int64_t> index = {3, 0, 3, 1, 3, 0};
  std::vector<int64_t> offsets(6), positions(6);
  REQUIRE(group_index_rows(index.data(), 6, 5, offsets.data(), positions.data()) == -1);
  CHECK(offsets == std::vector<int64_t>{0, 2, 3, 3, 6, 6});
  CHECK(positions == std::vector<int64_t>{1, 5, 3, 0, 2, 4});
  const std::vector<int64_t> too_big = {0, 5, 1}, negative = {0, 1, -1};
  CHECK(group_index_rows(too_big.data(), 3, 5, offsets.data(), positions.data()) == 1);
  CHECK(group_index_rows(negative.data(), 3, 5, offsets.data(), positions.data()) == 2);
  // An empty dim accepts only an empty index.
  CHECK(group_index_rows(index.data(), 0, 0, offsets.data(), positions.data()) == -1);
  CHECK(group_index_rows(index.data(), 1, 0, offsets.data(), positions.data()) == 0);
}

// The device grouping's steps (ops/cuda/index.cu) with std::stable_sort standing in for CUB's
// stable radix sort: keys, sort, offsets by binary search.
static void group_by_sorting(const std::vector<int64_t>& index, int64_t size, std::vector<int64_t>& offsets,
                      std::vector<int64_t>& positions) {
  const int64_t k = static_cast<int64_t>(index.size());
  std::vector<std::pair<uint64_t, int64_t>> pairs;
  for (int64_t i = 0; i < k; ++i) pairs.push_back({kernels::group_key(index[static_cast<size_t>(i)], size), i});
  std::stable_sort(pairs.begin(), pairs.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<uint64_t> keys;
  positions.clear();
  for (const auto& [key, i] : pairs) {
    keys.push_back(key);
    positions.push_back(i);
  }
  offsets.assign(static_cast<size_t>(size + 1), 0);
  for (int64_t r = 0; r <= size; ++r) offsets[static_cast<size_t>(r)] = kernels::group_offset(keys.data(), k, r);
}

TEST_CASE("the device grouping of index_add equals group_index_rows, and leaves bad indices out of every row",
          "[ops][cuda_math][index]") {
  std::mt19937_64 rng(11);
  for (int64_t size : {1, 2, 7, 300}) {
    for (int64_t k : {0, 1, 5, 64, 1000}) {
      INFO("size " << size << " k " << k);
      std::vector<int64_t> index(static_cast<size_t>(k));
      for (int64_t& v : index) v = static_cast<int64_t>(rng() % static_cast<uint64_t>(size));
      std::vector<int64_t> host_offsets(static_cast<size_t>(size + 1)), host_positions(static_cast<size_t>(k));
      REQUIRE(group_index_rows(index.data(), k, size, host_offsets.data(), host_positions.data()) == -1);
      std::vector<int64_t> offsets, positions;
      group_by_sorting(index, size, offsets, positions);
      CHECK(offsets == host_offsets);
      CHECK(positions == host_positions);
      if (k < 5) continue;
      // Out-of-range indices: the valid ones group as they would alone, the bad ones in no row.
      index[1] = size;
      index[3] = -1;
      index[4] = std::numeric_limits<int64_t>::min();
      group_by_sorting(index, size, offsets, positions);
      std::vector<int64_t> valid_offsets(static_cast<size_t>(size + 1)), valid_positions(static_cast<size_t>(k));
      std::vector<int64_t> valid_index = index;
      for (size_t i : {1, 3, 4}) valid_index[i] = 0;  // grouped under row 0 by the host, then removed
      REQUIRE(group_index_rows(valid_index.data(), k, size, valid_offsets.data(), valid_positions.data()) == -1);
      for (int64_t r = 0; r < size; ++r) {
        std::vector<int64_t> mine(positions.begin() + offsets[static_cast<size_t>(r)],
                                  positions.begin() + offsets[static_cast<size_t>(r) + 1]);
        std::vector<int64_t> want(valid_positions.begin() + valid_offsets[static_cast<size_t>(r)],
                                  valid_positions.begin() + valid_offsets[static_cast<size_t>(r) + 1]);
        if (r == 0) std::erase_if(want, [](int64_t i) { return i == 1 || i == 3 || i == 4; });
        CHECK(mine == want);
      }
      CHECK(offsets[static_cast<size_t>(size)] == k - 3);  // the three bad positions sort after every row
    }
  }
}

TEST_CASE("index_add_element and scatter_add_element match the CPU kernels bit for bit, scatter_add grouped too",
          "[ops][cuda_math][index]") {
  for (DType dt : kAddable) {
    for (int64_t dim = 0; dim < 3; ++dim) {
      INFO(dtype_name(dt) << " dim " << dim);
      visit_dtype(dt, [&]<typename T>() {
        if constexpr (!std::is_same_v<T, bool>) {
          // index_add: x (5, 4, 6); 9 indices, most on row 1 (many additions: f16/bf16 must
          // accumulate in fp32 and round once, as the CPU does).
          const Shape xs = {5, 4, 6};
          const Tensor x = stepped(xs, -4, 4, 9, 11, dt);
          const std::vector<int64_t> idx_v = {1, 0, 1, 3, 1, 1, 2, 1, 1};
          const int64_t k = static_cast<int64_t>(idx_v.size());
          Shape ss = xs;
          ss[dim] = k;
          const Tensor src = is_floating(dt) ? testing::uniform_input(ss, -1, 1, false, 12, dt) : stepped(ss, -9, 9, 19, 12, dt);
          const int64_t rows = xs[dim];
          std::vector<int64_t> idx_rows = idx_v;
          for (int64_t& v : idx_rows) v %= rows;
          const Tensor index = from_vector<int64_t>(idx_rows);
          const Tensor want = index_add(x, dim, index, src);

          std::vector<int64_t> groups(static_cast<size_t>(rows + 1 + k));
          REQUIRE(group_index_rows(idx_rows.data(), k, rows, groups.data(), groups.data() + rows + 1) == -1);
          Tensor got = x.contiguous().clone();
          T* o = got.data_ptr<T>();
          const T* s = src.data_ptr<T>();
          int64_t inner = 1;
          for (int64_t d = dim + 1; d < 3; ++d) inner *= xs[d];
          for (int64_t t = 0; t < got.numel(); ++t) {  // the CUDA kernel's thread t
            const int64_t r = (t / inner) % rows, outer = t / (inner * rows), in = t % inner;
            const int64_t begin = groups[r], end = groups[r + 1];
            if (begin == end) continue;
            o[t] = kernels::index_add_element(o[t], s + outer * k * inner + in, inner, groups.data() + rows + 1, begin,
                                              end);
          }
          require_same_tensor<T>(got, want.contiguous());

          // scatter_add: index (3, 4, 5) into x (5, 4, 6) along dim, values in range.
          Shape is = {3, 4, 5};
          const Tensor sidx = stepped(is, 0, static_cast<double>(rows - 1), static_cast<int>(rows), 13, DType::i64);
          const Tensor ssrc = is_floating(dt) ? testing::uniform_input(is, -1, 1, false, 14, dt) : stepped(is, -9, 9, 19, 14, dt);
          const Tensor swant = scatter_add(x, dim, sidx, ssrc);
          Tensor sgot = x.contiguous().clone();
          T* so = sgot.data_ptr<T>();
          const int64_t* ip = sidx.data_ptr<int64_t>();
          const T* sp = ssrc.data_ptr<T>();
          Shape cols = is;
          cols[dim] = 1;
          const Shape xst = sgot.strides(), ist = sidx.strides(), sst = ssrc.strides();
          for (int64_t c0 = 0; c0 < cols[0]; ++c0)
            for (int64_t c1 = 0; c1 < cols[1]; ++c1)
              for (int64_t c2 = 0; c2 < cols[2]; ++c2)
                for (int64_t j = 0; j < rows; ++j) {  // the CUDA kernel's thread (column, j)
                  const int64_t ox = c0 * xst[0] + c1 * xst[1] + c2 * xst[2] + j * xst[dim];
                  const int64_t oi = c0 * ist[0] + c1 * ist[1] + c2 * ist[2];
                  const int64_t os = c0 * sst[0] + c1 * sst[1] + c2 * sst[2];
                  bool hit = false;
                  const T v = kernels::scatter_add_element(so[ox], j, ip + oi, ist[dim], sp + os, sst[dim], is[dim], hit);
                  if (hit) so[ox] = v;
                }
          require_same_tensor<T>(sgot, swant.contiguous());

          // The grouped path of long columns: entry (column c, i) keyed by scatter_flat_index,
          // grouped as index_add's index, each output added by index_add_element from its group.
          const int64_t sk = is[dim], ncols = cols[0] * cols[1] * cols[2];
          std::vector<int64_t> flat(static_cast<size_t>(ncols * sk));
          const auto column = [&](int64_t c, int64_t (&at)[3]) {
            at[0] = c / (cols[1] * cols[2]);
            at[1] = c / cols[2] % cols[1];
            at[2] = c % cols[2];
          };
          for (int64_t c = 0; c < ncols; ++c) {  // the CUDA key kernel's thread c·k + i
            int64_t at[3];
            column(c, at);
            for (int64_t i = 0; i < sk; ++i)
              flat[static_cast<size_t>(c * sk + i)] = kernels::scatter_flat_index(
                  ip[at[0] * ist[0] + at[1] * ist[1] + at[2] * ist[2] + i * ist[dim]], c, rows);
          }
          std::vector<int64_t> offsets, positions;
          group_by_sorting(flat, ncols * rows, offsets, positions);
          Tensor ggot = x.contiguous().clone();
          T* go = ggot.data_ptr<T>();
          for (int64_t t = 0; t < ncols * rows; ++t) {  // the CUDA add kernel's thread (column, j)
            const int64_t c = t / rows, j = t % rows;
            const int64_t begin = offsets[static_cast<size_t>(t)], end = offsets[static_cast<size_t>(t) + 1];
            if (begin == end) continue;
            int64_t at[3];
            column(c, at);
            const int64_t ox = at[0] * xst[0] + at[1] * xst[1] + at[2] * xst[2] + j * xst[dim];
            const int64_t os = at[0] * sst[0] + at[1] * sst[1] + at[2] * sst[2];
            go[ox] = kernels::index_add_element(go[ox], sp + os, sst[dim], positions.data(), begin, end, c * sk);
          }
          require_same_tensor<T>(ggot, swant.contiguous());
        }
      });
    }
  }
}
