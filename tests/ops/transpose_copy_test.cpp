// The blocked transposing copy (ops/cpu/transpose.h) behind x.t().contiguous() and NCHW -> NHWC
// copies of 4- and 2-byte dtypes: every element lands where index arithmetic puts it, for sizes
// that are and are not multiples of the 8x8 block and of the row strip, for batched transposes,
// and for the layouts the kernel leaves to the general loop.
#include <catch2/catch.hpp>

#include "ops/functional.h"
#include "tensor/factory.h"
#include "tests/support/tensor_testing.h"

using namespace precis;

namespace {

// Values (i * 7919) mod m: exact in `dt` (m keeps them within the integers bf16 / f16 hold) and
// scrambled, so that a misplaced element shows.
std::vector<double> scrambled(int64_t n, DType dt) {
  const int64_t m = dt == DType::bf16 ? 251 : dt == DType::f16 ? 2039 : 1000003;
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<double>((i * 7919) % m);
  return v;
}

constexpr DType kDTypes[] = {DType::f32, DType::i32, DType::f16, DType::bf16, DType::f64};

}  // namespace

TEST_CASE("transposing copies put every element in place", "[ops][copy][layout]") {
  // (rows, cols) of the result: tiny, block multiples, ragged edges, more than one row strip.
  const std::pair<int64_t, int64_t> shapes[] = {{1, 9},   {9, 1},   {7, 7},    {8, 8},   {8, 16},
                                                {13, 29}, {64, 64}, {129, 67}, {300, 257}, {1030, 20}};
  for (DType dt : kDTypes)
    for (auto [rows, cols] : shapes) {
      CAPTURE(dtype_name(dt), rows, cols);
      const std::vector<double> v = scrambled(rows * cols, dt);
      const Tensor m = from_vector<double>(v, {cols, rows}).to(dt);  // m[c][r] = v[c * rows + r]
      const Tensor out = m.t().contiguous();
      REQUIRE(out.is_contiguous());
      REQUIRE(out.dtype() == dt);
      const std::vector<double> got = out.to_vector<double>();
      int64_t bad = 0;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) bad += got[static_cast<size_t>(r * cols + c)] != v[static_cast<size_t>(c * rows + r)];
      CHECK(bad == 0);
    }
}

TEST_CASE("NCHW to NHWC and batched transposes put every element in place", "[ops][copy][layout]") {
  for (DType dt : kDTypes) {
    CAPTURE(dtype_name(dt));
    const int64_t n = 3, c = 19, h = 5, w = 7;
    const std::vector<double> v = scrambled(n * c * h * w, dt);
    const Tensor x = from_vector<double>(v, {n, c, h, w}).to(dt);
    const std::vector<double> got = x.permute({0, 2, 3, 1}).contiguous().to_vector<double>();
    int64_t bad = 0;
    for (int64_t in = 0; in < n; ++in)
      for (int64_t ih = 0; ih < h; ++ih)
        for (int64_t iw = 0; iw < w; ++iw)
          for (int64_t ic = 0; ic < c; ++ic)
            bad += got[static_cast<size_t>(((in * h + ih) * w + iw) * c + ic)] !=
                   v[static_cast<size_t>(((in * c + ic) * h + ih) * w + iw)];
    CHECK(bad == 0);
    // A transpose of the two middle dims of a 3-D tensor: (B, R, C) from (B, C, R).
    const std::vector<double> u = scrambled(4 * 33 * 17, dt);
    const Tensor y = from_vector<double>(u, {4, 17, 33}).to(dt).transpose(1, 2);
    const std::vector<double> gy = y.contiguous().to_vector<double>();
    bad = 0;
    for (int64_t b = 0; b < 4; ++b)
      for (int64_t r = 0; r < 33; ++r)
        for (int64_t k = 0; k < 17; ++k) bad += gy[static_cast<size_t>((b * 33 + r) * 17 + k)] != u[static_cast<size_t>((b * 17 + k) * 33 + r)];
    CHECK(bad == 0);
  }
}

TEST_CASE("copies into transposed destinations and strided sources stay correct", "[ops][copy][layout]") {
  // copy_ into a transposed destination (the kernel walks dst in memory order: then src is the
  // transposed one), a source with gaps (every other row), and a dtype-converting transpose
  // (the general loop).
  const std::vector<double> v = scrambled(40 * 24, DType::f32);
  const Tensor src = from_vector<double>(v, {40, 24}).to(DType::f32);
  Tensor dst = zeros({24, 40}).t();
  dst.copy_(src);
  CHECK(dst.contiguous().to_vector<double>() == v);
  const Tensor gappy = from_vector<double>(scrambled(80 * 24, DType::f32), {80, 24}).slice(0, 0, 80, 2).t();
  CHECK(gappy.contiguous().to_vector<double>() == gappy.to(DType::f64).contiguous().to_vector<double>());
  const Tensor conv = src.t().to(DType::f64);
  const std::vector<double> gc = conv.contiguous().to_vector<double>();
  int64_t bad = 0;
  for (int64_t r = 0; r < 24; ++r)
    for (int64_t c = 0; c < 40; ++c) bad += gc[static_cast<size_t>(r * 40 + c)] != v[static_cast<size_t>(c * 24 + r)];
  CHECK(bad == 0);
}
