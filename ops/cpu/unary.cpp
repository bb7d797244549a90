#include "ops/cpu/cpu_backend.h"

namespace precis::cpu {

void register_unary_kernels() {}

}  // namespace precis::cpu
