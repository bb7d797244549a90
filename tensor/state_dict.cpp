#include "tensor/state_dict.h"

#include "tensor/factory.h"
#include "tensor/safetensors.h"

namespace precis {

Tensor state_real(double value) { return scalar_tensor(value, {.dtype = DType::f64}); }
Tensor state_int(int64_t value) { return scalar_tensor(value, {.dtype = DType::i64}); }

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
  return t.item<double>();
}

int64_t state_get_int(const StateDict& dict, const std::string& key, const char* owner) {
  Tensor t = state_tensor(dict, key, owner);
  PRECIS_CHECK_SHAPE(t.numel() == 1, owner, ": state entry '", key, "' should hold one value, got ", t.describe());
  PRECIS_CHECK_DTYPE(!is_floating(t.dtype()), owner, ": state entry '", key, "' should be an integer, got ",
                     t.describe());
  return t.item<int64_t>();
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
