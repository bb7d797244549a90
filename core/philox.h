#pragma once
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11) as inline
// host/device code: the one implementation behind the CPU generator (core/rng.h) and the CUDA
// kernels that draw random numbers (ops/cuda/dropout.cu), so a mask drawn on either backend from
// the same (seed, counter) is the same, and the host tests of the generator test the device's too.
// Plain structs only (no std::array), so nvcc compiles it without relaxed-constexpr flags.
#include <cstdint>

#include "core/opmath.h"

namespace precis {

/// The four 32-bit outputs of one Philox block.
struct PhiloxBlock {
  uint32_t v[4];
};

/// Philox4x32 with 10 rounds of the 128-bit counter (c0 lowest) under the 64-bit key.
PRECIS_HD_INLINE PhiloxBlock philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint64_t key) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u;  // golden ratio
  constexpr uint32_t kW1 = 0xBB67AE85u;  // sqrt(3) - 1
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {  // the key schedule advances between rounds, not before the first
      k0 += kW0;
      k1 += kW1;
    }
    const uint64_t p0 = uint64_t{kM0} * c0;
    const uint64_t p1 = uint64_t{kM1} * c2;
    const auto hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const auto hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    const uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
  }
  return {{c0, c1, c2, c3}};
}

/// Block `index` of the Philox stream of `seed`: the counter is (index low, index high, 0, 0).
/// Generator::block (core/rng.h) is this function.
PRECIS_HD_INLINE PhiloxBlock philox_stream_block(uint64_t seed, uint64_t index) {
  return philox4x32_10(static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), 0u, 0u, seed);
}

}  // namespace precis
