#include "ops/cpu/cpu_backend.h"

namespace precis::cpu {

void register_linalg_kernels() {}

}  // namespace precis::cpu
