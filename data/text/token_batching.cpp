#include "data/text/token_batching.h"

#include <algorithm>

#include "core/checked_math.h"
#include "core/error.h"

namespace precis::data {

std::vector<std::vector<int64_t>> token_budget_batches(const std::vector<int64_t>& lengths,
                                                       const TokenBudgetOptions& options, int64_t epoch) {
  PRECIS_CHECK(options.max_tokens >= 1 && options.bucket_width >= 1 && options.max_batch_size >= 0,
               "token_budget_batches: needs max_tokens >= 1, bucket_width >= 1, max_batch_size >= 0, got ",
               options.max_tokens, ", ", options.bucket_width, ", ", options.max_batch_size);
  const auto n = static_cast<int64_t>(lengths.size());
  for (int64_t i = 0; i < n; ++i) {
    const int64_t len = lengths[static_cast<size_t>(i)];
    PRECIS_CHECK(len >= 1, "token_budget_batches: sequence ", i, " has length ", len);
    PRECIS_CHECK(len <= options.max_tokens, "token_budget_batches: sequence ", i, " has ", len,
                 " tokens, more than max_tokens = ", options.max_tokens,
                 " on its own (raise max_tokens or truncate the sequences)");
  }
  std::vector<int64_t> order = epoch_order(n, options.shuffle, options.seed, epoch);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return lengths[static_cast<size_t>(a)] / options.bucket_width < lengths[static_cast<size_t>(b)] / options.bucket_width;
  });

  std::vector<std::vector<int64_t>> batches;
  std::vector<int64_t> current;
  int64_t longest = 0;
  for (int64_t i : order) {
    const int64_t len = lengths[static_cast<size_t>(i)];
    const int64_t new_longest = std::max(longest, len);
    // Lengths and max_tokens are the caller's: a product past int64 is over any budget.
    const std::optional<int64_t> tokens = checked_mul(static_cast<int64_t>(current.size()) + 1, new_longest);
    const bool full = !tokens || *tokens > options.max_tokens ||
                      (options.max_batch_size > 0 && static_cast<int64_t>(current.size()) == options.max_batch_size);
    if (!current.empty() && full) {
      batches.push_back(std::move(current));
      current.clear();
      longest = 0;
    }
    current.push_back(i);
    longest = std::max(longest, len);
  }
  if (!current.empty()) batches.push_back(std::move(current));

  if (options.shuffle) {
    SampleRng rng(options.seed, kBatchOrderStream, static_cast<uint64_t>(epoch));
    const std::vector<int64_t> perm = random_permutation(static_cast<int64_t>(batches.size()), rng);
    std::vector<std::vector<int64_t>> shuffled;
    shuffled.reserve(batches.size());
    for (int64_t p : perm) shuffled.push_back(std::move(batches[static_cast<size_t>(p)]));
    batches = std::move(shuffled);
  }
  return batches;
}

BatchSampler token_budget_sampler(std::vector<int64_t> lengths, TokenBudgetOptions options) {
  return [lengths = std::move(lengths), options](int64_t epoch) { return token_budget_batches(lengths, options, epoch); };
}

}  // namespace precis::data
