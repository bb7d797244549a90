// Philox4x32-10: the host/device implementation is core/philox.h; these are its std::array forms.
#include "core/rng.h"

#include "core/philox.h"

namespace precis {

std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> c, uint64_t key) {
  const PhiloxBlock b = philox4x32_10(c[0], c[1], c[2], c[3], key);
  return {b.v[0], b.v[1], b.v[2], b.v[3]};
}

Generator& default_generator() {
  // Leaked like the other process-wide singletons, so static destructors may still draw numbers.
  static Generator* const g = new Generator();
  return *g;
}

DrawObserver* set_draw_observer(DrawObserver* observer) {
  DrawObserver* previous = detail::t_draw_observer;
  detail::t_draw_observer = observer;
  return previous;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace precis
