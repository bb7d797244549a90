// TEMPORARY scalar versions (replaced by the core-impl branch).
#include "core/half.h"
#include <cmath>
namespace precis::detail {
float half_bits_to_float(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  float f;
  if (exp == 0) { f = std::ldexp(static_cast<float>(man), -24); return sign ? -f : f; }
  uint32_t u = exp == 31 ? (sign | 0x7f800000u | (man << 13)) : (sign | ((exp + 112) << 23) | (man << 13));
  std::memcpy(&f, &u, 4); return f;
}
uint16_t float_to_half_bits(float f) {
  uint32_t u; std::memcpy(&u, &f, 4);
  uint16_t sign = (u >> 16) & 0x8000; uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00;
  if (a >= 0x477ff000u) return sign | 0x7c00;
  if (a < 0x38800000u) { float v = std::fabs(f) * 16777216.0f; return sign | static_cast<uint16_t>(std::nearbyint(v)); }
  uint32_t r = a - 0x38000000u; r += 0xfff + ((r >> 13) & 1); return sign | static_cast<uint16_t>(r >> 13);
}
}  // namespace precis::detail
namespace precis {
void float_to_half(const float* s, Half* d, int64_t n) { for (int64_t i = 0; i < n; ++i) d[i] = Half(s[i]); }
void half_to_float(const Half* s, float* d, int64_t n) { for (int64_t i = 0; i < n; ++i) d[i] = s[i]; }
void float_to_bfloat16(const float* s, BFloat16* d, int64_t n) { for (int64_t i = 0; i < n; ++i) d[i] = BFloat16(s[i]); }
void bfloat16_to_float(const BFloat16* s, float* d, int64_t n) { for (int64_t i = 0; i < n; ++i) d[i] = s[i]; }
}  // namespace precis
