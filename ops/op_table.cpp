#include "ops/op_table.h"

#include <mutex>
#include <string>

#include "core/error.h"
#include "ops/backends.h"

namespace precis {

namespace {

constexpr OpInfo kOps[] = {
#define PRECIS_OP(name, category, differentiable, kind) {#name, Category::category, differentiable, OpKind::kind},
#include "ops/op_list.def"
#undef PRECIS_OP
};
static_assert(sizeof(kOps) / sizeof(kOps[0]) == kNumOps);

// kernels[op][device type][dtype]
void* g_kernels[kNumOps][kNumDeviceTypes][kNumDTypes] = {};

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

void register_kernel(OpId op, DeviceType device, DType dtype, void* fn) {
  g_kernels[static_cast<int>(op)][static_cast<int>(device)][static_cast<int>(dtype)] = fn;
}

void* find_kernel(OpId op, DeviceType device, DType dtype) {
  init_backends();
  return g_kernels[static_cast<int>(op)][static_cast<int>(device)][static_cast<int>(dtype)];
}

std::vector<DType> registered_dtypes(OpId op, DeviceType device) {
  init_backends();
  std::vector<DType> out;
  for (int d = 0; d < kNumDTypes; ++d)
    if (g_kernels[static_cast<int>(op)][static_cast<int>(device)][d] != nullptr) out.push_back(static_cast<DType>(d));
  return out;
}

void throw_missing_kernel(OpId op, DeviceType device, DType dtype) {
  std::string have;
  for (DType d : registered_dtypes(op, device)) have += (have.empty() ? "" : ", ") + std::string(dtype_name(d));
  throw NotImplementedError(detail::str_cat(op_name(op), ": no ", device_type_name(device), " kernel for dtype ",
                                            dtype_name(dtype), "; ", device_type_name(device), " kernels exist for: ",
                                            have.empty() ? "none" : have,
                                            device == DeviceType::cuda && have.empty()
                                                ? " (was precis built with CUDA?)"
                                                : ""));
}

void init_backends() {
  static std::once_flag once;
  std::call_once(once, [] {
    cpu::register_cpu_kernels();
#ifdef PRECIS_HAS_CUDA
    cuda::register_cuda_backend();
#endif
  });
}

}  // namespace precis
