// TEMPORARY minimal allocator (replaced by the caching allocator from the core-impl branch).
#include "core/allocator.h"

#include <cstdlib>
#include <mutex>

#include "core/error.h"

namespace precis {
namespace {
class SimpleCpuAllocator final : public Allocator {
 public:
  void* allocate(size_t n) override {
    if (n == 0) return nullptr;
    void* p = std::aligned_alloc(64, (n + 63) / 64 * 64);
    if (!p) throw Error("out of memory");
    return p;
  }
  void deallocate(void* p, size_t) override { std::free(p); }
  AllocatorStats stats() const override { return {}; }
  void reset_peak_stats() override {}
  void empty_cache() override {}
  Device device() const override { return Device::cpu(); }
};
Allocator* g_cuda[16] = {};
}  // namespace

Allocator& cpu_allocator() {
  static auto* a = new SimpleCpuAllocator();
  return *a;
}
void register_allocator(DeviceType type, int index, Allocator* a) {
  if (type == DeviceType::cuda) g_cuda[index] = a;
}
Allocator& allocator_for(Device d) {
  if (d.is_cpu()) return cpu_allocator();
  PRECIS_CHECK_DEVICE(d.index < 16 && g_cuda[d.index], "no CUDA allocator for ", d.str());
  return *g_cuda[d.index];
}
}  // namespace precis
