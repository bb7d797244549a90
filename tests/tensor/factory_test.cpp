// Factories: constant fills, arange, random draws (range, moments, seeding, thread independence),
// and tensors from host memory.
#include <cmath>
#include <set>

#include "core/thread_pool.h"
#include "tests/support/tensor_testing.h"

using namespace precis;

namespace {
constexpr DType kAllDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i64, DType::i32, DType::boolean};
constexpr DType kFloatDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16};
}  // namespace

TEST_CASE("zeros ones full empty and the _like variants", "[tensor][factory]") {
  for (DType dt : kAllDTypes) {
    INFO(dtype_name(dt));
    Tensor z = zeros({2, 3}, {.dtype = dt});
    REQUIRE(z.dtype() == dt);
    REQUIRE(z.sizes() == Shape{2, 3});
    REQUIRE(z.is_contiguous());
    REQUIRE(z.device() == Device::cpu());
    REQUIRE(z.to_vector<double>() == std::vector<double>(6, 0.0));
    REQUIRE(ones({4}, {.dtype = dt}).to_vector<double>() == std::vector<double>(4, 1.0));
    REQUIRE(full({2}, 1, {.dtype = dt}).to_vector<double>() == std::vector<double>(2, 1.0));
    REQUIRE(zeros_like(z).dtype() == dt);
    REQUIRE(ones_like(z).to_vector<double>() == std::vector<double>(6, 1.0));
    REQUIRE(empty_like(z).sizes() == z.sizes());
    REQUIRE(full_like(z, true).to_vector<double>() == std::vector<double>(6, 1.0));
  }
  REQUIRE(zeros({}).dim() == 0);
  REQUIRE(zeros({}).numel() == 1);
  REQUIRE(zeros({3, 0, 2}).numel() == 0);
  REQUIRE(empty({5}, {.dtype = DType::f64}).element_size() == 8);
  REQUIRE(zeros({2}).dtype() == DType::f32);  // default dtype

  REQUIRE(full({2}, 2.5).to_vector<float>() == std::vector<float>{2.5f, 2.5f});
  REQUIRE(full({2}, 2.5, {.dtype = DType::i64}).to_vector<int64_t>() == std::vector<int64_t>{2, 2});
  REQUIRE(full({1}, -7, {.dtype = DType::i32}).item<int32_t>() == -7);
  REQUIRE(full({1}, int64_t{1} << 60, {.dtype = DType::i64}).item<int64_t>() == int64_t{1} << 60);  // exact
  REQUIRE(full({1}, 0.1, {.dtype = DType::bf16}).item<float>() == static_cast<float>(BFloat16(0.1f)));
  REQUIRE(std::isnan(full({1}, NAN, {.dtype = DType::f16}).item<float>()));
  REQUIRE(full({1}, 0.5, {.dtype = DType::boolean}).item<bool>());

  PRECIS_REQUIRE_THROWS_WITH_ALL(zeros({2, -1}), ShapeError, "negative dimension size -1");
  PRECIS_REQUIRE_THROWS_WITH_ALL(zeros({int64_t{1} << 40, int64_t{1} << 40}), ShapeError, "64 bits");
}

TEST_CASE("arange", "[tensor][factory]") {
  REQUIRE(arange(5.0).to_vector<float>() == std::vector<float>{0, 1, 2, 3, 4});
  REQUIRE(arange(5.0).dtype() == DType::f32);
  REQUIRE(arange(2.0, 5.0).to_vector<float>() == std::vector<float>{2, 3, 4});
  REQUIRE(arange(0.0, 1.0, 0.25).to_vector<float>() == std::vector<float>{0, 0.25f, 0.5f, 0.75f});
  REQUIRE(arange(0.0, 1.0, 0.3).numel() == 4);  // ceil((end - start) / step), as in PyTorch
  REQUIRE(arange(5.0, 0.0, -1.5).to_vector<float>() == std::vector<float>{5, 3.5f, 2, 0.5f});
  REQUIRE(arange(-3.0, -1.0).to_vector<float>() == std::vector<float>{-3, -2});
  REQUIRE(arange(3.0, {.dtype = DType::i64}).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2});
  REQUIRE(arange(10.0, 0.0, -3.0, {.dtype = DType::i32}).to_vector<int32_t>() == std::vector<int32_t>{10, 7, 4, 1});
  REQUIRE(arange(3.0, {.dtype = DType::f64}).dtype() == DType::f64);
  // Empty ranges.
  REQUIRE(arange(0.0).numel() == 0);
  REQUIRE(arange(0.0).sizes() == Shape{0});
  REQUIRE(arange(5.0, 2.0).numel() == 0);
  REQUIRE(arange(2.0, 5.0, -1.0).numel() == 0);
  PRECIS_REQUIRE_THROWS_WITH_ALL(arange(0.0, 5.0, 0.0), ValueError, "arange", "step");
  PRECIS_REQUIRE_THROWS_WITH_ALL(arange(0.0, INFINITY), ValueError, "arange", "finite");
  PRECIS_REQUIRE_THROWS_WITH_ALL(arange(NAN), ValueError, "finite");
}

TEST_CASE("rand is uniform in the unit interval for every floating dtype", "[tensor][factory][random]") {
  for (DType dt : kFloatDTypes) {
    INFO(dtype_name(dt));
    Generator g(42);
    Tensor r = rand({100000}, {.dtype = dt}, &g);
    REQUIRE(r.dtype() == dt);
    const std::vector<double> v = r.to_vector<double>();
    double sum = 0, sq = 0, lo = 1, hi = 0;
    for (double x : v) {
      sum += x;
      sq += x * x;
      lo = std::min(lo, x);
      hi = std::max(hi, x);
    }
    REQUIRE(lo >= 0.0);
    REQUIRE(hi < 1.0);  // never 1, even after rounding to a low-precision dtype
    const double mean = sum / v.size(), var = sq / v.size() - mean * mean;
    REQUIRE(std::abs(mean - 0.5) < 0.01);          // sd of the mean ~ 0.0009
    REQUIRE(std::abs(var - 1.0 / 12.0) < 0.005);   // 1/12 = 0.0833
    // Each tenth of [0, 1) gets its share.
    std::vector<int> bins(10, 0);
    for (double x : v) ++bins[static_cast<int>(x * 10)];
    for (int b : bins) REQUIRE(std::abs(b - 10000) < 600);
  }
  PRECIS_REQUIRE_THROWS_WITH_ALL(rand({2}, {.dtype = DType::i64}), DTypeError, "rand", "i64");
}

TEST_CASE("randn has mean 0 and standard deviation 1", "[tensor][factory][random]") {
  for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
    INFO(dtype_name(dt));
    Generator g(7);
    const std::vector<double> v = randn({100000}, {.dtype = dt}, &g).to_vector<double>();
    double sum = 0, sq = 0;
    int beyond3 = 0;
    for (double x : v) {
      REQUIRE(std::isfinite(x));
      sum += x;
      sq += x * x;
      beyond3 += std::abs(x) > 3.0;
    }
    const double mean = sum / v.size(), sd = std::sqrt(sq / v.size() - mean * mean);
    REQUIRE(std::abs(mean) < 0.015);      // sd of the mean ~ 0.003
    REQUIRE(std::abs(sd - 1.0) < 0.015);
    REQUIRE(beyond3 > 180);               // P(|x| > 3) = 0.27%: ~270 of 1e5
    REQUIRE(beyond3 < 370);
  }
  PRECIS_REQUIRE_THROWS_WITH_ALL(randn({2}, {.dtype = DType::boolean}), DTypeError, "randn", "bool");
}

TEST_CASE("randint draws every value from low to high-1 and nothing else", "[tensor][factory][random]") {
  Generator g(3);
  Tensor r = randint(-3, 4, {20000}, {.dtype = DType::i64}, &g);
  REQUIRE(r.dtype() == DType::i64);
  std::vector<int> counts(7, 0);
  for (int64_t x : r.to_vector<int64_t>()) {
    REQUIRE(x >= -3);
    REQUIRE(x < 4);
    ++counts[x + 3];
  }
  for (int c : counts) REQUIRE(std::abs(c - 20000 / 7) < 300);
  REQUIRE(randint(0, 1, {50}).to_vector<int64_t>() == std::vector<int64_t>(50, 0));
  REQUIRE(randint(0, 10, {3}, {.dtype = DType::i32}).dtype() == DType::i32);
  const int64_t big = int64_t{1} << 40;
  for (int64_t x : randint(big, big + 5, {100}, {.dtype = DType::i64}, &g).to_vector<int64_t>()) {
    REQUIRE(x >= big);
    REQUIRE(x < big + 5);
  }
  PRECIS_REQUIRE_THROWS_WITH_ALL(randint(5, 5, {2}), ValueError, "randint", "high (5)", "low (5)");
}

TEST_CASE("random draws are reproducible from a seed", "[tensor][factory][random]") {
  Generator a(123), b(123), c(124);
  const std::vector<float> x = rand({1000}, {}, &a).to_vector<float>();
  REQUIRE(x == rand({1000}, {}, &b).to_vector<float>());
  REQUIRE(x != rand({1000}, {}, &c).to_vector<float>());
  // The stream advances: the next draw differs, and an equal generator gives the same next draw.
  const std::vector<float> y = rand({1000}, {}, &a).to_vector<float>();
  REQUIRE(x != y);
  REQUIRE(y == rand({1000}, {}, &b).to_vector<float>());
  REQUIRE(a.offset() == b.offset());

  // The default generator follows manual_seed.
  manual_seed(99);
  const std::vector<double> n1 = randn({257}, {.dtype = DType::f64}).to_vector<double>();
  const std::vector<int64_t> i1 = randint(0, 1000, {31}).to_vector<int64_t>();
  manual_seed(99);
  REQUIRE(n1 == randn({257}, {.dtype = DType::f64}).to_vector<double>());
  REQUIRE(i1 == randint(0, 1000, {31}).to_vector<int64_t>());

  // set_state restores a position in the stream (checkpointing).
  Generator g(5);
  (void)rand({10}, {}, &g);
  const uint64_t seed = g.seed(), offset = g.offset();
  const std::vector<float> next = rand({64}, {}, &g).to_vector<float>();
  Generator h;
  h.set_state(seed, offset);
  REQUIRE(rand({64}, {}, &h).to_vector<float>() == next);

  // A dtype is a rounding of the same draw: bf16 values are f32 values rounded down to 8 bits.
  Generator p(11), q(11);
  const std::vector<float> f = rand({100}, {.dtype = DType::f64}, &p).to_vector<float>();
  const std::vector<float> l = rand({100}, {.dtype = DType::bf16}, &q).to_vector<float>();
  for (size_t i = 0; i < f.size(); ++i) REQUIRE(std::abs(f[i] - l[i]) < 1.0f / 256);
}

TEST_CASE("random values do not depend on the thread count", "[tensor][factory][random]") {
  const int saved = get_num_threads();
  std::vector<std::vector<double>> runs;
  for (int threads : {1, 2, 3, 8}) {
    set_num_threads(threads);
    Generator g(2024);
    // Large enough to be split across threads; odd so the last block is partial.
    std::vector<double> v = rand({300001}, {.dtype = DType::f64}, &g).to_vector<double>();
    const std::vector<double> n = randn({100003}, {.dtype = DType::f64}, &g).to_vector<double>();
    v.insert(v.end(), n.begin(), n.end());
    runs.push_back(std::move(v));
  }
  set_num_threads(saved);
  for (size_t i = 1; i < runs.size(); ++i) REQUIRE(runs[i] == runs[0]);
}

TEST_CASE("from_vector from_blob and scalar_tensor", "[tensor][factory]") {
  Tensor a = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  REQUIRE(a.dtype() == DType::f32);
  REQUIRE(a.sizes() == Shape{2, 3});
  REQUIRE(a.to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});
  REQUIRE(from_vector<double>({1.5}).dtype() == DType::f64);
  REQUIRE(from_vector<int64_t>({1}).dtype() == DType::i64);
  REQUIRE(from_vector<int32_t>({1}).dtype() == DType::i32);
  REQUIRE(from_vector<bool>({true, false}).to_vector<bool>() == std::vector<bool>{true, false});
  REQUIRE(from_vector<Half>({Half(1.5f)}).dtype() == DType::f16);
  REQUIRE(from_vector<BFloat16>({BFloat16(2.0f)}).item<float>() == 2.0f);
  // dtype conversion on the way in.
  REQUIRE(from_vector<double>({1.7, -2.7}, {2}, {.dtype = DType::i32}).to_vector<int32_t>() ==
          std::vector<int32_t>{1, -2});  // truncation toward zero, as a C cast / PyTorch
  REQUIRE(from_vector<int64_t>({0, 3}, {2}, {.dtype = DType::boolean}).to_vector<bool>() ==
          std::vector<bool>{false, true});
  REQUIRE(from_vector<float>({0.1f}, {1}, {.dtype = DType::f64}).item<double>() == static_cast<double>(0.1f));
  REQUIRE(from_vector<float>({1, 2}, {2}, {.dtype = DType::f16}).dtype() == DType::f16);
  REQUIRE(from_vector<float>({3}, {}).dim() == 0);
  PRECIS_REQUIRE_THROWS_WITH_ALL(from_vector<float>({1, 2, 3}, {2, 2}), ShapeError, "from_vector", "3 values",
                                 "[2, 2]");

  // from_blob wraps without copying: writes on either side are visible on the other.
  float buf[6] = {0, 1, 2, 3, 4, 5};
  Tensor b = from_blob(buf, {3, 2}, DType::f32);
  REQUIRE(b.data_ptr() == buf);
  REQUIRE(b.to_vector<float>() == std::vector<float>{0, 1, 2, 3, 4, 5});
  buf[5] = 50;
  REQUIRE(b.select(0, 2).to_vector<float>() == std::vector<float>{4, 50});
  b.t().select(0, 0).fill_(-1.0);
  REQUIRE(buf[0] == -1.0f);
  REQUIRE(buf[2] == -1.0f);
  REQUIRE(buf[4] == -1.0f);

  Tensor s = scalar_tensor(2.5);
  REQUIRE(s.dim() == 0);
  REQUIRE(s.numel() == 1);
  REQUIRE(s.dtype() == DType::f32);
  REQUIRE(s.item<float>() == 2.5f);
  REQUIRE(scalar_tensor(int64_t{1} << 62, {.dtype = DType::i64}).item<int64_t>() == int64_t{1} << 62);
  REQUIRE(scalar_tensor(true, {.dtype = DType::boolean}).item<bool>());
  REQUIRE(scalar_tensor(3, {.dtype = DType::f64}).item<double>() == 3.0);
}
