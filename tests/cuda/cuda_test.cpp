// The CUDA backend. Tests tagged [cuda] need a GPU and return early (with a warning) without one;
// the others check, on any machine, what a build without a usable GPU must do: report the
// device as unavailable, register the CUDA kernels anyway, and throw DeviceError (not crash)
// when a tensor is asked for on a missing device.
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/device.h"
#include "core/device_caching_allocator.h"
#include "ops/contracts/kernels.h"
#include "ops/functional.h"
#include "ops/op_table.h"
#include "tensor/factory.h"
#include "tests/support/tensor_testing.h"

using namespace precis;
using precis::testing::randn_input;
using precis::testing::uniform_input;

namespace {

constexpr DType kAllDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i64, DType::i32, DType::boolean};
const Device kGpu = Device::cuda(0);

// Values every dtype represents exactly (bool: 0/1), so round trips compare exactly.
Tensor exact_values(DType dtype, const Shape& sizes) {
  const int64_t n = shape_numel(sizes);
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = dtype == DType::boolean ? static_cast<double>(i % 3 == 0) : static_cast<double>((i * 7) % 23) - 11.0;
  return from_vector<double>(v, sizes).to(dtype);
}

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

}  // namespace

// ---- no GPU needed ----------------------------------------------------------------------------

TEST_CASE("cuda_is_available agrees with cuda_device_count", "[cuda_api][cuda]") {
  const int n = cuda_device_count();
  REQUIRE(n >= 0);
  REQUIRE(cuda_is_available() == (n > 0));
#ifndef PRECIS_HAS_CUDA
  REQUIRE(n == 0);  // a CPU-only build never reports a device
#endif
}

TEST_CASE("a tensor on a missing CUDA device throws DeviceError naming the device", "[cuda_api][cuda]") {
  const int n = cuda_device_count();
  if (n == 0) {
    // Fires on the CI machines: no GPU (or a CPU-only build).
    PRECIS_REQUIRE_THROWS_WITH_ALL(zeros({2}, {.device = Device::cuda(0)}), DeviceError, "cuda:0");
    PRECIS_REQUIRE_THROWS_WITH_ALL(randn_input({2, 3}, false).to(Device::cuda(0)), DeviceError, "cuda:0");
#ifdef PRECIS_HAS_CUDA
    PRECIS_REQUIRE_THROWS_WITH_ALL(zeros({2}, {.device = Device::cuda(0)}), DeviceError, "not available",
                                   "Device::cpu()");
#endif
  } else {
    // The name outlives the check: a temporary's c_str() in the macro's list of parts would dangle
    // (range-for temporaries die before the body in C++20).
    const std::string name = "cuda:" + std::to_string(n);
    PRECIS_REQUIRE_THROWS_WITH_ALL(zeros({2}, {.device = Device::cuda(n)}), DeviceError, name.c_str(), "out of range");
  }
}

TEST_CASE("the CUDA backend registers its kernels without a GPU", "[cuda_api]") {
#ifdef PRECIS_HAS_CUDA
  for (DType dt : kAllDTypes) {
    CHECK(find_kernel(OpId::copy, DeviceType::cuda, dt) != nullptr);
    CHECK(find_kernel(OpId::fill, DeviceType::cuda, dt) != nullptr);
    CHECK(find_kernel(OpId::eq, DeviceType::cuda, dt) != nullptr);
  }
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    CHECK(find_kernel(OpId::matmul, DeviceType::cuda, dt) != nullptr);
    CHECK(find_kernel(OpId::div, DeviceType::cuda, dt) != nullptr);
  }
  for (DType dt : {DType::i32, DType::i64}) {
    CHECK(find_kernel(OpId::add, DeviceType::cuda, dt) != nullptr);
    CHECK(find_kernel(OpId::div, DeviceType::cuda, dt) == nullptr);  // integer division is not a kernel
  }
  CHECK(find_kernel(OpId::add, DeviceType::cuda, DType::boolean) == nullptr);
  PRECIS_REQUIRE_THROWS_WITH_ALL(kernel<kernels::BinaryKernel>(OpId::div, DeviceType::cuda, DType::i32),
                                 NotImplementedError, "div", "cuda", "i32");
#else
  CHECK(find_kernel(OpId::copy, DeviceType::cuda, DType::f32) == nullptr);
  PRECIS_REQUIRE_THROWS_WITH_ALL(kernel<kernels::CopyKernel>(OpId::copy, DeviceType::cuda, DType::f32),
                                 NotImplementedError, "built without CUDA", "PRECIS_CUDA=ON");
#endif
}

// ---- GPU --------------------------------------------------------------------------------------

TEST_CASE("host to device to host round trip keeps every dtype exactly", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  for (DType dt : kAllDTypes) {
    INFO("dtype " << dtype_name(dt));
    Tensor host = exact_values(dt, {3, 5});
    Tensor dev = host.to(kGpu);
    REQUIRE(dev.device() == kGpu);
    REQUIRE(dev.dtype() == dt);
    REQUIRE(values(dev.to(Device::cpu())) == values(host));
    // A non-contiguous source goes through a contiguous staging copy.
    REQUIRE(values(host.t().to(kGpu)) == values(host.t()));
  }
}

TEST_CASE("fill sets every element of contiguous and strided CUDA tensors", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  for (DType dt : kAllDTypes) {
    INFO("dtype " << dtype_name(dt));
    const double v = dt == DType::boolean ? 1.0 : (is_floating(dt) ? 2.5 : -3.0);
    Tensor t = full({4, 6}, v, {.dtype = dt, .device = kGpu});
    for (double x : values(t)) REQUIRE(x == v);
    // Fill only the odd columns of a zero tensor: a strided view.
    Tensor z = zeros({4, 6}, {.dtype = dt, .device = kGpu});
    z.slice(1, 1, 6, 2).fill_(v);
    const std::vector<double> got = values(z);
    for (int64_t i = 0; i < 24; ++i) REQUIRE(got[i] == ((i % 6) % 2 == 1 ? v : 0.0));
  }
}

TEST_CASE("strided copy with dtype conversion matches the CPU", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  Tensor src_cpu = uniform_input({4, 3, 5}, -8.0, 8.0, false, 3, DType::f32);
  Tensor src_gpu = src_cpu.to(kGpu);
  for (DType dt : kAllDTypes) {
    INFO("to dtype " << dtype_name(dt));
    // Permuted (non-contiguous) source, converted on each device.
    Tensor expected = src_cpu.permute({2, 0, 1}).to(dt);
    Tensor got = src_gpu.permute({2, 0, 1}).to(dt);
    REQUIRE(got.device() == kGpu);
    REQUIRE(values(got) == values(expected));
    // Back from dt to f64 on the GPU.
    REQUIRE(values(got.to(DType::f64)) == values(expected.to(DType::f64)));
  }
  // Broadcasting copy_ into a strided destination.
  Tensor row = from_vector<float>({1, 2, 3, 4}, {1, 4}).to(kGpu);
  Tensor dst = zeros({4, 3}, {.device = kGpu}).t();  // (3, 4), strides (1, 3)
  dst.copy_(row);
  REQUIRE(values(dst) == std::vector<double>{1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4});
}

TEST_CASE("CUDA rounds an f64 to f16 or bf16 through fp32, as the CPU and PyTorch: copies and f16 means", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  // Just past a rounding midpoint of the 16-bit format by less than fp32 keeps: through fp32 the
  // value lands on the midpoint and then on the even neighbour (1); rounded directly, it goes up.
  const Tensor x = from_vector<double>({1 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40),
                                        1 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30)});
  CHECK(values(x.to(kGpu).to(DType::f16).to(DType::f64)) == values(x.to(DType::f16).to(DType::f64)));
  CHECK(values(x.to(kGpu).to(DType::bf16).to(DType::f64)) == values(x.to(DType::bf16).to(DType::f64)));
  CHECK(values(x.to(DType::f16).to(DType::f64))[0] == 1.0);
  // An f16 mean is formed in f64 (sum · 1/N) and stored as f16. A row of 12289 values in [1, 2)
  // whose sum is exact in fp32 in any order (multiples of 2^-10 under 2^14) and whose mean lies
  // 1/24578 of an f16 step above a midpoint: through fp32 it rounds down to 1, directly up.
  std::vector<float> row(12289, 1.0f);
  for (int i = 0; i < 6; ++i) row[i] = 1 + 1023.0f / 1024;
  row[6] = 1 + 7.0f / 1024;  // 6145 steps in all: the mean is 1 + (0.5 + 1/24578) · 2^-10
  const Tensor h = from_vector<float>(row, {1, 12289}).to(DType::f16);
  REQUIRE(mean(h, {1}).item<double>() == 1.0);
  CHECK(mean(h.to(kGpu), {1}).item<double>() == 1.0);
}

namespace {

const char* kBinaryNames[] = {"add", "sub", "mul", "div", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge"};
constexpr OpId kBinaryOps[] = {OpId::add, OpId::sub, OpId::mul, OpId::div, OpId::maximum, OpId::minimum,
                               OpId::eq,  OpId::ne,  OpId::lt,  OpId::le,  OpId::gt,      OpId::ge};

double binary_reference(int op, double a, double b, double alpha) {
  switch (op) {
    case 0: return a + alpha * b;
    case 1: return a - alpha * b;
    case 2: return a * b;
    case 3: return a / b;
    case 4: return std::max(a, b);
    case 5: return std::min(a, b);
    case 6: return a == b;
    case 7: return a != b;
    case 8: return a < b;
    case 9: return a <= b;
    case 10: return a > b;
    default: return a >= b;
  }
}

// Runs binary op `op` through the CUDA kernel on a (3, 5, 4) output with a broadcast from
// (3, 1, 4) and b a non-contiguous (5, 4) view, and compares with a double reference computed
// from the same (already rounded) inputs.
void check_binary(int op, DType dt) {
  const bool cmp = op >= 6;
  const bool integral = is_integral(dt);
  Tensor a = integral ? testing::uniform_input({3, 1, 4}, -20, 20, false, 1).to(DType::i64).to(dt)
                      : uniform_input({3, 1, 4}, -2, 2, false, 1, dt);
  // b in [0.5, 2] keeps div away from 0. Transposed on each device, so it is (5, 4) and
  // non-contiguous on the GPU too (moving a tensor makes it contiguous).
  Tensor b_base = integral ? testing::uniform_input({4, 5}, 1, 20, false, 2).to(DType::i64).to(dt)
                           : uniform_input({4, 5}, 0.5, 2, false, 2, dt);
  Tensor b = b_base.t();
  const Shape out_shape{3, 5, 4};
  const double alpha = op <= 1 ? 2.0 : 1.0;

  Tensor ae = a.expand(out_shape), be = b.expand(out_shape);
  const std::vector<double> av = values(ae), bv = values(be);
  std::vector<double> ref(av.size());
  for (size_t i = 0; i < av.size(); ++i) ref[i] = binary_reference(op, av[i], bv[i], alpha);
  Tensor out = empty(out_shape, {.dtype = cmp ? DType::boolean : dt, .device = kGpu});
  Tensor ag = a.to(kGpu).expand(out_shape), bg = b_base.to(kGpu).t().expand(out_shape);
  REQUIRE_FALSE(bg.is_contiguous());
  kernel<kernels::BinaryKernel>(kBinaryOps[op], DeviceType::cuda, dt)(out, ag, bg, alpha);
  Tensor expected = from_vector<double>(ref, out_shape);
  PRECIS_REQUIRE_CLOSE(out, expected, cmp ? DType::boolean : dt);

  // Contiguous fast path: same-shape contiguous operands.
  Tensor ac = ag.contiguous(), bc = bg.contiguous();
  Tensor out2 = empty(out_shape, {.dtype = cmp ? DType::boolean : dt, .device = kGpu});
  kernel<kernels::BinaryKernel>(kBinaryOps[op], DeviceType::cuda, dt)(out2, ac, bc, alpha);
  PRECIS_REQUIRE_CLOSE(out2, expected, cmp ? DType::boolean : dt);
  // Ties: a compared with itself.
  if (cmp) {
    Tensor out3 = empty(out_shape, {.dtype = DType::boolean, .device = kGpu});
    kernel<kernels::BinaryKernel>(kBinaryOps[op], DeviceType::cuda, dt)(out3, ag, ag, 1.0);
    const double tie = binary_reference(op, 1.0, 1.0, 1.0);
    for (double x : values(out3)) REQUIRE(x == tie);
  }
}

}  // namespace

TEST_CASE("binary kernels match a double reference with broadcasting and non-contiguous inputs", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  for (int op = 0; op < 12; ++op) {
    for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64}) {
      if (op == 3 && is_integral(dt)) continue;  // no integer div kernel
      INFO(kBinaryNames[op] << " " << dtype_name(dt));
      check_binary(op, dt);
    }
  }
}

TEST_CASE("maximum and minimum propagate NaN on CUDA", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  Tensor a = from_vector<float>({1.0f, NAN, 3.0f}, {3}).to(kGpu);
  Tensor b = from_vector<float>({NAN, 2.0f, 1.0f}, {3}).to(kGpu);
  for (OpId op : {OpId::maximum, OpId::minimum}) {
    Tensor out = empty({3}, {.device = kGpu});
    kernel<kernels::BinaryKernel>(op, DeviceType::cuda, DType::f32)(out, a, b, 1.0);
    const std::vector<double> v = values(out);
    REQUIRE(std::isnan(v[0]));
    REQUIRE(std::isnan(v[1]));
    REQUIRE(v[2] == (op == OpId::maximum ? 3.0 : 1.0));
  }
}

namespace {

// out[b] = a[b or 0] · w[b or 0] in double; a: (Ba, n, k), w: (Bb, k, m).
Tensor matmul_reference(const Tensor& a, const Tensor& w, int64_t batch) {
  const int64_t n = a.size(1), k = a.size(2), m = w.size(2);
  const std::vector<double> av = values(a.contiguous()), wv = values(w.contiguous());
  std::vector<double> out(static_cast<size_t>(batch * n * m), 0.0);
  for (int64_t bi = 0; bi < batch; ++bi) {
    const int64_t ba = a.size(0) == 1 ? 0 : bi, bb = w.size(0) == 1 ? 0 : bi;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < m; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p) s += av[(ba * n + i) * k + p] * wv[(bb * k + p) * m + j];
        out[(bi * n + i) * m + j] = s;
      }
  }
  return from_vector<double>(out, {batch, n, m});
}

// a = a_view(a_base), w = w_view(w_base); the views are taken on each device, since moving a
// tensor to the GPU makes it contiguous.
using ViewFn = std::function<Tensor(const Tensor&)>;
const ViewFn kSame = [](const Tensor& t) { return t; };

void check_matmul(DType dt, const Tensor& a_base, const ViewFn& a_view, const Tensor& w_base, const ViewFn& w_view,
                  int64_t batch) {
  const Tensor a = a_view(a_base), w = w_view(w_base);
  const Tensor ag = a_view(a_base.to(kGpu)), wg = w_view(w_base.to(kGpu));
  REQUIRE(ag.strides() == a.strides());
  REQUIRE(wg.strides() == w.strides());
  Tensor out = empty({batch, a.size(1), w.size(2)}, {.dtype = dt, .device = kGpu});
  kernel<kernels::MatmulKernel>(OpId::matmul, DeviceType::cuda, dt)(out, ag, wg);
  PRECIS_REQUIRE_CLOSE(out, matmul_reference(a, w, batch), dt);
}

void check_matmul(DType dt, const Tensor& a, const Tensor& w, int64_t batch) {
  check_matmul(dt, a, kSame, w, kSame, batch);
}

}  // namespace

TEST_CASE("cuBLAS matmul matches an f64 reference for f32, f64, f16 and bf16", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    INFO("dtype " << dtype_name(dt));
    SECTION("plain batch") { check_matmul(dt, randn_input({2, 5, 7}, false, 1, dt), randn_input({2, 7, 3}, false, 2, dt), 2); }
    SECTION("size-1 batches broadcast") {
      check_matmul(dt, randn_input({1, 5, 7}, false, 3, dt), randn_input({3, 7, 3}, false, 4, dt), 3);
      check_matmul(dt, randn_input({3, 5, 7}, false, 5, dt), randn_input({1, 7, 3}, false, 6, dt), 3);
    }
    SECTION("transposed operands through the leading dimension") {
      const ViewFn tr = [](const Tensor& t) { return t.transpose(1, 2); };
      // a: (2, 5, 7) and w: (2, 7, 3), both column-major in memory.
      check_matmul(dt, randn_input({2, 7, 5}, false, 7, dt), tr, randn_input({2, 3, 7}, false, 8, dt), tr, 2);
    }
    SECTION("sliced inner dims are made contiguous") {
      const ViewFn every_other = [](const Tensor& t) { return t.slice(2, 0, 14, 2); };  // inner stride 2
      check_matmul(dt, randn_input({2, 5, 14}, false, 9, dt), every_other, randn_input({2, 7, 3}, false, 10, dt), kSame,
                   2);
    }
    SECTION("row and column vectors") {
      check_matmul(dt, randn_input({2, 1, 7}, false, 11, dt), randn_input({2, 7, 1}, false, 12, dt), 2);
    }
    SECTION("k = 0 gives zeros") {
      Tensor out = full({2, 3, 4}, 1.0, {.dtype = dt, .device = kGpu});
      kernel<kernels::MatmulKernel>(OpId::matmul, DeviceType::cuda, dt)(
          out, empty({2, 3, 0}, {.dtype = dt, .device = kGpu}), empty({2, 0, 4}, {.dtype = dt, .device = kGpu}));
      for (double x : values(out)) REQUIRE(x == 0.0);
    }
  }
}

TEST_CASE("the CUDA caching allocator reuses freed blocks and releases them on empty_cache", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  Allocator& alloc = allocator_for(kGpu);
  REQUIRE(alloc.device() == kGpu);
  alloc.empty_cache();
  const AllocatorStats before = alloc.stats();
  size_t reserved_live = 0;
  {
    Tensor t = empty({1000}, {.device = kGpu});  // 4000 bytes -> one 4096-byte block
    const AllocatorStats s = alloc.stats();
    REQUIRE(s.allocated == before.allocated + 4096);
    REQUIRE(s.num_allocs == before.num_allocs + 1);
    // A block of at most 1 MiB is cut from a small-pool segment (core/device_caching_allocator.h):
    // a new one of segment_size(4096) = 2 MiB, or the spare room of a segment that a live tensor
    // of an earlier test still holds (empty_cache gives back only wholly free segments).
    const size_t grew = s.reserved - before.reserved;
    INFO("reserved grew by " << grew << " bytes");
    REQUIRE((grew == 0 || grew == DeviceCachingAllocator::segment_size(4096)));
    reserved_live = s.reserved;
  }
  const AllocatorStats freed = alloc.stats();
  REQUIRE(freed.allocated == before.allocated);
  REQUIRE(freed.reserved == reserved_live);  // cached, not returned
  {
    Tensor t = empty({1010}, {.device = kGpu});  // same bucket: served from the cache
    const AllocatorStats s = alloc.stats();
    REQUIRE(s.num_cache_hits == freed.num_cache_hits + 1);
    REQUIRE(s.reserved == freed.reserved);
    REQUIRE(s.peak_allocated >= before.allocated + 4096);
  }
  alloc.empty_cache();
  REQUIRE(alloc.stats().reserved == before.reserved);
}

TEST_CASE("an out-of-range CUDA device index throws DeviceError", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  const int n = cuda_device_count();
  const std::string name = "cuda:" + std::to_string(n);
  PRECIS_REQUIRE_THROWS_WITH_ALL(zeros({2}, {.device = Device::cuda(n)}), DeviceError, name.c_str(), "out of range");
  PRECIS_REQUIRE_THROWS_WITH_ALL(randn_input({2}, false).to(Device::cuda(n)), DeviceError, name.c_str());
}

TEST_CASE("copies between two CUDA devices", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  if (cuda_device_count() < 2) {
    WARN("fewer than two CUDA devices; skipped");
    return;
  }
  Tensor host = exact_values(DType::f32, {4, 4});
  Tensor on1 = host.to(kGpu).to(Device::cuda(1));
  REQUIRE(on1.device() == Device::cuda(1));
  REQUIRE(values(on1.to(kGpu)) == values(host));
}

// Run alone in a fresh process by ctest ("cuda/a copy to a GPU can be a process's first op"):
// nothing before it has looked up a kernel, which is what registers the backends. The copy once
// said "built without CUDA" there; now it copies, or names the missing device.
TEST_CASE("a copy to a CUDA device works as the first op of a process", "[.first_op][cuda]") {
  const Tensor t = empty({3});  // no kernel lookup
#ifdef PRECIS_HAS_CUDA
  if (cuda_is_available()) {
    CHECK(t.to(Device::cuda(0)).device() == Device::cuda(0));
  } else {
    std::string msg;
    try {
      (void)t.to(Device::cuda(0));
    } catch (const DeviceError& e) {
      msg = e.what();
    }
    INFO(msg);
    CHECK(!msg.empty());
    CHECK(msg.find("built without CUDA") == std::string::npos);
    CHECK(msg.find("cuda:0") != std::string::npos);
  }
#else
  PRECIS_REQUIRE_THROWS_WITH_ALL(t.to(Device::cuda(0)), DeviceError, "built without CUDA");
#endif
}
