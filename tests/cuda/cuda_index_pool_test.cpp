// The CUDA joining, indexing, pooling and dropout kernels (ops/cuda/index.cu, pool.cu, dropout.cu)
// against the CPU kernels on the same inputs, forward and backward, every dtype they have. The
// kernels are written to agree with the CPU bit for bit (ops/math/index_math.h, ops/math/pool_math.h,
// ops/math/dropout_math.h: tests/ops/index_pool_math_test.cpp checks that math on the host), so most
// comparisons are exact. Tests tagged [cuda] return early (with a warning) without a GPU; the
// [cuda_api] test checks the registrations on any CUDA build.
#include <cmath>
#include <vector>

#include "core/device.h"
#include "core/rng.h"
#include "ops/device_asserts.h"
#include "ops/functional.h"
#include "ops/contracts/kernels.h"
#include "ops/op_table.h"
#include "tensor/factory.h"
#include "tests/support/tensor_testing.h"

using namespace precis;
using precis::testing::uniform_input;

namespace {

constexpr DType kFloating[] = {DType::f32, DType::f64, DType::f16, DType::bf16};
constexpr DType kAll[] = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i64, DType::i32, DType::boolean};
const Device kGpu = Device::cuda(0);

// Bitwise-equal values (NaN equal to NaN), the GPU result read back.
void require_same(const Tensor& actual, const Tensor& expected) {
  REQUIRE(actual.device() == kGpu);
  REQUIRE(actual.sizes() == expected.sizes());
  REQUIRE(actual.dtype() == expected.dtype());
  const std::vector<double> a = actual.to_vector<double>(), b = expected.to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("flat index " << i << ": " << a[i] << " vs CPU " << b[i]);
    REQUIRE((a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i]))));
  }
}

Tensor input(DType dtype, const Shape& shape, uint64_t seed) {
  if (is_floating(dtype)) return uniform_input(shape, -3, 3, false, seed, dtype);
  return uniform_input(shape, -9, 9, false, seed).to(DType::i64).to(dtype);
}

// A floating leaf on `device` with the values of `cpu`.
Tensor leaf(const Tensor& cpu, Device device) {
  Tensor t = cpu.to(device).detach();
  t.requires_grad_(true);
  return t;
}

}  // namespace

TEST_CASE("the CUDA backend registers the indexing, pooling and dropout kernels", "[cuda_api]") {
#ifdef PRECIS_HAS_CUDA
  for (DType dt : kAll) {
    for (OpId op : {OpId::cat, OpId::index_select, OpId::gather}) CHECK(find_kernel(op, DeviceType::cuda, dt) != nullptr);
    for (OpId op : {OpId::index_add, OpId::scatter_add})
      CHECK((find_kernel(op, DeviceType::cuda, dt) != nullptr) == (dt != DType::boolean));
  }
  for (DType dt : kFloating)
    for (OpId op : {OpId::max_pool2d, OpId::max_pool2d_backward, OpId::avg_pool2d, OpId::avg_pool2d_backward,
                    OpId::adaptive_avg_pool2d, OpId::adaptive_avg_pool2d_backward, OpId::dropout})
      CHECK(find_kernel(op, DeviceType::cuda, dt) != nullptr);
  CHECK(find_kernel(OpId::dropout, DeviceType::cuda, DType::i64) == nullptr);
#else
  CHECK(find_kernel(OpId::index_add, DeviceType::cuda, DType::f32) == nullptr);
#endif
}

TEST_CASE("CUDA cat and stack match the CPU for every dtype, with strided and empty inputs", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  for (DType dt : kAll) {
    INFO(dtype_name(dt));
    const Tensor a = input(dt, {3, 4}, 1), b = input(dt, {4, 3}, 2).t(), c = input(dt, {3, 0}, 3);
    require_same(cat({a.to(kGpu), b.to(kGpu).t().contiguous().t(), c.to(kGpu)}, 1), cat({a, b, c}, 1));
    require_same(cat({a.to(kGpu), b.to(kGpu)}, 0), cat({a, b}, 0));
    require_same(stack({a.to(kGpu), b.to(kGpu)}, 1), stack({a, b}, 1));
  }
}

TEST_CASE("CUDA index_select, gather, index_add and scatter_add match the CPU bit for bit", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  const Tensor idx = from_vector<int64_t>({2, 0, 2, 1, 2, 2, 0});
  for (DType dt : kAll) {
    for (int64_t dim = 0; dim < 3; ++dim) {
      INFO(dtype_name(dt) << " dim " << dim);
      const Tensor x = input(dt, {3, 4, 5}, 10 + dim);
      // index_select, also from a permuted (strided) x.
      require_same(index_select(x.to(kGpu), dim, idx.to(kGpu)), index_select(x, dim, idx));
      const Tensor xp = x.permute({2, 0, 1});
      require_same(index_select(x.to(kGpu).permute({2, 0, 1}), dim, idx.to(kGpu)), index_select(xp, dim, idx));
      // gather with an index of another shape (smaller along the other dims).
      Shape is = {2, 3, 4};
      is[dim] = 6;
      const Tensor gidx = uniform_input(is, 0, static_cast<double>(x.size(dim)) - 0.01, false, 20 + dim).to(DType::i64);
      require_same(gather(x.to(kGpu), dim, gidx.to(kGpu)), gather(x, dim, gidx));
      if (dt == DType::boolean) continue;
      Shape ss = x.sizes();
      ss[dim] = idx.numel();
      const Tensor src = input(dt, ss, 30 + dim);
      require_same(index_add(x.to(kGpu), dim, idx.to(kGpu), src.to(kGpu)), index_add(x, dim, idx, src));
      const Tensor gsrc = input(dt, is, 40 + dim);
      require_same(scatter_add(x.to(kGpu), dim, gidx.to(kGpu), gsrc.to(kGpu)), scatter_add(x, dim, gidx, gsrc));
      // A transposed src: the strided path of both adds.
      const Tensor src_t = src.transpose(0, 2).contiguous().transpose(0, 2);
      require_same(index_add(x.to(kGpu), dim, idx.to(kGpu), src.to(kGpu).transpose(0, 2).contiguous().transpose(0, 2)),
                   index_add(x, dim, idx, src_t));
    }
  }
}

TEST_CASE("CUDA scatter_add over long columns (a gather's backward) groups its entries and matches the CPU", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  // Columns longer than the scan's limit (64) take the grouped path: 300 entries per column, a
  // permutation in one row, heavy duplicates in the others, along either dim of a strided src.
  for (DType dt : {DType::f32, DType::bf16, DType::i64}) {
    for (int64_t dim : {0, 1}) {
      INFO(dtype_name(dt) << " dim " << dim);
      Shape xs = {6, 6}, is = {5, 5};
      xs[static_cast<size_t>(dim)] = 250;
      is[static_cast<size_t>(dim)] = 300;
      const Tensor x = input(dt, xs, 50 + dim);
      Tensor idx = uniform_input(is, 0, 249.99, false, 60 + dim).to(DType::i64);
      idx.select(1 - dim, 0).narrow(0, 0, 250).copy_(from_vector<int64_t>([] {
        std::vector<int64_t> perm(250);
        for (int64_t i = 0; i < 250; ++i) perm[static_cast<size_t>(i)] = (i * 97) % 250;
        return perm;
      }()));
      idx.select(1 - dim, 1).narrow(0, 0, 300).fill_(7.0);
      const Tensor src = input(dt, {is[1], is[0]}, 70 + dim).t();  // strided
      require_same(scatter_add(x.to(kGpu), dim, idx.to(kGpu), src.to(kGpu)), scatter_add(x, dim, idx, src));
      if (!is_floating(dt)) continue;
      // gather's backward is this scatter_add.
      const Tensor xg = leaf(x, kGpu), xc = leaf(x, Device::cpu());
      gather(xg, dim, idx.to(kGpu)).backward(src.to(kGpu));
      gather(xc, dim, idx).backward(src);
      require_same(xg.grad(), xc.grad());
    }
  }
}

TEST_CASE("CUDA embedding forward and backward (index_add) match the CPU and are reproducible", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  // 4096 tokens over 50 rows, token 3 a quarter of them: many additions into one row.
  std::vector<int64_t> tokens(4096);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = i % 4 == 0 ? 3 : static_cast<int64_t>((i * 37) % 50);
  const Tensor ids = from_vector<int64_t>(tokens, {64, 64});
  for (DType dt : kFloating) {
    INFO(dtype_name(dt));
    const Tensor w = uniform_input({50, 32}, -1, 1, false, 5, dt);
    const Tensor g = uniform_input({64, 64, 32}, -1, 1, false, 6, dt);
    Tensor wc = leaf(w, Device::cpu()), wg = leaf(w, kGpu);
    Tensor oc = embedding(ids, wc), og = embedding(ids.to(kGpu), wg);
    require_same(og, oc);
    oc.backward(g);
    og.backward(g.to(kGpu));
    require_same(wg.grad(), wc.grad());
    // Deterministic: a second backward gives the same bits.
    Tensor wg2 = leaf(w, kGpu);
    embedding(ids.to(kGpu), wg2).backward(g.to(kGpu));
    require_same(wg2.grad(), wg.grad().cpu());
  }
}

// interpolate is index_select, mul and add: the CUDA kernels of those must give the CPU's resized
// values bit for bit, and its gradient (index_add) the CPU's within summation order.
TEST_CASE("CUDA interpolate, nearest and bilinear, matches the CPU, values and gradients", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  const InterpolateOptions modes[] = {
      {.scale_factor = {2.0}},
      {.size = {5, 3}, .mode = InterpolateMode::nearest_exact},
      {.size = {7, 9}, .mode = InterpolateMode::bilinear},
      {.scale_factor = {0.6}, .mode = InterpolateMode::bilinear, .align_corners = true},
  };
  for (DType dt : kFloating) {
    for (size_t m = 0; m < std::size(modes); ++m) {
      INFO(dtype_name(dt) << ", options " << m);
      const Tensor x = input(dt, {2, 3, 4, 6}, 31);
      const Tensor g = input(dt, interpolate(x, modes[m]).sizes(), 32);
      Tensor xc = leaf(x, Device::cpu()), xg = leaf(x, kGpu);
      Tensor oc = interpolate(xc, modes[m]), og = interpolate(xg, modes[m]);
      require_same(og, oc);
      oc.backward(g);
      og.backward(g.to(kGpu));
      PRECIS_REQUIRE_CLOSE(xg.grad().cpu(), xc.grad(), dt);
    }
  }
}

TEST_CASE("CUDA pooling forward and backward match the CPU bit for bit", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  for (DType dt : kFloating) {
    INFO(dtype_name(dt));
    const Tensor x = uniform_input({2, 3, 9, 8}, -3, 3, false, 7, dt);
    // max: ResNet's 3x3/2 pad 1, a dilated ceil-mode window, indices too.
    for (const bool dilated : {false, true}) {
      const std::vector<int64_t> k = {3, 3}, s = {2, 2}, p = {1, 1}, d = dilated ? std::vector<int64_t>{2, 1}
                                                                             : std::vector<int64_t>{1, 1};
      Tensor xc = leaf(x, Device::cpu()), xg = leaf(x, kGpu);
      const auto [vc, ic] = max_pool2d_with_indices(xc, k, s, p, d, dilated);
      const auto [vg, ig] = max_pool2d_with_indices(xg, k, s, p, d, dilated);
      require_same(vg, vc);
      require_same(ig, ic);
      const Tensor g = uniform_input(vc.sizes(), -1, 1, false, 8, dt);
      vc.backward(g);
      vg.backward(g.to(kGpu));
      require_same(xg.grad(), xc.grad());
    }
    for (const bool include_pad : {true, false}) {
      Tensor xc = leaf(x, Device::cpu()), xg = leaf(x, kGpu);
      const Tensor oc = avg_pool2d(xc, {3, 3}, {2, 2}, {1, 1}, true, include_pad);
      const Tensor og = avg_pool2d(xg, {3, 3}, {2, 2}, {1, 1}, true, include_pad);
      require_same(og, oc);
      const Tensor g = uniform_input(oc.sizes(), -1, 1, false, 9, dt);
      oc.backward(g);
      og.backward(g.to(kGpu));
      require_same(xg.grad(), xc.grad());
    }
    for (const std::vector<int64_t>& size : {std::vector<int64_t>{1, 1}, {4, 3}, {12, 10}}) {
      Tensor xc = leaf(x, Device::cpu()), xg = leaf(x, kGpu);
      const Tensor oc = adaptive_avg_pool2d(xc, size), og = adaptive_avg_pool2d(xg, size);
      require_same(og, oc);
      const Tensor g = uniform_input(oc.sizes(), -1, 1, false, 10, dt);
      oc.backward(g);
      og.backward(g.to(kGpu));
      require_same(xg.grad(), xc.grad());
    }
  }
}

TEST_CASE("CUDA dropout draws the CPU's mask for the same seed, forward and backward", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  for (DType dt : kFloating) {
    for (const bool strided : {false, true}) {
      INFO(dtype_name(dt) << (strided ? " strided" : ""));
      const Tensor base = uniform_input({7, 33, 5}, 0.5, 2, false, 11, dt);  // 1155 elements: a partial block
      Tensor xc = leaf(strided ? base.transpose(0, 2) : base, Device::cpu());
      Tensor xg = leaf(base, kGpu);
      if (strided) {
        xg = base.to(kGpu).transpose(0, 2).detach();
        xg.requires_grad_(true);
        REQUIRE_FALSE(xg.is_contiguous());
      }
      Generator gc(99), gg(99);
      gc.reserve(5);
      gg.reserve(5);  // a non-zero offset
      const Tensor oc = dropout(xc, 0.3, true, &gc), og = dropout(xg, 0.3, true, &gg);
      require_same(og, oc);
      REQUIRE(gg.offset() == gc.offset());
      const Tensor g = uniform_input(oc.sizes(), -1, 1, false, 12, dt);
      oc.backward(g);
      og.backward(g.to(kGpu));
      require_same(xg.grad(), xc.grad());
    }
  }
}

TEST_CASE("CUDA indexing reports out-of-range indices at the next host read, and no kernel goes out of bounds",
          "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  const Tensor x = uniform_input({4, 3}, -1, 1, false, 1, DType::f32).to(kGpu);
  const Tensor bad = from_vector<int64_t>({0, 4}).to(kGpu);
  // The ops record the check on the device (ops/device_asserts.h) and report it when asked.
  (void)index_select(x, 0, bad);
  PRECIS_REQUIRE_THROWS_WITH_ALL(check_device_asserts(kGpu), IndexError, "index_select", "4");
  (void)index_add(x, 0, bad, zeros({2, 3}, {.device = kGpu}));
  PRECIS_REQUIRE_THROWS_WITH_ALL(check_device_asserts(kGpu), IndexError, "index_add");
  (void)embedding(from_vector<int64_t>({-1}).to(kGpu), x);
  PRECIS_REQUIRE_THROWS_WITH_ALL(check_device_asserts(kGpu), IndexError, "embedding");
  CHECK_NOTHROW(check_device_asserts(kGpu));  // each reported once
  // The CUDA index_add kernel called directly (the op layer normally checks): the bad position
  // lands in no row, the good one is added, nothing else is touched.
  Tensor out = x.clone();
  const Tensor src = full({2, 3}, 1.0, {.device = kGpu});
  kernel<kernels::IndexAddKernel>(OpId::index_add, DeviceType::cuda, DType::f32)(out, 0, bad, src);
  const Tensor host_x = x.to(Device::cpu());
  require_same(out.to(Device::cpu()), cat({host_x.narrow(0, 0, 1) + 1.0, host_x.narrow(0, 1, 3)}, 0));
}
