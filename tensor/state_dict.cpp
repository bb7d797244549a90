#include "tensor/state_dict.h"

#include <cstring>

#include "core/float8.h"
#include "core/half.h"
#include "tensor/safetensors.h"

namespace precis {

namespace {

// 0-d CPU tensors made and read without kernels: state values are single numbers, and the tensor
// layer runs no kernel (docs/design/architecture.md). The value may live on a device (a scaler
// keeps its state there): one element is copied to the host by its allocator.
template <typename T>
Tensor scalar_of(T value, DType dtype) {
  Tensor t = detail::new_contiguous({}, dtype, Device::cpu());
  std::memcpy(t.data_ptr(), &value, sizeof value);
  return t;
}

template <typename T>
T host_value(const Tensor& t) {
  unsigned char raw[8] = {};
  allocator_for(t.device()).copy_to_host(raw, t.data_ptr(), t.element_size());
  const auto as = [&raw]<typename S>(S) {
    S v;
    std::memcpy(&v, raw, sizeof v);
    return v;
  };
  switch (t.dtype()) {
    case DType::f32: return static_cast<T>(as(float{}));
    case DType::f64: return static_cast<T>(as(double{}));
    case DType::f16: return static_cast<T>(static_cast<float>(as(Half{})));
    case DType::bf16: return static_cast<T>(static_cast<float>(as(BFloat16{})));
    case DType::i64: return static_cast<T>(as(int64_t{}));
    case DType::i32: return static_cast<T>(as(int32_t{}));
    case DType::boolean: return static_cast<T>(raw[0] != 0);
    case DType::f8_e4m3: return static_cast<T>(static_cast<float>(Float8E4M3::from_bits(raw[0])));
    case DType::f8_e5m2: return static_cast<T>(static_cast<float>(Float8E5M2::from_bits(raw[0])));
  }
  throw InternalError("state_dict: unknown dtype");
}

}  // namespace

Tensor state_real(double value) { return scalar_of(value, DType::f64); }
Tensor state_int(int64_t value) { return scalar_of(value, DType::i64); }

Tensor state_tensor(const StateDict& dict, const std::string& key, const char* owner) {
  auto it = dict.find(key);
  if (it == dict.end()) {
    std::string keys;
    for (const auto& [k, v] : dict) {
      if (keys.size() > 400) {
        keys += ", ...";
        break;
      }
      keys += (keys.empty() ? "" : ", ") + k;
    }
    throw ValueError(detail::str_cat(owner, ": the state dict has no entry '", key, "' (it has: ",
                                     keys.empty() ? "nothing" : keys, "); was it saved by a different ", owner, "?"));
  }
  PRECIS_CHECK(it->second.defined(), owner, ": state entry '", key, "' is an undefined tensor");
  return it->second;
}

double state_get_real(const StateDict& dict, const std::string& key, const char* owner) {
  Tensor t = state_tensor(dict, key, owner);
  PRECIS_CHECK_SHAPE(t.numel() == 1, owner, ": state entry '", key, "' should hold one value, got ", t.describe());
  return host_value<double>(t);
}

int64_t state_get_int(const StateDict& dict, const std::string& key, const char* owner) {
  Tensor t = state_tensor(dict, key, owner);
  PRECIS_CHECK_SHAPE(t.numel() == 1, owner, ": state entry '", key, "' should hold one value, got ", t.describe());
  PRECIS_CHECK_DTYPE(!is_floating(t.dtype()) && !is_float8(t.dtype()), owner, ": state entry '", key, "' should be an integer, got ",
                     t.describe());
  return host_value<int64_t>(t);
}

void state_merge(StateDict& dst, const StateDict& src, const std::string& prefix) {
  for (const auto& [k, v] : src) dst[prefix + k] = v;
}

StateDict state_subset(const StateDict& dict, const std::string& prefix) {
  StateDict out;
  for (auto it = dict.lower_bound(prefix); it != dict.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it)
    out[it->first.substr(prefix.size())] = it->second;
  return out;
}

void save_state_dict(const std::string& path, const StateDict& dict,
                     const std::map<std::string, std::string>& metadata) {
  save_safetensors(path, NamedTensors(dict.begin(), dict.end()), metadata);
}

StateDict load_state_dict_file(const std::string& path) {
  SafetensorsFile file = load_safetensors(path);
  return StateDict(file.tensors.begin(), file.tensors.end());
}

}  // namespace precis
