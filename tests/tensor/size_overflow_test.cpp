// Sizes from users and files that overflow or that no memory can hold (issue 13): each used to
// wrap around (a tensor of 2^62 floats on 0 bytes), write through a null pointer, or be undefined
// behaviour; each now raises a typed error naming the request.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <set>
#include <string>

#include "tensor/json.h"
#include "tensor/safetensors.h"
#include "tests/support/tensor_testing.h"

using namespace precis;

namespace {
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
}  // namespace

TEST_CASE("factories refuse byte counts past 64 bits with OutOfMemoryError", "[tensor][factory][checked]") {
  // 2^62 f32 = 2^64 bytes, which wrapped to a 0-byte storage.
  PRECIS_REQUIRE_THROWS_WITH_ALL(empty({int64_t{1} << 62}), OutOfMemoryError, "empty", "[4611686018427387904]", "f32",
                                 "cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(zeros({int64_t{1} << 62}), OutOfMemoryError, "[4611686018427387904]");
  PRECIS_REQUIRE_THROWS_WITH_ALL(ones({int64_t{1} << 61}, {.dtype = DType::f64}), OutOfMemoryError, "f64");
  try {
    (void)randn({int64_t{1} << 31, int64_t{1} << 31});
    FAIL("no exception");
  } catch (const OutOfMemoryError& e) {
    CHECK(e.requested_bytes() == UINT64_MAX);  // 2^62 f64 draws: 2^65 bytes
    CHECK(e.device() == "cpu");
  }
  // Representable but more than any machine has: the allocator's own OutOfMemoryError.
  try {
    (void)empty({int64_t{1} << 60});
    FAIL("no exception");
  } catch (const OutOfMemoryError& e) {
    CHECK(e.requested_bytes() == uint64_t{1} << 62);
  }
  PRECIS_REQUIRE_THROWS_WITH_ALL(full({int64_t{1} << 40, int64_t{1} << 40}, 1.0), ShapeError, "64 bits");
}

TEST_CASE("a failed random draw leaves the generator where it was", "[tensor][factory][checked]") {
  Generator g(7);
  REQUIRE_THROWS_AS(rand({int64_t{1} << 61}, {}, &g), OutOfMemoryError);
  Generator fresh(7);
  REQUIRE(rand({4}, {}, &g).to_vector<float>() == rand({4}, {}, &fresh).to_vector<float>());
}

TEST_CASE("arange and randint with extreme arguments", "[tensor][factory][checked]") {
  // (end - start) / step past int64 was an undefined double-to-int64 conversion.
  PRECIS_REQUIRE_THROWS_WITH_ALL(arange(0.0, 1e30), ValueError, "arange", "more than any tensor can hold");
  PRECIS_REQUIRE_THROWS_WITH_ALL(arange(-1e308, 1e308, 1.0), ValueError, "arange");
  // Within int64 but not within memory: OutOfMemoryError, not a bare std::bad_alloc.
  REQUIRE_THROWS_AS(arange(0.0, 1e17), OutOfMemoryError);
  // high - low overflowed int64, and bounds past 2^53 rounded in double (kMax - 3 became 2^63,
  // which no int64 holds).
  const std::vector<int64_t> wide = randint(kMin, kMax, {1000}).to_vector<int64_t>();
  REQUIRE(*std::min_element(wide.begin(), wide.end()) < kMin / 2);  // each side: probability 2^-1000 to fail
  REQUIRE(*std::max_element(wide.begin(), wide.end()) > kMax / 2);
  std::set<int64_t> seen;
  for (int64_t v : randint(kMax - 3, kMax, {200}).to_vector<int64_t>()) {
    REQUIRE(v >= kMax - 3);
    REQUIRE(v < kMax);
    seen.insert(v);
  }
  REQUIRE(seen.size() == 3);
  for (int64_t v : randint(kMin, kMin + 2, {100}).to_vector<int64_t>()) REQUIRE((v == kMin || v == kMin + 1));
}

TEST_CASE("from_blob refuses a shape whose bytes do not fit", "[tensor][factory][checked]") {
  float x = 0;
  PRECIS_REQUIRE_THROWS_WITH_ALL(from_blob(&x, {int64_t{1} << 62}, DType::f32), ShapeError, "from_blob",
                                 "[4611686018427387904]");
}

TEST_CASE("views with sizes whose product overflows int64", "[tensor][view][checked]") {
  Tensor x = zeros({4});
  // infer_size multiplied the requested sizes unchecked: INT64_MAX * 2 wrapped to -2.
  PRECIS_REQUIRE_THROWS_WITH_ALL(x.reshape({kMax, 2}), ShapeError, "reshape", "overflows int64");
  PRECIS_REQUIRE_THROWS_WITH_ALL(x.view({kMax, kMax, -1}), ShapeError, "view", "overflows int64");
  PRECIS_REQUIRE_THROWS_WITH_ALL(x.reshape({int64_t{1} << 32, int64_t{1} << 32, 0}), ShapeError, "overflows int64");
  // A shape with no elements whose strides would overflow.
  PRECIS_REQUIRE_THROWS_WITH_ALL(zeros({0, int64_t{1} << 40, int64_t{1} << 40}), ShapeError, "64 bits");
  PRECIS_REQUIRE_THROWS_WITH_ALL(zeros({0}).reshape({0, int64_t{1} << 40, int64_t{1} << 40}), ShapeError, "64 bits");
  // expand to a size whose elements overflow.
  PRECIS_REQUIRE_THROWS_WITH_ALL(zeros({1, 1}).expand({kMax, 2}), ShapeError, "64 bits");
}

TEST_CASE("slice and narrow with bounds near INT64_MAX", "[tensor][view][checked]") {
  Tensor x = arange(10.0);
  // (e - s + step - 1) / step and stride * step overflowed for a huge step.
  Tensor s = x.slice(0, 3, 10, kMax);
  REQUIRE(s.sizes() == Shape{1});
  REQUIRE(s.item<float>() == 3.0f);
  REQUIRE(x.slice(0, 0, kMax, kMax - 1).to_vector<float>() == std::vector<float>{0.0f});
  REQUIRE(x.slice(0, kMin, kMax).numel() == 10);
  REQUIRE(x.slice(0, kMax, kMin).numel() == 0);
  // start + length overflowed in narrow's bounds check.
  PRECIS_REQUIRE_THROWS_WITH_ALL(x.narrow(0, 2, kMax), IndexError, "narrow", "[2, 2 + 9223372036854775807)");
  PRECIS_REQUIRE_THROWS_WITH_ALL(x.narrow(0, kMin, 1), IndexError, "narrow");
  REQUIRE_THROWS_AS(x.select(0, kMin), IndexError);
  REQUIRE_THROWS_AS(x.unsqueeze(kMin), IndexError);
}

namespace {
// A safetensors file of n zero-size tensors (a 6.6 MB header for 100k), and the seconds to load it.
double load_seconds(int n) {
  std::string header = "{";
  for (int i = 0; i < n; ++i) {
    if (i > 0) header += ',';
    header += "\"t" + std::to_string(i) + "\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}";
  }
  header += '}';
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  file += header;
  const auto t0 = std::chrono::steady_clock::now();
  const SafetensorsFile f = from_safetensors_bytes(file);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE(f.tensors.size() == static_cast<size_t>(n));
  REQUIRE(f.tensors.back().first == "t" + std::to_string(n - 1));
  return seconds;
}
}  // namespace

TEST_CASE("a safetensors header of 100k tensors parses in linear time", "[tensor][safetensors][checked]") {
  // Duplicate keys were found by a linear search over the keys so far: 100k tensors took 16.6 s.
  // Linear: 0.5 s in Release on this 2-core machine (1.1 s while other builds ran), about 3x that
  // under ASan. Quadratic: 16.6 s in Release. (A ratio of two sizes was tried and was noisy:
  // 10k tensors fit in cache and 100k do not, so even linear parsing scaled 15-25x.)
  const double seconds = load_seconds(100000);
  INFO("100k tensors loaded in " << seconds << " s");
  CHECK(seconds < 10.0);

  // A duplicate far into a large object is still found (the hash-set path).
  std::string dup = "{";
  for (int i = 0; i < 1000; ++i) dup += "\"k" + std::to_string(i) + "\":1,";
  dup += "\"k500\":2}";
  PRECIS_REQUIRE_THROWS_WITH_ALL(json::parse(dup, "test"), IOError, "duplicate key \"k500\"");
  // And one within the first few keys (the linear path).
  PRECIS_REQUIRE_THROWS_WITH_ALL(json::parse("{\"a\":1,\"b\":2,\"a\":3}", "test"), IOError, "duplicate key \"a\"");
  // Keys decoded from escapes are compared as decoded text on both paths.
  std::string esc = "{";
  for (int i = 0; i < 40; ++i) esc += "\"e" + std::to_string(i) + "\":0,";
  esc += "\"\\u0065\\u0033\":1}";  // "e3"
  PRECIS_REQUIRE_THROWS_WITH_ALL(json::parse(esc, "test"), IOError, "duplicate key \"e3\"");
}
