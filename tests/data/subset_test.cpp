// data::Subset and data::random_split (torch.utils.data's): counts or fractions, seeded, disjoint,
// through the loader.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>

#include "data/data_loader.h"
#include "data/dataset.h"
#include "tests/support/tensor_testing.h"

using namespace precis;

namespace {
std::shared_ptr<data::TensorDataset> numbered(int64_t n) {
  return std::make_shared<data::TensorDataset>(std::vector<Tensor>{arange(static_cast<double>(n), {.dtype = DType::i64})});
}
int64_t value(const data::Dataset& d, int64_t i) { return d.get(i)[0].item<int64_t>(); }
}  // namespace

TEST_CASE("data::Subset picks examples by index, in order", "[data]") {
  auto base = numbered(10);
  data::Subset s(base, {7, 2, 2, 9});
  CHECK(s.size() == 4);
  CHECK(value(s, 0) == 7);
  CHECK(value(s, 2) == 2);
  CHECK(value(s, 3) == 9);
  PRECIS_REQUIRE_THROWS_WITH_ALL(data::Subset(base, {3, 10}), IndexError, "Subset", "index 10",
                                 "dataset of 10 examples");
  PRECIS_REQUIRE_THROWS_WITH_ALL(s.get(4), IndexError, "Subset::get", "index 4");
}

TEST_CASE("data::random_split: counts or fractions, disjoint, seeded", "[data]") {
  auto base = numbered(103);
  auto parts = data::random_split(base, {80, 20, 3}, /*seed=*/7);
  REQUIRE(parts.size() == 3);
  CHECK(parts[0]->size() == 80);
  CHECK(parts[1]->size() == 20);
  CHECK(parts[2]->size() == 3);
  std::set<int64_t> seen;
  for (const auto& p : parts)
    for (int64_t i = 0; i < p->size(); ++i) seen.insert(value(*p, i));
  CHECK(seen.size() == 103);  // every example exactly once
  // Shuffled, reproducible from the seed, different for another seed.
  std::vector<int64_t> first(parts[0]->indices().begin(), parts[0]->indices().begin() + 10);
  CHECK_FALSE(std::is_sorted(first.begin(), first.end()));
  CHECK(data::random_split(base, {80, 20, 3}, 7)[0]->indices() == parts[0]->indices());
  CHECK(data::random_split(base, {80, 20, 3}, 8)[0]->indices() != parts[0]->indices());
  // Fractions as PyTorch: floor each, the remainder one by one from the first subset.
  auto frac = data::random_split(base, {0.5, 0.3, 0.2}, 1);
  CHECK(frac[0]->size() == 52);  // floor(51.5) + 1
  CHECK(frac[1]->size() == 31);  // floor(30.9) + 1
  CHECK(frac[2]->size() == 20);  // floor(20.6)
  PRECIS_REQUIRE_THROWS_WITH_ALL(data::random_split(base, {80, 20}), ValueError, "sum to 100",
                                 "103 examples");
  PRECIS_REQUIRE_THROWS_WITH_ALL(data::random_split(base, {0.5, 0.6}), ValueError, "whole example counts");
  PRECIS_REQUIRE_THROWS_WITH_ALL(data::random_split(base, {-1, 104}), ValueError, ">= 0");
}

TEST_CASE("data::random_split parts feed the DataLoader", "[data]") {
  auto parts = data::random_split(numbered(50), {0.8, 0.2}, 3);
  data::DataLoader loader(parts[1], {.batch_size = 4});
  int64_t n = 0;
  std::set<int64_t> got;
  for (data::Batch& b : loader.epoch(0)) {
    n += b[0].size(0);
    for (int64_t v : b[0].to_vector<int64_t>()) got.insert(v);
  }
  CHECK(n == 10);
  CHECK(got == std::set<int64_t>(parts[1]->indices().begin(), parts[1]->indices().end()));
}
