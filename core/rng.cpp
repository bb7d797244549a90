// TEMPORARY (replaced by the core-impl branch).
#include "core/rng.h"
namespace precis {
std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> c, uint64_t key) {
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int r = 0; r < 10; ++r) {
    uint64_t p0 = uint64_t(0xD2511F53) * c[0], p1 = uint64_t(0xCD9E8D57) * c[2];
    c = {uint32_t(p1 >> 32) ^ c[1] ^ k0, uint32_t(p1), uint32_t(p0 >> 32) ^ c[3] ^ k1, uint32_t(p0)};
    k0 += 0x9E3779B9; k1 += 0xBB67AE85;
  }
  return c;
}
Generator& default_generator() { static Generator g; return g; }
void manual_seed(uint64_t s) { default_generator().manual_seed(s); }
}  // namespace precis
