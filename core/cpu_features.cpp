#include "core/cpu_features.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

#include <cstdint>
#endif

namespace precis {

namespace {

#if defined(__x86_64__) || defined(__i386__)
// CPUID and XCR0 directly: __builtin_cpu_supports("amx-bf16") is unknown to clang 14 (the fuzz
// build), and a feature counts only when the OS saves its registers (XCR0), as for
// __builtin_cpu_supports's AVX-512 bits.
bool detect_native_bf16() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(1, &a, &b, &c, &d) == 0 || (c & (1u << 27)) == 0) return false;  // no OSXSAVE
  unsigned xcr0_lo = 0, xcr0_hi = 0;
  __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  const uint64_t xcr0 = (static_cast<uint64_t>(xcr0_hi) << 32) | xcr0_lo;
  const bool avx512_state = (xcr0 & 0xE6) == 0xE6;         // SSE, AVX, opmask, ZMM upper halves, ZMM16-31
  const bool amx_state = (xcr0 & 0x60000) == 0x60000;      // TILECFG, TILEDATA
  unsigned b7 = 0, d7 = 0;
  if (__get_cpuid_count(7, 0, &a, &b7, &c, &d7) == 0) return false;
  const bool amx_bf16 = amx_state && (d7 & (1u << 22)) != 0 && (d7 & (1u << 24)) != 0;  // AMX-BF16, AMX-TILE
  unsigned a71 = 0;
  const bool avx512_bf16 = avx512_state && (b7 & (1u << 16)) != 0 &&                     // AVX512F
                           __get_cpuid_count(7, 1, &a71, &b, &c, &d) != 0 && (a71 & (1u << 5)) != 0;
  return avx512_bf16 || amx_bf16;
}
#else
bool detect_native_bf16() { return false; }
#endif

}  // namespace

bool cpu_has_native_bf16() {
  static const bool native = detect_native_bf16();
  return native;
}

}  // namespace precis
