// Joining and indexing: forward against naive f64 references, layouts, determinism, bad inputs,
// and the gradient-check cases for cat, stack, index_select, gather, index_add and scatter_add.
#include "core/thread_pool.h"
#include "ops/functional.h"
#include "tests/support/op_cases.h"
#include "tests/support/tensor_testing.h"

using namespace precis;
using namespace precis::testing;

namespace {

// Row-major multi-index helpers for the naive references.
std::vector<int64_t> unravel(int64_t i, const Shape& s) {
  std::vector<int64_t> idx(s.size());
  for (int64_t d = static_cast<int64_t>(s.size()) - 1; d >= 0; --d) {
    idx[d] = i % s[d];
    i /= s[d];
  }
  return idx;
}
int64_t ravel(const std::vector<int64_t>& idx, const Shape& s) {
  int64_t i = 0;
  for (size_t d = 0; d < s.size(); ++d) i = i * s[d] + idx[d];
  return i;
}
int64_t numel_of(const Shape& s) {
  int64_t n = 1;
  for (int64_t v : s) n *= v;
  return n;
}

Tensor random_index(const Shape& shape, int64_t high, uint64_t seed) {
  Generator g(seed);
  return randint(0, high, shape, {.dtype = DType::i64}, &g);
}

}  // namespace

TEST_CASE("cat matches a reference and promotes dtypes", "[ops][index]") {
  for (int64_t dim : {0, 1, 2, -1}) {
    Tensor a = randn_input({2, 3, 4}, false, 1), b = randn_input({2, 3, 4}, false, 2);
    Shape sb = {2, 3, 4};
    const int64_t w = dim < 0 ? dim + 3 : dim;
    sb[w] = 5;
    b = non_contiguous(randn_input(sb, false, 2));
    Tensor y = cat({a, b}, dim);
    Shape so = a.sizes();
    so[w] = a.size(w) + 5;
    REQUIRE(y.sizes() == so);
    const auto va = a.to_vector<double>(), vb = b.to_vector<double>(), vy = y.to_vector<double>();
    for (int64_t i = 0; i < numel_of(so); ++i) {
      auto idx = unravel(i, so);
      double expect;
      if (idx[w] < a.size(w)) {
        expect = va[ravel(idx, a.sizes())];
      } else {
        idx[w] -= a.size(w);
        expect = vb[ravel(idx, b.sizes())];
      }
      REQUIRE(vy[i] == expect);
    }
  }
  Tensor f = ones({2, 2}), d = zeros({1, 2}, {.dtype = DType::f64}), i = full({1, 2}, 3.0, {.dtype = DType::i64});
  Tensor y = cat({f, d, i});
  REQUIRE(y.dtype() == DType::f64);
  REQUIRE(y.to_vector<double>() == std::vector<double>{1, 1, 1, 1, 0, 0, 3, 3});
  REQUIRE(cat({f.to(DType::bf16), f}).dtype() == DType::f32);
  // Legacy: 1-D empty tensors are skipped whatever the other shapes.
  Tensor e = zeros({0});
  REQUIRE(cat({e, f, e}, 1).sizes() == Shape{2, 2});
  REQUIRE(cat({e, e}).sizes() == Shape{0});
  REQUIRE(cat({f, zeros({0, 2})}).sizes() == Shape{2, 2});
}

TEST_CASE("cat reports every mismatching operand", "[ops][index]") {
  Tensor a = zeros({2, 3}), b = zeros({2, 4}), c = zeros({1, 3}), d = zeros({2, 5});
  PRECIS_REQUIRE_THROWS_WITH_ALL(cat({a, b, c, d}, 0), ShapeError, "cat", "position 1: [2, 4] f32 cpu",
                                 "position 3: [2, 5] f32 cpu", "[2, 3] f32 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(cat({a, zeros({2, 3, 1})}, 0), ShapeError, "cat", "position 1: [2, 3, 1] f32 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(cat({a, scalar_tensor(1.0)}), ShapeError, "cat", "position 1", "zero-dimensional");
  PRECIS_REQUIRE_THROWS_WITH_ALL(cat({a, a}, 2), IndexError, "cat", "[2, 3] f32 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(cat({}), ValueError, "cat", "non-empty");
}

TEST_CASE("stack adds a dim", "[ops][index]") {
  Tensor a = randn_input({2, 3}, false, 1), b = non_contiguous(randn_input({2, 3}, false, 2));
  for (int64_t dim : {0, 1, 2, -1, -3}) {
    Tensor y = stack({a, b}, dim);
    const int64_t w = dim < 0 ? dim + 3 : dim;
    REQUIRE(y.size(w) == 2);
    PRECIS_REQUIRE_CLOSE(y.select(w, 0), a, DType::f64);
    PRECIS_REQUIRE_CLOSE(y.select(w, 1), b, DType::f64);
  }
  REQUIRE(stack({scalar_tensor(1.0), scalar_tensor(2.0)}).to_vector<float>() == std::vector<float>{1, 2});
  PRECIS_REQUIRE_THROWS_WITH_ALL(stack({a, zeros({3, 2})}), ShapeError, "stack", "position 1: [3, 2] f32 cpu",
                                 "[2, 3] f64 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(stack({a, a}, 3), IndexError, "stack");
}

TEST_CASE("index_select and gather match references", "[ops][index]") {
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::i32}) {
    for (int64_t dim : {0, 1, 2}) {
      for (bool nc : {false, true}) {
        Tensor x = randn_input({4, 5, 6}, false, 3, DType::f64);
        if (dt == DType::i32) x = randint(-50, 50, {4, 5, 6}, {.dtype = DType::i32});
        else x = x.to(dt);
        if (nc) x = non_contiguous(x);
        INFO("dim " << dim << " nc " << nc << " " << dtype_name(dt));
        const auto vx = x.to_vector<double>();
        // index_select, with i64 and i32 indices (repeats allowed).
        Tensor idx = random_index({7}, x.size(dim), 5 + dim);
        const auto vi = idx.to_vector<int64_t>();
        for (Tensor ix : {idx, idx.to(DType::i32)}) {
          Tensor y = index_select(x, dim, ix);
          Shape so = x.sizes();
          so[dim] = 7;
          REQUIRE(y.sizes() == so);
          REQUIRE(y.dtype() == dt);
          const auto vy = y.to_vector<double>();
          for (int64_t i = 0; i < numel_of(so); ++i) {
            auto m = unravel(i, so);
            m[dim] = vi[m[dim]];
            REQUIRE(vy[i] == vx[ravel(m, x.sizes())]);
          }
        }
        // gather with an index smaller than x in the other dims.
        Shape si = {3, 4, 5};
        si[dim] = 8;
        Tensor gi = random_index(si, x.size(dim), 9 + dim);
        Tensor g = gather(x, dim, nc ? non_contiguous(gi) : gi);
        REQUIRE(g.sizes() == si);
        const auto vg = g.to_vector<double>();
        const auto vgi = gi.to_vector<int64_t>();
        for (int64_t i = 0; i < numel_of(si); ++i) {
          auto m = unravel(i, si);
          m[dim] = vgi[i];
          REQUIRE(vg[i] == vx[ravel(m, x.sizes())]);
        }
      }
    }
  }
  // 0-d operands behave as 1-element 1-D ones.
  REQUIRE(index_select(scalar_tensor(4.0), 0, from_vector<int64_t>({0, 0})).to_vector<float>() == std::vector<float>{4, 4});
  REQUIRE(gather(scalar_tensor(4.0), 0, scalar_tensor(0.0, {.dtype = DType::i64})).item<float>() == 4.0f);
}

TEST_CASE("index_add and scatter_add match references", "[ops][index]") {
  for (DType dt : {DType::f32, DType::f64}) {
    for (int64_t dim : {0, 1, 2}) {
      for (bool nc : {false, true}) {
        INFO("dim " << dim << " nc " << nc << " " << dtype_name(dt));
        Tensor x = randn_input({4, 5, 6}, false, 3, dt);
        if (nc) x = non_contiguous(x);
        const auto vx = x.to_vector<double>();
        // index_add with repeated indices.
        Tensor idx = random_index({9}, x.size(dim), 2 + dim);
        Shape ss = x.sizes();
        ss[dim] = 9;
        Tensor src = randn_input(ss, false, 4, dt);
        if (nc) src = non_contiguous(src);
        std::vector<double> expect = vx;
        const auto vs = src.to_vector<double>();
        const auto vi = idx.to_vector<int64_t>();
        for (int64_t i = 0; i < numel_of(ss); ++i) {
          auto m = unravel(i, ss);
          m[dim] = vi[m[dim]];
          expect[ravel(m, x.sizes())] += vs[i];
        }
        Tensor y = index_add(x, dim, idx, src);
        PRECIS_REQUIRE_CLOSE(y, from_vector<double>(expect, x.sizes()), dt);
        PRECIS_REQUIRE_CLOSE(x, from_vector<double>(vx, x.sizes()), dt);  // out-of-place
        // scatter_add with src larger than index.
        Shape si = {3, 4, 5};
        si[dim] = 7;
        Tensor sidx = random_index(si, x.size(dim), 7 + dim);
        Tensor ssrc = randn_input({si[0] + 1, si[1], si[2] + 2}, false, 6, dt);
        std::vector<double> e2 = vx;
        const auto vss = ssrc.to_vector<double>();
        const auto vsi = sidx.to_vector<int64_t>();
        for (int64_t i = 0; i < numel_of(si); ++i) {
          auto m = unravel(i, si);
          const double v = vss[ravel(m, ssrc.sizes())];
          m[dim] = vsi[i];
          e2[ravel(m, x.sizes())] += v;
        }
        PRECIS_REQUIRE_CLOSE(scatter_add(x, dim, nc ? non_contiguous(sidx) : sidx, ssrc), from_vector<double>(e2, x.sizes()), dt);
      }
    }
  }
  Tensor xi = zeros({3}, {.dtype = DType::i64});
  REQUIRE(index_add(xi, 0, from_vector<int64_t>({2, 2, 0}), from_vector<int64_t>({1, 5, 7})).to_vector<int64_t>() ==
          std::vector<int64_t>{7, 0, 6});
}

TEST_CASE("large index_add and scatter_add are deterministic across thread counts", "[ops][index]") {
  const int saved = get_num_threads();
  Tensor x = zeros({100, 64});
  Tensor idx = random_index({20000}, 100, 1);
  Tensor src = randn_input({20000, 64}, false, 2, DType::f32);
  Tensor sidx = random_index({20000, 64}, 100, 3);
  set_num_threads(1);
  const auto a1 = index_add(x, 0, idx, src).to_vector<float>();
  const auto b1 = scatter_add(x, 0, sidx, src).to_vector<float>();
  set_num_threads(2);
  const auto a2 = index_add(x, 0, idx, src).to_vector<float>();
  const auto b2 = scatter_add(x, 0, sidx, src).to_vector<float>();
  set_num_threads(saved);
  REQUIRE(a1 == a2);
  REQUIRE(b1 == b2);
  // And they agree with each other: index_add is scatter_add with a broadcast index.
  Tensor bidx = idx.reshape({20000, 1}).expand({20000, 64}).contiguous();
  REQUIRE(scatter_add(x, 0, bidx, src).to_vector<float>() == a1);
}

// index_add along dim 0 of a row table (an embedding gradient) walks the table rows
// contiguously; where there are few of them it walks the indexed dim innermost. Either way each
// element gets its additions in increasing index position, accumulated in fp32 (f64 for f64) from
// x's value and rounded once: the reference below does exactly that, so results must be equal.
TEST_CASE("index_add along dim 0 adds rows in index order for every float dtype and thread count",
          "[ops][index]") {
  const int saved = get_num_threads();
  struct Table {
    int64_t rows, cols, n;
  };
  for (const Table tb : {Table{50, 37, 777}, Table{40, 300, 513}, Table{7, 1100, 99}, Table{300, 9, 1001}}) {
    for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
      INFO("table " << tb.rows << "x" << tb.cols << ", " << tb.n << " indices, " << dtype_name(dt));
      const Tensor x = randn_input({tb.rows, tb.cols}, false, 5, dt);
      const Tensor idx = random_index({tb.n}, tb.rows, 6);
      const Tensor src = randn_input({tb.n, tb.cols}, false, 7, dt);
      const auto vx = x.to_vector<double>(), vs = src.to_vector<double>();
      const auto vi = idx.to_vector<int64_t>();
      std::vector<double> expect(vx.size());
      for (int64_t c = 0; c < tb.cols; ++c) {
        for (int64_t r = 0; r < tb.rows; ++r) {
          if (dt == DType::f64) {
            double acc = vx[r * tb.cols + c];
            for (int64_t j = 0; j < tb.n; ++j)
              if (vi[j] == r) acc += vs[j * tb.cols + c];
            expect[r * tb.cols + c] = acc;
          } else {
            float acc = static_cast<float>(vx[r * tb.cols + c]);
            for (int64_t j = 0; j < tb.n; ++j)
              if (vi[j] == r) acc += static_cast<float>(vs[j * tb.cols + c]);
            expect[r * tb.cols + c] = acc;
          }
        }
      }
      // Rounded once to dt, as the kernel does.
      const auto want =
          dt == DType::f64 ? expect : from_vector<double>(expect, x.sizes()).to(DType::f32).to(dt).to_vector<double>();
      for (int threads : {1, 2}) {
        set_num_threads(threads);
        const auto got = index_add(x, 0, idx, src).to_vector<double>();
        set_num_threads(saved);
        INFO(threads << " threads");
        REQUIRE(got == want);
      }
    }
  }
}

TEST_CASE("indexing ops reject bad indices", "[ops][index]") {
  Tensor x = zeros({3, 4});
  PRECIS_REQUIRE_THROWS_WITH_ALL(index_select(x, 0, from_vector<int64_t>({0, 3})), IndexError, "index_select",
                                 "index 3", "size 3", "[3, 4] f32 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(index_select(x, 1, from_vector<int64_t>({-1})), IndexError, "index_select", "index -1");
  PRECIS_REQUIRE_THROWS_WITH_ALL(index_select(x, 0, from_vector<float>({0})), DTypeError, "index_select", "[1] f32 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(index_select(x, 0, zeros({1, 1}, {.dtype = DType::i64})), ShapeError, "index_select",
                                 "1-D", "[1, 1] i64 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(index_select(x, 2, from_vector<int64_t>({0})), IndexError, "index_select");
  PRECIS_REQUIRE_THROWS_WITH_ALL(gather(x, 1, full({3, 1}, 4.0, {.dtype = DType::i64})), IndexError, "gather", "index 4",
                                 "size 4");
  PRECIS_REQUIRE_THROWS_WITH_ALL(gather(x, 1, zeros({3, 1}, {.dtype = DType::f32})), DTypeError, "gather",
                                 "[3, 1] f32 cpu");
  // An i32 index works as an i64 one (PyTorch 2.15 takes both; gather and scatter_add refused it).
  const Tensor i32 = from_vector<int64_t>({2, 0, 1}, {3, 1}).to(DType::i32);
  CHECK(gather(x, 1, i32).to_vector<double>() == gather(x, 1, i32.to(DType::i64)).to_vector<double>());
  CHECK(scatter_add(x, 1, i32, ones({3, 1}, {.dtype = x.dtype()})).to_vector<double>() ==
        scatter_add(x, 1, i32.to(DType::i64), ones({3, 1}, {.dtype = x.dtype()})).to_vector<double>());
  PRECIS_REQUIRE_THROWS_WITH_ALL(gather(x, 1, zeros({4, 1}, {.dtype = DType::i64})), ShapeError, "gather", "[4, 1] i64 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(gather(x, 1, zeros({3}, {.dtype = DType::i64})), ShapeError, "gather", "as many dims", "index [3] i64 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(index_add(x, 0, from_vector<int64_t>({0}), zeros({1, 4}, {.dtype = DType::f64})),
                                 DTypeError, "index_add", "[1, 4] f64 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(index_add(x, 0, from_vector<int64_t>({0}), zeros({2, 4})), ShapeError, "index_add",
                                 "[1, 4]", "src [2, 4] f32 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(index_add(x, 0, from_vector<int64_t>({5}), zeros({1, 4})), IndexError, "index_add",
                                 "index 5");
  PRECIS_REQUIRE_THROWS_WITH_ALL(scatter_add(x, 0, zeros({2, 5}, {.dtype = DType::i64}), zeros({2, 5})), ShapeError,
                                 "scatter_add", "[2, 5] i64 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(scatter_add(x, 0, zeros({2, 2}, {.dtype = DType::i64}), zeros({1, 2})), ShapeError,
                                 "scatter_add", "src [1, 2] f32 cpu");
  PRECIS_REQUIRE_THROWS_WITH_ALL(scatter_add(x, 0, full({1, 1}, 3.0, {.dtype = DType::i64}), zeros({1, 1})), IndexError,
                                 "scatter_add", "index 3");
}

// ---- gradient-check cases ---------------------------------------------------------------------
static const bool kIndexGradCases = register_grad_cases({
    {OpId::cat, "dim 1 three inputs", [] {
       return TensorList{randn_input({2, 3}, true, 1), non_contiguous(randn_input({2, 2}, true, 2)), randn_input({2, 1}, true, 3)};
     },
     [](const TensorList& x) { return TensorList{cat(x, 1)}; }},
    {OpId::cat, "dim 0 one constant", [] { return TensorList{randn_input({1, 3}, true, 1), randn_input({2, 3}, false, 2)}; },
     [](const TensorList& x) { return TensorList{cat(x, 0)}; }},
    {OpId::stack, "dim -1", [] { return TensorList{randn_input({2, 3}, true, 1), non_contiguous(randn_input({2, 3}, true, 2))}; },
     [](const TensorList& x) { return TensorList{stack(x, -1)}; }},
    {OpId::index_select, "dim 1 repeated", [] { return TensorList{non_contiguous(randn_input({3, 4}))}; },
     [](const TensorList& x) { return TensorList{index_select(x[0], 1, from_vector<int64_t>({3, 0, 3, 1}))}; }},
    {OpId::index_select, "dim 0 i32", [] { return TensorList{randn_input({4, 2, 2})}; },
     [](const TensorList& x) { return TensorList{index_select(x[0], 0, from_vector<int32_t>({2, 2, 1}))}; }},
    {OpId::gather, "dim 1", [] { return TensorList{non_contiguous(randn_input({3, 4}))}; },
     [](const TensorList& x) {
       return TensorList{gather(x[0], 1, from_vector<int64_t>({0, 0, 3, 1, 2, 2}, {3, 2}))};
     }},
    {OpId::gather, "dim 0 smaller index", [] { return TensorList{randn_input({3, 4})}; },
     [](const TensorList& x) {
       return TensorList{gather(x[0], 0, from_vector<int64_t>({2, 0, 1, 2, 0, 0}, {2, 3}))};
     }},
    {OpId::index_add, "dim 0", [] { return TensorList{randn_input({4, 3}, true, 1), non_contiguous(randn_input({3, 3}, true, 2))}; },
     [](const TensorList& x) { return TensorList{index_add(x[0], 0, from_vector<int64_t>({1, 3, 1}), x[1])}; }},
    {OpId::index_add, "dim 1 src only", [] { return TensorList{randn_input({2, 4}, false, 1), randn_input({2, 2}, true, 2)}; },
     [](const TensorList& x) { return TensorList{index_add(x[0], 1, from_vector<int64_t>({0, 0}), x[1])}; }},
    {OpId::scatter_add, "dim 1", [] { return TensorList{non_contiguous(randn_input({3, 4}, true, 1)), randn_input({3, 2}, true, 2)}; },
     [](const TensorList& x) {
       return TensorList{scatter_add(x[0], 1, from_vector<int64_t>({0, 0, 3, 1, 2, 2}, {3, 2}), x[1])};
     }},
    {OpId::scatter_add, "dim 0 src larger than index", [] {
       return TensorList{randn_input({3, 3}, true, 1), randn_input({3, 4}, true, 2)};
     },
     [](const TensorList& x) {
       return TensorList{scatter_add(x[0], 0, from_vector<int64_t>({2, 0, 2, 2, 1, 2}, {2, 3}), x[1])};
     }},
});

TEST_CASE("split and chunk: views along a dim with PyTorch's sizes, gradients through them", "[ops][index]") {
  const Tensor x = arange(10.0).reshape({2, 5}).requires_grad_();
  const std::vector<Tensor> s = split(x, 2, 1);
  REQUIRE(s.size() == 3);
  CHECK(s[0].sizes() == Shape{2, 2});
  CHECK(s[2].sizes() == Shape{2, 1});
  CHECK(s[1].to_vector<float>() == std::vector<float>{2, 3, 7, 8});
  CHECK(s[1].data_ptr() == static_cast<const char*>(x.data_ptr()) + 2 * sizeof(float));  // a view
  // torch.arange(5).chunk(4) gives three chunks of 2, 2, 1; arange(6).chunk(4) 2, 2, 2.
  CHECK(chunk(arange(5.0), 4).size() == 3);
  CHECK(chunk(arange(6.0), 4).size() == 3);
  CHECK(chunk(x, 2, -1)[1].sizes() == Shape{2, 2});
  CHECK(split(zeros({0, 3}), 2).size() == 1);  // an empty dim: one empty view
  // Gradients flow back to the right elements.
  sum(mul(s[1], 2.0)).backward();
  CHECK(x.grad().to_vector<float>() == std::vector<float>{0, 0, 2, 2, 0, 0, 0, 2, 2, 0});
  PRECIS_REQUIRE_THROWS_WITH_ALL(split(x, 0, 1), ValueError, "split", "split_size", "[2, 5]");
  PRECIS_REQUIRE_THROWS_WITH_ALL(chunk(x, 0), ValueError, "chunk", "chunks must be > 0");
  PRECIS_REQUIRE_THROWS_WITH_ALL(split(x, 2, 2), IndexError, "split");
}
