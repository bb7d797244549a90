// Pinned host memory, asynchronous host-to-device copies, the per-device streams and the CUDA
// caching allocator's stream recording. Tests tagged [cuda] need a GPU and return early (with a
// warning) without one; the others check what a machine without a usable GPU must do.
#include <memory>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/device.h"
#include "core/synchronize.h"
#include "core/warning.h"
#include "data/data_loader.h"
#include "tensor/factory.h"
#include "tests/support/tensor_testing.h"

#ifdef PRECIS_HAS_CUDA
#include "core/cuda/cuda_allocator.h"
#include "core/cuda/cuda_context.h"
#endif

using namespace precis;

namespace {

const Device kGpu = Device::cuda(0);

class CountDataset : public data::Dataset {
 public:
  int64_t size() const override { return 6; }
  data::Example get(int64_t i) const override {
    return data::Example{from_vector<float>({static_cast<float>(i), 0.5f}, {2}),
                         scalar_tensor(i, {.dtype = DType::i64})};
  }
};

// Host memory that claims to be pinned: what Tensor::is_pinned reads, without a GPU.
class ClaimsPinned final : public Allocator {
 public:
  void* allocate(size_t n) override { return cpu_allocator().allocate(n); }
  void deallocate(void* p, size_t n) override { cpu_allocator().deallocate(p, n); }
  AllocatorStats stats() const override { return {}; }
  void reset_peak_stats() override {}
  void empty_cache() override {}
  Device device() const override { return Device::cpu(); }
  bool is_pinned() const override { return true; }
};

}  // namespace

// ---- no GPU needed ----------------------------------------------------------------------------

TEST_CASE("pin_memory without a usable CUDA device is a DeviceError naming the cause", "[cuda_api]") {
  const Tensor x = ones({4});
  CHECK_FALSE(x.is_pinned());
  CHECK_FALSE(Tensor().is_pinned());
  CHECK(x.to(Device::cpu(), /*non_blocking=*/true).impl() == x.impl());  // same device: no copy
  CHECK(pinned_memory_available() == cuda_is_available());
  if (cuda_is_available()) return;  // the pinning itself is tested below with a GPU
  try {
    (void)x.pin_memory();
    FAIL("no exception");
  } catch (const DeviceError& e) {
    const std::string m = e.what();
    CHECK(m.find("pin_memory") != std::string::npos);
    CHECK(m.find("CUDA") != std::string::npos);
  }
  CHECK_THROWS_AS(pinned_allocator(), DeviceError);
}

TEST_CASE("is_pinned follows the storage's allocator, views included, and pin_memory keeps a pinned tensor",
          "[cuda_api]") {
  static ClaimsPinned pinned;
  auto storage = std::make_shared<StorageImpl>(6 * sizeof(float), pinned);
  CHECK(storage->allocator() == &pinned);
  CHECK(storage->device() == Device::cpu());
  Tensor t(std::make_shared<TensorImpl>(storage, Shape{2, 3}, Shape{3, 1}, 0, DType::f32));
  t.fill_(1.5);
  CHECK(t.is_pinned());
  CHECK(t.transpose(0, 1).is_pinned());
  CHECK(t.pin_memory().impl() == t.impl());  // nothing to do
  CHECK_FALSE(t.clone().is_pinned());        // ordinary memory
  CHECK_FALSE(from_blob(t.data_ptr(), {6}, DType::f32).is_pinned());  // wrapped memory: no allocator
}

TEST_CASE("DataLoader pin_memory without a usable CUDA device warns once and yields ordinary batches",
          "[cuda_api]") {
  if (cuda_is_available()) return;  // with a GPU the batches are pinned: tested below
  std::vector<std::string> warnings;
  auto previous = set_warning_handler([&](const std::string& m) { warnings.push_back(m); });
  data::DataLoader loader(std::make_shared<CountDataset>(), {.batch_size = 4, .pin_memory = true});
  set_warning_handler(previous);
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].find("pin_memory") != std::string::npos);
  int64_t n = 0;
  for (data::Batch& b : loader.epoch(0)) {
    CHECK_FALSE(b[0].is_pinned());
    n += b[0].size(0);
  }
  CHECK(n == 6);
}
TEST_CASE("cuda::synchronize waits for every device when none is named, and a device not visible is a DeviceError",
          "[cuda_api][cuda]") {
  cuda::synchronize();  // returns at once without a device; waits for all of them with one
  if (cuda_is_available()) {
    cuda::synchronize(0);
    CHECK_THROWS_AS(cuda::synchronize(cuda_device_count()), DeviceError);
    return;
  }
  try {
    cuda::synchronize(0);
    FAIL("no exception");
  } catch (const DeviceError& e) {
    CHECK(std::string(e.what()).find("cuda:0") != std::string::npos);
  }
}

// ---- GPU ----------------------------------------------------------------------------------------

TEST_CASE("to(cpu, non_blocking) lands in pinned memory, complete after cuda::synchronize", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  const int64_t n = int64_t{1} << 24;  // 64 MiB: the copy is still running when the call returns
  Tensor host;
  {
    Tensor dev = arange(static_cast<double>(n), {.dtype = DType::f32, .device = kGpu}) * 2.0;
    host = dev.to(Device::cpu(), /*non_blocking=*/true);
  }  // the device block is freed while the copy may still read it (the stream orders its reuse)
  Tensor overwrite = full({n}, -1.0, {.device = kGpu});  // would take the freed block
  CHECK(host.device() == Device::cpu());
  CHECK(host.is_pinned());
  cuda::synchronize(0);
  const float* p = host.data_ptr<float>();
  bool ok = true;
  for (int64_t i = 0; i < n; ++i) ok = ok && p[i] == 2.0f * static_cast<float>(i);
  CHECK(ok);
  // A non-contiguous source and a dtype are handled as by the blocking copy.
  Tensor t = arange(12.0, {.device = kGpu}).reshape({3, 4}).transpose(0, 1);
  Tensor back = t.to(Device::cpu(), true);
  cuda::synchronize();
  CHECK(back.to_vector<float>() == t.cpu().to_vector<float>());
  // Blocking copies stay pageable and complete.
  CHECK_FALSE(t.to(Device::cpu()).is_pinned());
}

TEST_CASE("a pinned result dropped before synchronising is not handed out while the copy writes it", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  const int64_t n = int64_t{1} << 24;
  Tensor dev = full({n}, 3.0, {.device = kGpu});
  (void)dev.to(Device::cpu(), /*non_blocking=*/true);  // dropped at once
  Tensor other = empty({n}).pin_memory();  // may not get the block the copy is still writing
  other.fill_(7.0);
  cuda::synchronize(0);
  CHECK(other.sum().item<double>() == 7.0 * static_cast<double>(n));
}

TEST_CASE("pin_memory copies into pinned host memory, contiguous and differentiable", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  Tensor x = arange(12, {.dtype = DType::f32}).reshape({3, 4}).transpose(0, 1).detach().requires_grad_();
  Tensor p = x.pin_memory();
  CHECK(p.is_pinned());
  CHECK(p.device() == Device::cpu());
  CHECK(p.is_contiguous());
  CHECK(p.to_vector<float>() == x.to_vector<float>());
  CHECK(p.pin_memory().impl() == p.impl());  // already pinned
  p.sum().backward();
  REQUIRE(x.grad().defined());
  CHECK(x.grad().to_vector<float>() == std::vector<float>(12, 1.0f));
  CHECK(pinned_allocator().is_pinned());
  // Only CPU tensors can be pinned.
  CHECK_THROWS_AS(ones({2}, {.device = kGpu}).pin_memory(), DeviceError);
}

TEST_CASE("to(cuda, non_blocking) from pinned memory: later kernels see the data", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  const int64_t n = int64_t{1} << 22;
  Tensor host = arange(static_cast<double>(n), {.dtype = DType::f32}).pin_memory();
  Tensor dev = host.to(kGpu, /*non_blocking=*/true);
  CHECK(dev.device() == kGpu);
  Tensor y = dev * 2.0;  // queued on the compute stream, which waits for the copy
  const std::vector<float> got = y.cpu().to_vector<float>();
  bool ok = true;
  for (int64_t i = 0; i < n; ++i) ok = ok && got[static_cast<size_t>(i)] == 2.0f * static_cast<float>(i);
  CHECK(ok);
  // From pageable memory non_blocking falls back to a complete copy.
  CHECK(ones({5}).to(kGpu, true).cpu().to_vector<float>() == std::vector<float>(5, 1.0f));
}

TEST_CASE("a pinned block is not handed out again while an asynchronous copy still reads it", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  // 256 MiB: the copy takes tens of milliseconds, long after the host has moved on.
  const int64_t n = int64_t{1} << 26;
  Tensor dev;
  {
    Tensor src = ones({n}).pin_memory();
    dev = src.to(kGpu, /*non_blocking=*/true);
  }  // src freed while the copy may still be running
  Tensor other = empty({n}).pin_memory();  // same size: would get src's block if it were free
  other.fill_(2.0);
  CHECK(dev.sum().item<double>() == static_cast<double>(n));
}

#ifdef PRECIS_HAS_CUDA
TEST_CASE("each device has a compute, a copy and a comm stream, and the current one is the compute stream",
          "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  using namespace precis::cuda;
  cudaStream_t compute = compute_stream(0), copy = copy_stream(0), comm = comm_stream(0);
  CHECK(compute != nullptr);
  CHECK(copy != nullptr);
  CHECK(comm != nullptr);
  CHECK(compute != copy);
  CHECK(copy != comm);
  CHECK(compute != comm);
  CHECK(current_stream(0) == compute);
  CHECK(device_stream(0) == compute);
  CHECK(stream_device(copy) == 0);
  {
    StreamGuard guard(0, copy);
    CHECK(current_stream(0) == copy);
    // Kernels and allocations follow the current stream.
    Tensor t = ones({1000}, {.device = kGpu}) + 1.0;
    CHECK(t.cpu().to_vector<float>() == std::vector<float>(1000, 2.0f));
  }
  CHECK(current_stream(0) == compute);
  Event ev(0);
  CHECK(ev.query());  // never recorded
  ev.record(compute);
  ev.wait(copy);
  ev.synchronize();
  CHECK(ev.query());
  stream_wait(0, comm, compute);
}

TEST_CASE("the CUDA allocator keeps a block used on another stream until that stream is done", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  using namespace precis::cuda;
  DeviceCachingAllocator& a = caching_allocator(0);
  a.empty_cache();
  const size_t before = a.pending_event_count();
  void* p = nullptr;
  {
    Tensor x = ones({1 << 20}, {.device = kGpu});
    p = x.data_ptr();
    record_stream(x.data_ptr(), 0, copy_stream(0));
  }
  CHECK(a.pending_event_count() == before + 1);
  synchronize_stream(0);
  cudaStream_t copy = copy_stream(0);
  { StreamGuard g(0, copy); synchronize_stream(0); }
  Tensor y = empty({1 << 20}, {.device = kGpu});  // the event is queried here and has completed
  CHECK(a.pending_event_count() == before);
  CHECK(y.data_ptr() == p);
  CHECK_THROWS_AS(record_stream(&before, 0, copy), ValueError);
}

TEST_CASE("DataLoader pin_memory yields pinned batches on a machine with a GPU", "[cuda]") {
  PRECIS_REQUIRE_CUDA();
  data::DataLoader loader(std::make_shared<CountDataset>(), {.batch_size = 4, .num_workers = 1, .pin_memory = true});
  for (data::Batch& b : loader.epoch(0)) {
    CHECK(b[0].is_pinned());
    CHECK(b[1].is_pinned());
    Tensor d = b[0].to(kGpu, true);
    CHECK(d.cpu().to_vector<float>() == b[0].to_vector<float>());
  }
}
#endif
