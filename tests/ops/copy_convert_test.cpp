// The copy kernel's f32 <-> f16/bf16 conversions (ops/cpu/copy.cpp): contiguous rows take the
// vectorised bulk conversions of core/half.h (AVX-512-BF16's vcvtne2ps2bf16 where the CPU has
// it), strided rows the scalar conversion element by element. Both must give the scalar
// conversion's bits, round-to-nearest-even ties, NaN payloads, subnormals and overflow included,
// for any size, any start alignment and any thread count, so that autocast casts do not depend
// on a tensor's layout. (tests/core/half_test.cpp checks the bulk functions themselves per SIMD
// level; this checks the kernel's use of them: chunking, tails, offsets.)
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "core/half.h"
#include "core/thread_pool.h"
#include "tensor/factory.h"

using namespace precis;

namespace {

/// f32 bit patterns that exercise the conversions: specials, ties at the bf16 and f16 rounding
/// points (even and odd), f32 and f16 subnormals, f16 overflow, NaNs with payloads (quiet and
/// signalling), then a spread of pseudo-random patterns over every exponent.
std::vector<float> float_patterns(size_t n) {
  const uint32_t special[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u,
                              0x7f800001u, 0x7fa5a5a5u, 0xff812345u, 0x00000001u, 0x807fffffu, 0x00400000u,
                              0x3f808000u, 0x3f818000u, 0x3f807fffu, 0x3f808001u, 0x7f7fffffu, 0x7f7f8000u,
                              0x477ff000u, 0x477fefffu, 0x47800000u, 0x33800000u, 0x33000000u, 0x387fc000u,
                              0x3f801000u, 0x3f803000u, 0xc2f71234u, 0x0080ffffu};
  std::vector<float> v(n);
  uint32_t x = 0x12345678u;
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    if (i < std::size(special)) {
      bits = special[i];
    } else {
      x = x * 1664525u + 1013904223u;
      bits = x;
      if (i % 7 == 0) bits = (bits & 0xffff0000u) | 0x8000u;  // a bf16 tie
    }
    std::memcpy(&v[i], &bits, 4);
  }
  return v;
}

/// `values` in a tensor whose first element sits one element into its storage (not aligned).
template <typename T>
Tensor unaligned(const std::vector<T>& values) {
  std::vector<T> padded(values.size() + 1);
  std::copy(values.begin(), values.end(), padded.begin() + 1);
  const Tensor t = from_vector<T>(padded).narrow(0, 1, static_cast<int64_t>(values.size()));
  REQUIRE(t.is_contiguous());
  return t;
}

/// The same values as a non-contiguous view (every other element of a buffer twice as long).
template <typename T>
Tensor strided(const std::vector<T>& values) {
  std::vector<T> twice(values.size() * 2);
  for (size_t i = 0; i < values.size(); ++i) twice[2 * i] = values[i];
  const Tensor t = from_vector<T>(twice).view({static_cast<int64_t>(values.size()), 2}).select(1, 0);
  REQUIRE((values.size() == 1 || !t.is_contiguous()));  // one element is contiguous at any stride
  return t;
}

/// The 16-bit encodings of a CPU f16/bf16 tensor.
std::vector<uint16_t> bits16(const Tensor& t) {
  const Tensor c = t.contiguous();
  std::vector<uint16_t> b(static_cast<size_t>(c.numel()));
  std::memcpy(b.data(), c.data_ptr(), b.size() * 2);
  return b;
}

std::vector<uint32_t> bits32(const Tensor& t) {
  const std::vector<float> v = t.contiguous().to_vector<float>();
  std::vector<uint32_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * 4);
  return b;
}

struct ThreadsGuard {
  int saved = get_num_threads();
  ~ThreadsGuard() { set_num_threads(saved); }
};

// 1 .. 33: below, at and around one 16- or 32-lane vector; 1000: many vectors and a tail;
// 70001: more than the parallel grain (two chunks at two threads), odd tail.
const size_t kSizes[] = {1, 15, 16, 17, 31, 33, 1000, 70001};

template <typename Low>
void check_narrowing(DType low) {
  for (size_t n : kSizes) {
    const std::vector<float> src = float_patterns(n);
    std::vector<uint16_t> want(n);
    for (size_t i = 0; i < n; ++i) want[i] = Low(src[i]).bits;  // the scalar conversion
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      INFO(dtype_name(low) << ", " << n << " elements, " << threads << " threads");
      CHECK(bits16(unaligned(src).to(low)) == want);
      CHECK(bits16(from_vector<float>(src).to(low)) == want);
      CHECK(bits16(strided(src).to(low)) == want);
    }
  }
}

template <typename Low>
void check_widening(DType low) {
  for (size_t n : kSizes) {
    // Every 16-bit pattern appears (NaNs with payloads, subnormals, infinities), cycled.
    std::vector<Low> src(n);
    for (size_t i = 0; i < n; ++i) src[i] = Low::from_bits(static_cast<uint16_t>(i * 40503u + 7u));
    std::vector<uint32_t> want(n);
    for (size_t i = 0; i < n; ++i) {
      const float f = static_cast<float>(src[i]);
      std::memcpy(&want[i], &f, 4);
    }
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      INFO(dtype_name(low) << " -> f32, " << n << " elements, " << threads << " threads");
      CHECK(bits32(unaligned(src).to(DType::f32)) == want);
      CHECK(bits32(strided(src).to(DType::f32)) == want);
    }
  }
}

}  // namespace

TEST_CASE("copy: f32 -> bf16/f16 gives the scalar conversion's bits, any layout, size and thread count",
          "[ops][copy]") {
  ThreadsGuard guard;
  check_narrowing<BFloat16>(DType::bf16);
  check_narrowing<Half>(DType::f16);
}

TEST_CASE("copy: bf16/f16 -> f32 widens every bit pattern exactly, any layout, size and thread count", "[ops][copy]") {
  ThreadsGuard guard;
  check_widening<BFloat16>(DType::bf16);
  check_widening<Half>(DType::f16);
}
