#pragma once
// Internal to ops/: the (height, width) geometry arguments of the 2-D ops, given as one value
// (both dims, like PyTorch's int) or two.
#include <cstdint>
#include <vector>

#include "core/error.h"

namespace precis::detail {

/// out = {v[0], v[0]} or {v[0], v[1]}; throws ValueError naming op and argument when v has
/// another length or a value below `min`.
inline void pair_arg(const char* op, const char* name, const std::vector<int64_t>& v, int64_t out[2], int64_t min) {
  PRECIS_CHECK(v.size() == 1 || v.size() == 2, op, ": ", name, " must have 1 or 2 values (height, width), got ",
               v.size());
  out[0] = v[0];
  out[1] = v.size() == 2 ? v[1] : v[0];
  PRECIS_CHECK(out[0] >= min && out[1] >= min, op, ": ", name, " must be >= ", min, ", got (", out[0], ", ", out[1],
               ")");
}

}  // namespace precis::detail
