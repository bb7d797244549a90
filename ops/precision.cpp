#include "ops/precision.h"

#include <atomic>

namespace precis {

namespace {
std::atomic<PrecisionRegionFactory> g_region_factory{nullptr};
}

void set_precision_region_factory(PrecisionRegionFactory factory) { g_region_factory.store(factory); }

std::unique_ptr<PrecisionRegion> make_precision_region() {
  const PrecisionRegionFactory f = g_region_factory.load(std::memory_order_relaxed);
  return f != nullptr ? f() : nullptr;
}

PrecisionPolicy* set_precision_policy(PrecisionPolicy* policy) {
  PrecisionPolicy* previous = detail::t_precision_policy;
  detail::t_precision_policy = policy;
  return previous;
}

std::vector<Tensor> apply_precision_list(OpId op, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> out = inputs;
  if (PrecisionPolicy* p = detail::t_precision_policy) [[unlikely]]
    p->apply_list(op, out);
  return out;
}

}  // namespace precis
