#include "ops/op_table.h"

#include <cxxabi.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>

#include "core/cuda_backend.h"
#include "core/error.h"
#include "ops/backends.h"
#include "ops/kernel_observer.h"

namespace precis {

namespace {

constexpr OpInfo kOps[] = {
#define PRECIS_OP(name, category, differentiable, kind) {#name, Category::category, differentiable, OpKind::kind},
#include "ops/op_list.def"
#undef PRECIS_OP
};
static_assert(sizeof(kOps) / sizeof(kOps[0]) == kNumOps);

// kernels[op][device type][dtype]
detail::KernelSlot g_kernels[kNumOps][kNumDeviceTypes][kNumDTypes] = {};

detail::KernelSlot& slot_of(OpId op, DeviceType device, DType dtype) {
  return g_kernels[static_cast<int>(op)][static_cast<int>(device)][static_cast<int>(dtype)];
}

std::atomic<KernelLookupObserver> g_lookup_observer{nullptr};

// A readable C++ spelling of a signature for error messages.
std::string signature_name(const std::type_info& t) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> out(abi::__cxa_demangle(t.name(), nullptr, nullptr, &status), std::free);
  return status == 0 && out ? std::string(out.get()) : std::string(t.name());
}

}  // namespace

const OpInfo& op_info(OpId op) { return kOps[static_cast<int>(op)]; }

const char* category_name(Category c) {
  switch (c) {
    case Category::Lower: return "Lower";
    case Category::FP32: return "FP32";
    case Category::Promote: return "Promote";
    case Category::Passthrough: return "Passthrough";
    case Category::Banned: return "Banned";
  }
  return "?";
}

void register_kernel(OpId op, DeviceType device, DType dtype, void* fn, const std::type_info& signature) {
  slot_of(op, device, dtype) = detail::KernelSlot{fn, fn == nullptr ? nullptr : &signature};
}

namespace {

// CUDA kernels are registered when the backend library loads, on the first CUDA lookup: a CPU-only
// program never opens the CUDA libraries.
void init_backends_for(DeviceType device) {
  init_backends();
  if (device == DeviceType::cuda) [[unlikely]]
    init_cuda_kernels();
}

}  // namespace

const detail::KernelSlot& detail::kernel_slot(OpId op, DeviceType device, DType dtype) {
  init_backends_for(device);
  if (KernelLookupObserver observe = g_lookup_observer.load(std::memory_order_relaxed)) observe(op, device, dtype);
  return slot_of(op, device, dtype);
}

void detail::copy_kernels(DeviceType from, DeviceType to, std::span<const OpId> except) {
  // Not init_backends_for(from): for CUDA that would re-enter the registration that calls this.
  if (from == DeviceType::cpu) init_backends();
  for (int op = 0; op < kNumOps; ++op) {
    if (std::find(except.begin(), except.end(), static_cast<OpId>(op)) != except.end()) continue;
    for (int d = 0; d < kNumDTypes; ++d)
      g_kernels[op][static_cast<int>(to)][d] = g_kernels[op][static_cast<int>(from)][d];
  }
}

void set_kernel_lookup_observer(KernelLookupObserver observer) { g_lookup_observer.store(observer); }

void* find_kernel(OpId op, DeviceType device, DType dtype) {
  init_backends_for(device);
  return slot_of(op, device, dtype).fn;
}

namespace {
std::atomic<bool> g_fused_kernels{true};
}  // namespace

void* find_fused_kernel(OpId op, DeviceType device, DType dtype) {
  return g_fused_kernels.load(std::memory_order_relaxed) ? find_kernel(op, device, dtype) : nullptr;
}

bool detail::set_fused_kernels(bool enabled) { return g_fused_kernels.exchange(enabled); }

std::vector<DType> registered_dtypes(OpId op, DeviceType device) {
  init_backends_for(device);
  std::vector<DType> out;
  for (int d = 0; d < kNumDTypes; ++d)
    if (g_kernels[static_cast<int>(op)][static_cast<int>(device)][d].fn != nullptr) out.push_back(static_cast<DType>(d));
  return out;
}

void throw_missing_kernel(OpId op, DeviceType device, DType dtype) {
  std::string have;
  for (DType d : registered_dtypes(op, device)) have += (have.empty() ? "" : ", ") + std::string(dtype_name(d));
  throw NotImplementedError(detail::str_cat(op_name(op), ": no ", device_type_name(device), " kernel for dtype ",
                                            dtype_name(dtype), "; ", device_type_name(device), " kernels exist for: ",
                                            have.empty() ? "none" : have,
                                            device == DeviceType::cuda && !cuda_backend_available()
                                                ? " (" + cuda_backend_unavailable_reason() + ")"
                                                : "",
                                            is_float8(dtype)
                                                ? "; fp8 is a storage and GEMM format (casts, fills, views, "
                                                  "scaled_matmul), not a compute dtype: cast to bf16 or f32 first "
                                                  "(x.to(DType::bf16)), as in PyTorch"
                                                : ""));
}

void throw_kernel_signature_mismatch(OpId op, DeviceType device, DType dtype, const std::type_info& registered,
                                     const std::type_info& requested) {
  throw InternalError(detail::str_cat(op_name(op), ": the ", device_type_name(device), " ", dtype_name(dtype),
                                      " kernel was registered as ", signature_name(registered),
                                      " but looked up as ", signature_name(requested),
                                      "; the op front-end and the backend's register_kernel<...>() must name the "
                                      "same kernel type from ops/contracts/kernels.h"));
}

void init_backends() {
  static std::once_flag once;
  std::call_once(once, [] {
    cpu::register_cpu_kernels();
  });
}

bool init_cuda_kernels() {
  // The flag spares every CUDA lookup the once_flag's synchronisation after the first.
  static std::atomic<bool> done{false};
  if (done.load(std::memory_order_acquire)) return true;
  static std::once_flag once;
  std::call_once(once, [] {
    auto fn = reinterpret_cast<void (*)()>(detail::cuda_backend_symbol("precis_cuda_register_kernels"));
    if (fn == nullptr) return;
    fn();
    done.store(true, std::memory_order_release);
  });
  return done.load(std::memory_order_acquire);
}

}  // namespace precis
