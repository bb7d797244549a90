#include "core/device.h"
#include "core/synchronize.h"

#include "core/cuda_backend.h"
#include "core/error.h"

namespace precis {

const char* device_type_name(DeviceType t) { return t == DeviceType::cpu ? "cpu" : "cuda"; }

std::string Device::str() const {
  if (is_cpu()) return "cpu";
  return "cuda:" + std::to_string(index);
}

Device Device::parse(const std::string& s) {
  if (s == "cpu") return cpu();
  if (s == "cuda") return cuda(0);
  if (s.rfind("cuda:", 0) == 0) {
    const std::string n = s.substr(5);
    PRECIS_CHECK(!n.empty() && n.find_first_not_of("0123456789") == std::string::npos,
                 "invalid device '", s, "'; expected 'cpu', 'cuda' or 'cuda:N'");
    return cuda(std::stoi(n));
  }
  throw ValueError("invalid device '" + s + "'; expected 'cpu', 'cuda' or 'cuda:N'");
}

bool cuda_is_available() { return cuda_device_count() > 0; }

int cuda_device_count() {
  const detail::CudaCoreHooks* cuda = detail::cuda_core_hooks();
  return cuda == nullptr ? 0 : cuda->device_count();
}

int cuda_compute_capability(int index) {
  const detail::CudaCoreHooks* cuda = detail::cuda_core_hooks();
  // A backend that cannot tell (the tests' fake device) leaves the hook null.
  if (cuda == nullptr || cuda->compute_capability == nullptr || index < 0 || index >= cuda->device_count()) return 0;
  try {
    return cuda->compute_capability(index);
  } catch (const Error&) {
    return 0;
  }
}

std::string cuda_unavailable_reason() {
  const detail::CudaCoreHooks* cuda = detail::cuda_core_hooks();
  if (cuda == nullptr) return cuda_backend_unavailable_reason();
  return cuda->device_count() > 0 ? std::string() : std::string(cuda->unavailable_reason());
}

namespace cuda {

void synchronize(int index) {
  const detail::CudaCoreHooks* cuda = detail::cuda_core_hooks();
  if (cuda == nullptr) {
    PRECIS_CHECK_DEVICE(index < 0, "cuda::synchronize: cuda:", index, " is not available: ",
                        cuda_backend_unavailable_reason(), "; use Device::cpu()");
    return;
  }
  if (index >= 0) {
    cuda->synchronize_device(index);
    return;
  }
  for (int i = 0; i < cuda->device_count(); ++i) cuda->synchronize_device(i);
}

void set_device(int index) {
  const detail::CudaCoreHooks* cuda = detail::cuda_core_hooks();
  PRECIS_CHECK_DEVICE(cuda != nullptr, "cuda::set_device: cuda:", index, " is not available: ",
                      cuda_backend_unavailable_reason());
  PRECIS_CHECK_DEVICE(index >= 0 && index < cuda->device_count(), "cuda::set_device: cuda:", index,
                      " is not a visible device (", cuda->device_count(), " visible",
                      cuda->device_count() == 0 ? std::string("; ") + cuda->unavailable_reason() : std::string(), ")");
  if (cuda->set_device != nullptr) cuda->set_device(index);
}

}  // namespace cuda

}  // namespace precis
