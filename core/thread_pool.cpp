// TEMPORARY serial implementation (replaced by the pool from the core-impl branch).
#include "core/thread_pool.h"
namespace precis {
int get_num_threads() { return 1; }
void set_num_threads(int) {}
bool in_parallel_region() { return false; }
void parallel_for(int64_t b, int64_t e, int64_t, const std::function<void(int64_t, int64_t)>& f) {
  if (b < e) f(b, e);
}
}  // namespace precis
