// Views: shapes, strides and offsets like PyTorch's, shared storage and version counter, and errors
// that say what to do instead.
#include <numeric>
#include <random>

#include "tests/support/tensor_testing.h"

using namespace precis;

namespace {

// 0, 1, ..., n-1 in f32 with the given shape.
Tensor iota(const Shape& shape) { return arange(static_cast<double>(shape_numel(shape))).view(shape); }

std::vector<float> values(const Tensor& t) { return t.to_vector<float>(); }

bool shares_storage(const Tensor& a, const Tensor& b) { return a.impl()->storage() == b.impl()->storage(); }

// The element at `index` read through sizes/strides/offset (checks the view metadata directly).
float at(const Tensor& t, const Shape& index) {
  int64_t off = 0;
  for (size_t d = 0; d < index.size(); ++d) off += index[d] * t.strides()[d];
  return t.data_ptr<float>()[off];
}

}  // namespace

TEST_CASE("view and reshape", "[tensor][views]") {
  Tensor x = iota({2, 3, 4});
  SECTION("view shares storage and keeps values in row-major order") {
    Tensor v = x.view({6, 4});
    REQUIRE(v.sizes() == Shape{6, 4});
    REQUIRE(v.strides() == Shape{4, 1});
    REQUIRE(shares_storage(v, x));
    REQUIRE(values(v) == values(x));
  }
  SECTION("-1 is inferred") {
    REQUIRE(x.view({-1}).sizes() == Shape{24});
    REQUIRE(x.view({4, -1}).sizes() == Shape{4, 6});
    REQUIRE(x.view({2, -1, 2}).sizes() == Shape{2, 6, 2});
    REQUIRE(x.reshape({-1, 3}).sizes() == Shape{8, 3});
  }
  SECTION("bad sizes") {
    PRECIS_REQUIRE_THROWS_WITH_ALL(x.view({5, -1}), ShapeError, "view", "[5, -1]", "[2, 3, 4] f32 cpu");
    PRECIS_REQUIRE_THROWS_WITH_ALL(x.view({-1, -1}), ShapeError, "only one dimension can be -1");
    PRECIS_REQUIRE_THROWS_WITH_ALL(x.view({5, 5}), ShapeError, "[5, 5]", "24 elements");
    PRECIS_REQUIRE_THROWS_WITH_ALL(x.reshape({-2, 12}), ShapeError, "invalid size -2");
  }
  SECTION("a view that needs a copy is refused with a suggestion; reshape copies") {
    Tensor t = x.transpose(1, 2);  // (2, 4, 3), not contiguous
    PRECIS_REQUIRE_THROWS_WITH_ALL(t.view({2, 12}), ShapeError, "view", "[2, 4, 3] f32 cpu", "strides",
                                   "use reshape()", "contiguous()");
    Tensor r = t.reshape({2, 12});
    REQUIRE_FALSE(shares_storage(r, x));
    REQUIRE(values(r) == values(t.contiguous()));
    // Merging only the untouched outer dim is still a view.
    Tensor ok = t.view({2, 4, 3});
    REQUIRE(shares_storage(ok, x));
    Tensor s = x.slice(2, 0, 3);  // (2, 3, 3), strides (12, 4, 1)
    REQUIRE(s.view({6, 3}).strides() == Shape{4, 1});
    REQUIRE(shares_storage(s.reshape({6, 3}), x));
    REQUIRE_THROWS_AS(s.view({18}), ShapeError);
    REQUIRE_FALSE(shares_storage(s.reshape({18}), x));
    // Every other element at a uniform stride is one chunk: viewable as 1-D.
    Tensor even = x.slice(2, 0, 4, 2);  // (2, 3, 2), strides (12, 4, 2)
    REQUIRE(even.view({12}).strides() == Shape{2});
  }
  SECTION("size-1 dims and 0-d tensors view freely") {
    Tensor s = scalar_tensor(3.0);
    Tensor v = s.view({1, 1});
    REQUIRE(v.sizes() == Shape{1, 1});
    REQUIRE(shares_storage(v, s));
    REQUIRE(v.view({}).dim() == 0);
    REQUIRE(s.reshape({-1}).sizes() == Shape{1});
    REQUIRE(shares_storage(s.reshape({-1}), s));
  }
  SECTION("empty tensors") {
    Tensor e = zeros({0, 3});
    REQUIRE(e.view({3, 0}).sizes() == Shape{3, 0});
    REQUIRE(e.view({0}).numel() == 0);
    PRECIS_REQUIRE_THROWS_WITH_ALL(e.view({-1, 0}), ShapeError, "[-1, 0]");
  }
}

TEST_CASE("flatten", "[tensor][views]") {
  Tensor x = iota({2, 3, 4, 5});
  REQUIRE(x.flatten().sizes() == Shape{120});
  REQUIRE(x.flatten(1).sizes() == Shape{2, 60});
  REQUIRE(x.flatten(1, 2).sizes() == Shape{2, 12, 5});
  REQUIRE(x.flatten(-2, -1).sizes() == Shape{2, 3, 20});
  REQUIRE(x.flatten(2, 2).sizes() == Shape{2, 3, 4, 5});
  REQUIRE(shares_storage(x.flatten(), x));
  Tensor s = scalar_tensor(1.0).flatten();
  REQUIRE(s.sizes() == Shape{1});
  PRECIS_REQUIRE_THROWS_WITH_ALL(x.flatten(2, 1), ValueError, "start_dim", "end_dim");
  PRECIS_REQUIRE_THROWS_WITH_ALL(x.flatten(4), IndexError, "flatten", "dimension 4", "[2, 3, 4, 5] f32 cpu");
  // Non-contiguous input: flatten copies (like reshape).
  REQUIRE(values(x.transpose(0, 3).flatten()) == values(x.transpose(0, 3).contiguous()));
}

TEST_CASE("transpose and permute and t", "[tensor][views]") {
  Tensor x = iota({2, 3, 4});
  Tensor t = x.transpose(0, 2);
  REQUIRE(t.sizes() == Shape{4, 3, 2});
  REQUIRE(t.strides() == Shape{1, 4, 12});
  REQUIRE_FALSE(t.is_contiguous());
  REQUIRE(shares_storage(t, x));
  REQUIRE(at(t, {3, 1, 1}) == at(x, {1, 1, 3}));
  REQUIRE(x.transpose(-1, 0).sizes() == Shape{4, 3, 2});
  REQUIRE(x.transpose(1, 1).is_contiguous());

  Tensor p = x.permute({1, 2, 0});
  REQUIRE(p.sizes() == Shape{3, 4, 2});
  REQUIRE(p.strides() == Shape{4, 1, 12});
  REQUIRE(values(p.contiguous())[1] == 12.0f);  // p[0][0][1] = x[1][0][0]
  REQUIRE(x.permute({-1, 0, 1}).sizes() == Shape{4, 2, 3});
  PRECIS_REQUIRE_THROWS_WITH_ALL(x.permute({0, 1}), ShapeError, "permute", "[2, 3, 4] f32 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(x.permute({0, 1, 1}), ShapeError, "permute", "repeated");
  PRECIS_REQUIRE_THROWS_WITH_ALL(x.permute({0, 1, 3}), IndexError, "permute", "dimension 3");

  Tensor m = iota({2, 3});
  REQUIRE(m.t().sizes() == Shape{3, 2});
  REQUIRE(values(m.t().contiguous()) == std::vector<float>{0, 3, 1, 4, 2, 5});
  REQUIRE(m.t().t().is_contiguous());
  REQUIRE(iota({5}).t().sizes() == Shape{5});
  REQUIRE(scalar_tensor(1.0).t().dim() == 0);
  PRECIS_REQUIRE_THROWS_WITH_ALL(x.t(), ShapeError, "t:", "[2, 3, 4]", "transpose(dim0, dim1)");
}

TEST_CASE("slice with steps and PyTorch-style bounds", "[tensor][views]") {
  Tensor x = iota({10});
  auto sl = [&](int64_t start, int64_t end, int64_t step = 1) { return values(x.slice(0, start, end, step)); };
  REQUIRE(sl(2, 5) == std::vector<float>{2, 3, 4});
  REQUIRE(sl(1, 10, 3) == std::vector<float>{1, 4, 7});
  REQUIRE(sl(0, 10, 4) == std::vector<float>{0, 4, 8});
  REQUIRE(sl(-3, 10) == std::vector<float>{7, 8, 9});     // negative start counts from the end
  REQUIRE(sl(0, -8) == std::vector<float>{0, 1});         // negative end too
  REQUIRE(sl(-100, 2) == std::vector<float>{0, 1});       // clamped to the start
  REQUIRE(sl(8, 100) == std::vector<float>{8, 9});        // clamped to the end
  REQUIRE(sl(5, 3).empty());                              // empty, not an error
  REQUIRE(sl(100, 200).empty());
  REQUIRE(x.slice(0, 5, 3).sizes() == Shape{0});
  REQUIRE(sl(0, INT64_MAX, 5) == std::vector<float>{0, 5});
  PRECIS_REQUIRE_THROWS_WITH_ALL(x.slice(0, 0, 5, 0), ValueError, "step must be positive");
  PRECIS_REQUIRE_THROWS_WITH_ALL(x.slice(0, 0, 5, -1), ValueError, "step");
  PRECIS_REQUIRE_THROWS_WITH_ALL(scalar_tensor(1.0).slice(0, 0, 1), ShapeError, "0-d");

  Tensor m = iota({4, 6});
  Tensor s = m.slice(1, 1, 6, 2);  // columns 1, 3, 5
  REQUIRE(s.sizes() == Shape{4, 3});
  REQUIRE(s.strides() == Shape{6, 2});
  REQUIRE(s.storage_offset() == 1);
  REQUIRE_FALSE(s.is_contiguous());
  REQUIRE(values(s.select(0, 2)) == std::vector<float>{13, 15, 17});
  Tensor rows = m.slice(-2, 1, 3);  // rows 1, 2: contiguous
  REQUIRE(rows.is_contiguous());
  REQUIRE(rows.storage_offset() == 6);
  // Slicing a slice composes offsets and steps.
  REQUIRE(values(iota({20}).slice(0, 2, 20, 2).slice(0, 1, 10, 3)) == std::vector<float>{4, 10, 16});
}

TEST_CASE("narrow and select", "[tensor][views]") {
  Tensor m = iota({3, 4});
  REQUIRE(values(m.narrow(1, 1, 2)) == std::vector<float>{1, 2, 5, 6, 9, 10});
  REQUIRE(m.narrow(0, 3, 0).sizes() == Shape{0, 4});
  REQUIRE(values(m.narrow(1, -2, 2)) == std::vector<float>{2, 3, 6, 7, 10, 11});  // start from the end
  PRECIS_REQUIRE_THROWS_WITH_ALL(m.narrow(1, 3, 2), IndexError, "narrow", "[3, 5)", "[3, 4] f32 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(m.narrow(1, 0, -1), IndexError, "narrow");

  REQUIRE(m.select(0, 1).sizes() == Shape{4});
  REQUIRE(values(m.select(0, 1)) == std::vector<float>{4, 5, 6, 7});
  REQUIRE(values(m.select(1, -1)) == std::vector<float>{3, 7, 11});
  REQUIRE(m.select(1, 2).strides() == Shape{4});
  REQUIRE(shares_storage(m.select(1, 2), m));
  REQUIRE(m.select(0, 2).select(0, 3).item<float>() == 11.0f);
  REQUIRE(m.select(0, 2).select(0, 3).dim() == 0);
  PRECIS_REQUIRE_THROWS_WITH_ALL(m.select(0, 3), IndexError, "select", "index 3", "[3, 4] f32 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(m.select(1, -5), IndexError, "index -5");
  PRECIS_REQUIRE_THROWS_WITH_ALL(m.select(2, 0), IndexError, "select", "dimension 2");
  PRECIS_REQUIRE_THROWS_WITH_ALL(scalar_tensor(1.0).select(0, 0), IndexError, "select", "0-d");
  PRECIS_REQUIRE_THROWS_WITH_ALL(scalar_tensor(1.0).narrow(0, 0, 1), IndexError, "narrow", "0-d");
}

TEST_CASE("expand", "[tensor][views]") {
  Tensor c = iota({3, 1});
  Tensor e = c.expand({2, 3, 4});
  REQUIRE(e.sizes() == Shape{2, 3, 4});
  REQUIRE(e.strides() == Shape{0, 1, 0});
  REQUIRE(shares_storage(e, c));
  REQUIRE_FALSE(e.is_contiguous());
  REQUIRE(values(e.select(0, 1).select(0, 2)) == std::vector<float>{2, 2, 2, 2});
  REQUIRE(c.expand({-1, 5}).sizes() == Shape{3, 5});
  REQUIRE(c.expand({3, 1}).is_same(c));
  REQUIRE(c.expand({3, 0}).numel() == 0);
  REQUIRE(scalar_tensor(7.0).expand({2, 2}).strides() == Shape{0, 0});
  REQUIRE(values(scalar_tensor(7.0).expand({2, 2})) == std::vector<float>{7, 7, 7, 7});
  REQUIRE(c.expand_as(zeros({5, 3, 2})).sizes() == Shape{5, 3, 2});
  // A copy of an expanded tensor materialises the repeats.
  REQUIRE(values(c.expand({3, 2}).contiguous()) == std::vector<float>{0, 0, 1, 1, 2, 2});

  PRECIS_REQUIRE_THROWS_WITH_ALL(c.expand({4, 2}), ShapeError, "expand", "[3, 1] f32 cpu", "(3)", "must match 4");
  PRECIS_REQUIRE_THROWS_WITH_ALL(c.expand({2}), ShapeError, "expand", "fewer dims");
  PRECIS_REQUIRE_THROWS_WITH_ALL(c.expand({-1, 3, 2}), ShapeError, "-1", "new leading dim");
}

TEST_CASE("squeeze and unsqueeze", "[tensor][views]") {
  Tensor x = iota({1, 3, 1, 2});
  REQUIRE(x.squeeze().sizes() == Shape{3, 2});
  REQUIRE(x.squeeze(0).sizes() == Shape{3, 1, 2});
  REQUIRE(x.squeeze(-2).sizes() == Shape{1, 3, 2});
  REQUIRE(x.squeeze(1).sizes() == Shape{1, 3, 1, 2});  // size != 1: unchanged, as in PyTorch
  REQUIRE(shares_storage(x.squeeze(), x));
  REQUIRE(iota({1, 1}).squeeze().dim() == 0);
  REQUIRE(scalar_tensor(2.0).squeeze().dim() == 0);
  REQUIRE(scalar_tensor(2.0).squeeze(0).dim() == 0);
  PRECIS_REQUIRE_THROWS_WITH_ALL(x.squeeze(4), IndexError, "squeeze", "dimension 4");

  Tensor v = iota({3});
  REQUIRE(v.unsqueeze(0).sizes() == Shape{1, 3});
  REQUIRE(v.unsqueeze(1).sizes() == Shape{3, 1});
  REQUIRE(v.unsqueeze(-1).sizes() == Shape{3, 1});
  REQUIRE(v.unsqueeze(-2).sizes() == Shape{1, 3});
  REQUIRE(shares_storage(v.unsqueeze(0), v));
  Tensor s = scalar_tensor(5.0).unsqueeze(0);
  REQUIRE(s.sizes() == Shape{1});
  PRECIS_REQUIRE_THROWS_WITH_ALL(v.unsqueeze(2), IndexError, "unsqueeze", "dimension 2");

  // On non-contiguous and expanded inputs squeeze/unsqueeze stay views.
  Tensor t = iota({3, 1, 4}).transpose(0, 2);  // (4, 1, 3)
  REQUIRE(t.squeeze(1).strides() == Shape{1, 4});
  REQUIRE(shares_storage(t.squeeze(), t));
  Tensor e = iota({3}).expand({2, 3});
  REQUIRE(e.unsqueeze(1).sizes() == Shape{2, 1, 3});
  REQUIRE(shares_storage(e.unsqueeze(1), e));
  REQUIRE(values(e.unsqueeze(1)) == values(e));
}

TEST_CASE("contiguous and is_contiguous", "[tensor][views]") {
  Tensor x = iota({2, 3});
  REQUIRE(x.is_contiguous());
  REQUIRE(x.contiguous().is_same(x));
  Tensor t = x.t();
  REQUIRE_FALSE(t.is_contiguous());
  Tensor c = t.contiguous();
  REQUIRE(c.is_contiguous());
  REQUIRE(c.strides() == Shape{2, 1});
  REQUIRE_FALSE(shares_storage(c, x));
  REQUIRE(values(c) == std::vector<float>{0, 3, 1, 4, 2, 5});

  // Size-1 dims may have any stride; empty tensors are contiguous; offsets do not matter.
  REQUIRE(iota({3, 4}).slice(1, 1, 2).is_contiguous() == false);
  REQUIRE(iota({3, 4}).slice(0, 1, 2).is_contiguous());
  REQUIRE(iota({4, 1}).t().is_contiguous());
  REQUIRE(iota({1, 5}).expand({1, 5}).is_contiguous());
  REQUIRE_FALSE(iota({1, 5}).expand({2, 5}).is_contiguous());
  REQUIRE(zeros({0, 3}).t().is_contiguous());
  REQUIRE(iota({6}).slice(0, 0, 6, 2).is_contiguous() == false);
  REQUIRE(iota({6}).slice(0, 0, 1, 2).is_contiguous());  // one element
  REQUIRE(iota({2, 3, 4}).permute({0, 1, 2}).is_contiguous());
}

TEST_CASE("views share storage and the version counter with their base", "[tensor][views]") {
  Tensor base = zeros({3, 4});
  Tensor col = base.select(1, 2);
  Tensor blk = base.slice(0, 1, 3).slice(1, 0, 2);
  Tensor tr = base.t();
  const uint32_t v0 = base.version();
  col.fill_(7.0);
  REQUIRE(base.version() == v0 + 1);
  REQUIRE(col.version() == base.version());
  REQUIRE(tr.version() == base.version());
  blk.copy_(from_vector<float>({1, 2, 3, 4}, {2, 2}));
  REQUIRE(base.version() == v0 + 2);
  REQUIRE(values(base) == std::vector<float>{0, 0, 7, 0, 1, 2, 7, 0, 3, 4, 7, 0});
  REQUIRE(values(tr.select(0, 2)) == std::vector<float>{7, 7, 7});
  // A write through the base is visible in every view.
  base.select(0, 0).fill_(-1.0);
  REQUIRE(values(col) == std::vector<float>{-1, 7, 7});
  REQUIRE(tr.select(1, 0).to_vector<float>() == std::vector<float>{-1, -1, -1, -1});
  // detach shares data and version too; clone and contiguous copies do not.
  Tensor d = base.detach();
  d.fill_(0.0);
  REQUIRE(base.version() == d.version());
  REQUIRE(values(col) == std::vector<float>{0, 0, 0});
  Tensor cl = base.clone();
  const uint32_t vb = base.version();
  cl.fill_(9.0);
  REQUIRE(base.version() == vb);
  REQUIRE(values(base)[0] == 0.0f);
  // Views of an expanded tensor: reading is fine, strides are 0.
  Tensor e = iota({4}).expand({3, 4});
  REQUIRE(e.select(0, 2).strides() == Shape{1});
  REQUIRE(e.select(1, 2).strides() == Shape{0});
}

TEST_CASE("view composition over random shapes matches a reference index map", "[tensor][views]") {
  // Apply a random chain of views to an iota tensor; the values must always equal the same chain
  // applied to a contiguous copy (catches stride/offset bookkeeping errors).
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    Shape shape;
    const int nd = 1 + static_cast<int>(rng() % 4);
    for (int d = 0; d < nd; ++d) shape.push_back(1 + static_cast<int64_t>(rng() % 4));
    Tensor v = iota(shape);
    Tensor ref = v.clone();
    for (int step = 0; step < 4; ++step) {
      const int64_t dims = v.dim();
      if (dims == 0) break;
      const int64_t d = static_cast<int64_t>(rng() % dims);
      switch (rng() % 5) {
        case 0: {
          const int64_t d2 = static_cast<int64_t>(rng() % dims);
          v = v.transpose(d, d2);
          ref = ref.transpose(d, d2).contiguous();
          break;
        }
        case 1: {
          const int64_t n = v.size(d), s = n ? static_cast<int64_t>(rng() % n) : 0;
          const int64_t st = 1 + static_cast<int64_t>(rng() % 2);
          v = v.slice(d, s, n, st);
          ref = ref.slice(d, s, n, st).contiguous();
          break;
        }
        case 2:
          v = v.unsqueeze(d);
          ref = ref.unsqueeze(d).contiguous();
          break;
        case 3:
          v = v.flatten();
          ref = ref.flatten();
          break;
        default:
          if (v.size(d) > 0) {
            const int64_t i = static_cast<int64_t>(rng() % v.size(d));
            v = v.select(d, i);
            ref = ref.select(d, i).contiguous();
          }
      }
      INFO("trial " << trial << " step " << step << ": " << v.describe());
      REQUIRE(v.sizes() == ref.sizes());
      REQUIRE(values(v) == values(ref));
    }
  }
}
