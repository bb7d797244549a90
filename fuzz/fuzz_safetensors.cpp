// The safetensors reader (tensor/safetensors.h) on raw bytes, through its in-memory entry point;
// what it accepts is read back element by element and written out again.
#include <string_view>

#include "core/error.h"
#include "fuzz/common.h"
#include "ops/functional.h"
#include "tensor/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  precis::fuzz::init_once();
  try {
    precis::SafetensorsFile f = precis::from_safetensors_bytes(std::string_view(reinterpret_cast<const char*>(data), size));
    for (const auto& [name, t] : f.tensors) {
      // Touch every element: a tensor whose storage is shorter than its shape says trips ASan.
      if (t.numel() > 0) (void)precis::sum(precis::cast(t, precis::DType::f64)).item<double>();
    }
    std::string again = precis::to_safetensors_bytes(f.tensors, f.metadata);
    precis::SafetensorsFile g = precis::from_safetensors_bytes(again);
    if (g.tensors.size() != f.tensors.size()) __builtin_trap();  // a round trip must keep every tensor
  } catch (const precis::Error&) {
  }
  return 0;
}
