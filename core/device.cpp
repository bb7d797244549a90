#include "core/device.h"
#include "core/synchronize.h"

#include "core/error.h"
#ifdef PRECIS_HAS_CUDA
#include "core/cuda/cuda_context.h"
#endif

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
#ifdef PRECIS_HAS_CUDA
  return cuda::device_count();
#else
  return 0;
#endif
}

namespace cuda {

void synchronize(int index) {
#ifdef PRECIS_HAS_CUDA
  if (index >= 0) {
    synchronize_device(index);
    return;
  }
  for (int i = 0; i < device_count(); ++i) synchronize_device(i);
#else
  PRECIS_CHECK_DEVICE(index < 0, "cuda::synchronize: cuda:", index,
                      " is not available: this build of precis has no CUDA support; use Device::cpu()");
#endif
}

}  // namespace cuda

}  // namespace precis
