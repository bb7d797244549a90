#include "ops/cpu/cpu_backend.h"

namespace precis::cpu {

void register_index_kernels() {}

}  // namespace precis::cpu
