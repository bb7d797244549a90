// The fake CUDA device: a test-only backend library (libprecis_fake_cuda.so) that exports the
// real backend's entry points (core/cuda_backend.h, ops/backends.h) over host memory, so that
// every CPU-side code path a Device::cuda() tensor takes — op front-ends, autocast's CUDA policy,
// the device-resident loss scaler, the optimizers' device paths, Tensor::to and pinned memory,
// the caching allocator — runs in a build without a GPU, CPU-only builds included. Tests select it
// with PRECIS_CUDA_BACKEND=<path of this library> (tests/CMakeLists.txt, tests/fake_cuda/).
//
// What it is:
//   - PRECIS_FAKE_CUDA_DEVICES (default 2) visible devices, cuda:0 and cuda:1, whose memory is
//     host memory handed out by a DeviceCachingAllocator of its own per device (so a tensor's
//     allocator tells the devices apart), with one stream whose events complete at once;
//   - pinned host memory from a caching allocator of its own (Tensor::is_pinned holds);
//   - the CPU kernels of every (op, dtype) slot registered for DeviceType::cuda
//     (detail::copy_kernels) but those of the ops the real backend lacks (cpu_only_ops.h, checked
//     against it in CUDA builds), so the front-ends take the GPU's composed paths: kernels run
//     synchronously on the calling thread;
//   - a device copy that memcpys and reports a host synchronisation exactly where the real
//     backend's (ops/cuda/device_copy.cpp) waits: a device-to-host copy unless it lands in pinned
//     memory with non_blocking, a host-to-device copy unless it reads pinned memory with
//     non_blocking. synchronize and the allocator's waits and frees are reported as the real
//     backend's are. So core/sync_debug.h's count on the fake device is the real one's for the
//     same CPU-side code.
//
// What it cannot show (a real GPU run must):
//   - the host halves of the CUDA kernels (ops/cuda/*_kernels.cpp): one of them that reads a
//     device tensor (index_add's grouping, used by embedding's backward) syncs on a GPU and not
//     here; cuDNN's algorithm search; asynchrony itself (races, stream ordering, timing);
//   - a dtype the real backend lacks for an op it has (none today; the [cuda_api] test would
//     fail and name it);
//   - numerics of the GPU kernels (TF32, cuBLASLt epilogues, atomics' order).
// CUDA-only front-end branches (grep is_cuda() / DeviceType::cuda in ops, amp, optim,
// models/train) and how they fare here:
//   - conv2d hands a channels-last weight (cuDNN's NHWC filter) to the kernel on CUDA and wants its
//     gradient so: the CPU kernels read and write OIHW weights, so the fake passes them contiguous
//     copies (register_conv_kernels below);
//   - the f32 precision setting (ops/float32_precision) answers "tf32" for CUDA: a query only,
//     the CPU kernels compute in IEEE f32;
//   - Tensor::to(Device::cpu(), true) into pinned memory, DataLoader pin_memory and
//     precis-train's pin_memory on CUDA: work (fake pinned memory);
//   - precis-train's default autocast on CUDA (f16): works where the CPU has f16 kernels;
//   - dist/ddp.cpp's device branch: not exercised (the fake has no NCCL and the tests no MPI).
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "core/allocator.h"
#include "core/cuda_backend.h"
#include "core/device_caching_allocator.h"
#include "core/error.h"
#include "core/sync_debug.h"
#include "ops/backends.h"
#include "ops/contracts/kernels_conv.h"
#include "ops/op_table.h"
#include "tensor/factory.h"
#include "tensor/tensor.h"
#include "tests/support/fake_cuda/cpu_only_ops.h"

namespace {

using namespace precis;

int device_count() {
  static const int n = [] {
    const char* env = std::getenv("PRECIS_FAKE_CUDA_DEVICES");
    const int v = env != nullptr && *env != '\0' ? std::atoi(env) : 2;
    return v < 0 ? 0 : (v > 16 ? 16 : v);
  }();
  return n;
}

const char* unavailable_reason() { return device_count() > 0 ? "" : "PRECIS_FAKE_CUDA_DEVICES=0"; }

void check_index(int index, const char* what) {
  PRECIS_CHECK_DEVICE(index >= 0 && index < device_count(), what, ": cuda:", index, " is not a visible device (the ",
                      "fake CUDA backend has ", device_count(), "; PRECIS_FAKE_CUDA_DEVICES sets how many)");
}

// Host memory posing as a device's (or as pinned host memory when index < 0). Its events are
// complete when recorded: the fake's kernels have finished by the time they return.
class FakeMemory final : public DeviceMemory {
 public:
  explicit FakeMemory(int index) : index_(index) {}
  Device device() const override { return index_ < 0 ? Device::cpu() : Device::cuda(index_); }
  std::string name() const override { return index_ < 0 ? "fake pinned host memory" : "fake " + device().str(); }
  void* malloc(size_t bytes) override { return std::aligned_alloc(512, (bytes + 511) / 512 * 512); }
  void free(void* ptr, size_t) override {
    if (index_ >= 0)
      detail::note_host_sync("cudaFree of device memory (the allocator gave a segment back)", false);
    else
      detail::note_host_sync("cudaFreeHost of pinned memory (the pinned allocator gave a block back)", false);
    std::free(ptr);
  }
  StreamHandle current_stream() override { return reinterpret_cast<StreamHandle>(static_cast<intptr_t>(index_ + 2)); }
  EventHandle record_event(StreamHandle) override { return reinterpret_cast<EventHandle>(1); }
  bool query_event(EventHandle) override { return true; }
  void synchronize_event(EventHandle) override {
    detail::note_host_sync("the device allocator waiting for an event (memory ran short)", false);
  }
  void destroy_event(EventHandle) noexcept override {}
  void synchronize_device() override {
    if (index_ >= 0) detail::note_host_sync("the device allocator synchronising before it releases memory", false);
  }
  void copy_to_host(void* dst, const void* src, size_t nbytes) override {
    if (index_ >= 0)
      detail::note_host_sync("a device-to-host copy of raw bytes (Allocator::copy_to_host: saving a tensor)");
    std::memcpy(dst, src, nbytes);
  }

 private:
  int index_;
};

void register_allocators() {
  for (int i = 0; i < device_count(); ++i)  // never freed: tensors may outlive any scope here
    register_allocator(DeviceType::cuda, i, new DeviceCachingAllocator(std::make_unique<FakeMemory>(i)));
}

Allocator& pinned_allocator() {
  PRECIS_CHECK_DEVICE(device_count() > 0, "pin_memory: the fake CUDA backend has no device (PRECIS_FAKE_CUDA_DEVICES=0)");
  static Allocator* const a = new DeviceCachingAllocator(std::make_unique<FakeMemory>(-1));
  return *a;
}

void synchronize_device(int index) {
  check_index(index, "synchronize");
  detail::note_host_sync("cuda::synchronize (a device synchronisation)");
}

// The real backend's rules (ops/cuda/device_copy.cpp), with memcpy for the transfer.
void device_copy(const Tensor& dst, const Tensor& src, bool non_blocking) {
  PRECIS_CHECK_SHAPE(dst.sizes() == src.sizes() && dst.dtype() == src.dtype() && dst.is_contiguous() &&
                         src.is_contiguous(),
                     "device copy: expects contiguous tensors of one shape and dtype; got dst ", dst.describe(),
                     ", src ", src.describe());
  const Device d = dst.device(), s = src.device();
  if (d.is_cuda()) check_index(d.index, "copy");
  if (s.is_cuda()) check_index(s.index, "copy");
  const size_t bytes = static_cast<size_t>(dst.numel()) * dst.element_size();
  if (bytes == 0) return;
  if (s.is_cpu() && d.is_cuda() && !(non_blocking && src.is_pinned()))
    detail::note_host_sync("a host-to-device copy from pageable memory (pin the source with pin_memory() and copy "
                           "with non_blocking)");
  if (s.is_cuda() && d.is_cpu() && !(non_blocking && dst.is_pinned())) detail::note_host_sync("a device-to-host copy");
  std::memcpy(dst.data_ptr(), src.data_ptr(), bytes);
}

// Graph capture: the capture's allocations go to a private pool of the device's allocator, as on
// a GPU, so what refuses work inside a capture (core/cuda_graph.cpp) runs here. There is nothing
// to replay: the fake device runs each kernel when it is launched.
struct FakeGraph {
  int device = 0;
  uint64_t pool = 0;
  bool routed = false;
};

DeviceCachingAllocator& device_allocator(int device) {
  auto* a = dynamic_cast<DeviceCachingAllocator*>(&allocator_for(Device::cuda(device)));
  PRECIS_INTERNAL_ASSERT(a != nullptr, "fake CUDA backend: cuda:", device, " has no caching allocator");
  return *a;
}

StreamHandle fake_stream(int device) { return reinterpret_cast<StreamHandle>(static_cast<intptr_t>(device + 2)); }

void* graph_begin(int device, uint64_t pool) {
  check_index(device, "cuda::Graph");
  device_allocator(device).begin_allocate_to_pool(pool, fake_stream(device));
  return new FakeGraph{device, pool, true};
}

void graph_end(void* handle) {
  auto* g = static_cast<FakeGraph*>(handle);
  device_allocator(g->device).end_allocate_to_pool(g->pool);
  g->routed = false;
}

void release(FakeGraph* g) noexcept {
  try {
    if (g->routed) device_allocator(g->device).end_allocate_to_pool(g->pool);
    device_allocator(g->device).release_pool(g->pool);
  } catch (...) {
  }
  delete g;
}

void graph_abandon(void* handle) noexcept { release(static_cast<FakeGraph*>(handle)); }

void graph_replay(void*) {
  throw NotImplementedError("cuda::Graph::replay: the fake CUDA device runs each kernel when it is launched, so a "
                            "capture recorded nothing to replay; replays run on a GPU (tests/gpu)");
}

void graph_destroy(void* handle) noexcept { release(static_cast<FakeGraph*>(handle)); }

// Device memory is host memory here, and the fake device's "stream" runs everything at once.
void write_u64_async(int, void* dst, uint64_t value) { *static_cast<uint64_t*>(dst) = value; }

constexpr detail::CudaCoreHooks kHooks{
    .device_count = &device_count,
    .unavailable_reason = &unavailable_reason,
    .register_allocators = &register_allocators,
    .pinned_allocator = &pinned_allocator,
    .synchronize_device = &synchronize_device,
    .compute_capability = nullptr,
    .graph_begin = &graph_begin,
    .graph_end = &graph_end,
    .graph_abandon = &graph_abandon,
    .graph_replay = &graph_replay,
    .graph_destroy = &graph_destroy,
    .write_u64_async = &write_u64_async,
    .set_device = nullptr,
};

// conv2d's kernels on the fake device: the CPU's, with a channels-last weight (and weight
// gradient) passed through contiguous copies.
Tensor oihw(const Tensor& w) { return w.defined() && !w.is_contiguous() ? w.contiguous() : w; }
void conv2d_fake(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias,
                 const kernels::Conv2dParams& p) {
  auto* cpu = reinterpret_cast<kernels::Conv2dKernel*>(find_kernel(OpId::conv2d, DeviceType::cpu, x.dtype()));
  cpu(out, x, oihw(w), bias, p);
}
void conv2d_backward_fake(const Tensor& grad_x, const Tensor& grad_w, const Tensor& grad_bias, const Tensor& grad_out,
                          const Tensor& x, const Tensor& w, const kernels::Conv2dParams& p) {
  const DType dt = grad_out.dtype();
  auto* cpu =
      reinterpret_cast<kernels::Conv2dBackwardKernel*>(find_kernel(OpId::conv2d_backward, DeviceType::cpu, dt));
  const Tensor gw = grad_w.defined() && !grad_w.is_contiguous() ? empty(grad_w.sizes(), {.dtype = grad_w.dtype(),
                                                                                          .device = grad_w.device()})
                                                                : grad_w;
  cpu(grad_x, gw, grad_bias, grad_out, x, oihw(w), p);
  if (!gw.is_same(grad_w)) Tensor(grad_w).copy_(gw);
}
void register_conv_kernels() {
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    if (find_kernel(OpId::conv2d, DeviceType::cpu, dt) != nullptr)
      register_kernel<kernels::Conv2dKernel>(OpId::conv2d, DeviceType::cuda, dt, &conv2d_fake);
    if (find_kernel(OpId::conv2d_backward, DeviceType::cpu, dt) != nullptr)
      register_kernel<kernels::Conv2dBackwardKernel>(OpId::conv2d_backward, DeviceType::cuda, dt,
                                                     &conv2d_backward_fake);
  }
}

}  // namespace

extern "C" {

const precis::detail::CudaCoreHooks* precis_cuda_core_hooks() { return &kHooks; }

void precis_cuda_register_kernels() {
  precis::detail::copy_kernels(precis::DeviceType::cpu, precis::DeviceType::cuda,
                               precis::fake_cuda_testing::kCpuOnlyOps);
  register_conv_kernels();
  precis::set_device_copy(&device_copy);
}

/// Tells a test that the CUDA backend in use is this fake one (a real GPU must not run them).
int precis_fake_cuda() { return 1; }

}  // extern "C"
