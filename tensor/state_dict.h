#pragma once
// StateDict: the one format of saved state in precis. A module's parameters and buffers, an
// optimizer's moments and hyperparameters, a scheduler's and a loss scaler's counters are all
// named tensors; scalars are 0-d tensors (f64 for reals and optimizer options, flags included;
// i64 for counts and other flags), so any
// combination of state dicts saves to one safetensors file (tensor/safetensors.h) and loads back
// bit for bit.
#include <cstdint>
#include <map>
#include <string>

#include "tensor/tensor.h"

namespace precis {

using StateDict = std::map<std::string, Tensor>;

/// 0-d f64 / i64 tensors for scalar state.
Tensor state_real(double value);
Tensor state_int(int64_t value);

/// Reads an entry, throwing ValueError that names `owner` (e.g. "Adam"), the missing key and the
/// keys present when it is absent, or a DTypeError/ShapeError when it has the wrong form.
Tensor state_tensor(const StateDict& dict, const std::string& key, const char* owner);
double state_get_real(const StateDict& dict, const std::string& key, const char* owner);
int64_t state_get_int(const StateDict& dict, const std::string& key, const char* owner);

/// Copies every entry of `src` into `dst` under `prefix` + key ("optimizer." + "state.0.exp_avg").
void state_merge(StateDict& dst, const StateDict& src, const std::string& prefix);
/// The entries of `dict` whose keys start with `prefix`, with the prefix removed.
StateDict state_subset(const StateDict& dict, const std::string& prefix);

/// Writes `dict` to a safetensors file atomically (tensor/safetensors.h: temporary file, fsync,
/// rename), with optional string metadata. The checkpoint format of precis.
void save_state_dict(const std::string& path, const StateDict& dict,
                     const std::map<std::string, std::string>& metadata = {});
/// Reads a file written by save_state_dict (or any safetensors file). Throws IOError for a missing,
/// truncated or malformed file.
StateDict load_state_dict_file(const std::string& path);

}  // namespace precis
