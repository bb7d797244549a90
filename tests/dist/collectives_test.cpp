// ProcessGroup collectives on every dtype, with integer values so that every result is exact, and
// the argument checks (which fail on every rank alike, before any rank enters a collective).
#include <catch2/catch.hpp>

#include "dist/process_group.h"
#include "ops/functional.h"
#include "tensor/factory.h"

using namespace precis;

namespace {
std::shared_ptr<dist::ProcessGroup> group() { return dist::init_process_group(); }
}  // namespace

TEST_CASE("dist: all_reduce sum, avg and max are exact on integer values of every dtype", "[dist]") {
  auto pg = group();
  const int n = pg->size(), r = pg->rank();
  for (DType d : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i64, DType::i32}) {
    INFO(dtype_name(d));
    std::vector<double> mine, sum, mx, avg;
    for (int i = 0; i < 5; ++i) {
      mine.push_back(r + 1 + 2 * i);  // rank r's value
      sum.push_back(n * (n + 1) / 2.0 + 2.0 * i * n);
      mx.push_back(n + 2 * i);
      avg.push_back((n + 1) / 2.0 + 2 * i);
    }
    Tensor base = from_vector<double>(mine, {5}).to(d);
    Tensor t = base.clone();
    pg->all_reduce(t, dist::ReduceOp::sum)->wait();
    CHECK(t.dtype() == d);
    CHECK(t.to(DType::f64).to_vector<double>() == sum);
    t = base.clone();
    pg->all_reduce(t, dist::ReduceOp::max)->wait();
    CHECK(t.to(DType::f64).to_vector<double>() == mx);
    if (is_floating(d)) {
      t = base.clone();
      pg->all_reduce(t, dist::ReduceOp::avg)->wait();
      CHECK(t.to(DType::f64).to_vector<double>() == avg);  // (n+1)/2 is a half-integer: exact in every float
    }
  }
}

TEST_CASE("dist: broadcast, all_gather and barrier", "[dist]") {
  auto pg = group();
  const int n = pg->size(), r = pg->rank();
  Tensor t = full({3, 2}, static_cast<double>(r * 10 + 1), {.dtype = DType::i64});
  const int root = n - 1;
  auto w = pg->broadcast(t, root);
  w->wait();
  CHECK(w->done());
  CHECK(t.to_vector<int64_t>() == std::vector<int64_t>(6, root * 10 + 1));

  Tensor in = full({2}, static_cast<double>(r), {.dtype = DType::bf16});
  Tensor out = zeros({n, 2}, {.dtype = DType::bf16});
  pg->all_gather(in, out)->wait();
  std::vector<double> want;
  for (int k = 0; k < n; ++k) want.insert(want.end(), {double(k), double(k)});
  CHECK(out.to(DType::f64).to_vector<double>() == want);
  pg->barrier()->wait();
  CHECK(pg->local_rank() >= 0);
  CHECK(pg->local_rank() < n);
}

TEST_CASE("dist: overlapping collectives complete in any wait order", "[dist]") {
  auto pg = group();
  std::vector<Tensor> ts;
  std::vector<std::shared_ptr<dist::Work>> ws;
  for (int k = 0; k < 4; ++k) {
    ts.push_back(full({1000}, static_cast<double>(k + pg->rank()), {.dtype = DType::f32}));
    ws.push_back(pg->all_reduce(ts.back(), dist::ReduceOp::sum));
  }
  for (int k = 3; k >= 0; --k) ws[k]->wait();
  const int n = pg->size();
  for (int k = 0; k < 4; ++k) CHECK(ts[k].to_vector<float>()[999] == static_cast<float>(k * n + n * (n - 1) / 2));
}

TEST_CASE("dist: bad collective arguments are typed errors raised before communicating", "[dist]") {
  auto pg = group();
  Tensor m = zeros({4, 4});
  CHECK_THROWS_AS(pg->all_reduce(m.transpose(0, 1), dist::ReduceOp::sum), ValueError);
  CHECK_THROWS_AS(pg->all_reduce(zeros({3}, {.dtype = DType::i64}), dist::ReduceOp::avg), DTypeError);
  CHECK_THROWS_AS(pg->all_reduce(zeros({3}, {.dtype = DType::boolean}), dist::ReduceOp::sum), DTypeError);
  CHECK_THROWS_AS(pg->all_gather(zeros({2}), zeros({pg->size() + 1, 2})), ShapeError);
  CHECK_THROWS_AS(pg->all_gather(zeros({2}), zeros({pg->size(), 2}, {.dtype = DType::f64})), ShapeError);
  CHECK_THROWS_AS(pg->broadcast(zeros({2}), pg->size()), IndexError);
  CHECK_THROWS_AS(pg->all_reduce(Tensor(), dist::ReduceOp::sum), ValueError);
  CHECK_THROWS_WITH(pg->all_reduce(zeros({3}, {.dtype = DType::i32}), dist::ReduceOp::avg),
                    Catch::Contains("not floating"));
}

TEST_CASE("dist: a collective whose Work is dropped unwaited completes, as PyTorch's synchronous call", "[dist]") {
  // `pg->all_reduce(t, sum);` as a statement (PyTorch's habit): t used to keep the rank's own value,
  // and for f16/bf16 MPI later wrote the sum into the freed f32 staging buffer.
  auto pg = group();
  const int n = pg->size(), r = pg->rank();
  for (DType d : {DType::f32, DType::bf16, DType::i64}) {
    INFO(dtype_name(d));
    Tensor t = full({8}, r + 1, {.dtype = d});
    pg->all_reduce(t, dist::ReduceOp::sum);
    CHECK(t.to(DType::f64).to_vector<double>() == std::vector<double>(8, n * (n + 1) / 2.0));
    Tensor b = full({3}, r == 0 ? 7 : 0, {.dtype = d});
    pg->broadcast(b, 0);
    CHECK(b.to(DType::f64).to_vector<double>() == std::vector<double>(3, 7.0));
  }
}
