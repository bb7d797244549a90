#pragma once
// Dynamic batching for text: batches of similar-length sequences filled up to a token budget, so a
// batch of short sentences holds many and a batch of long ones few, with little padding.
#include <cstdint>
#include <vector>

#include "data/data_loader.h"

namespace precis::data {

/// How token_budget_batches groups and cuts sequences (in the spirit of fairseq's max_tokens
/// batching; no PyTorch counterpart).
struct TokenBudgetOptions {
  /// Most padded tokens per batch: batch size × its longest sequence <= max_tokens.
  int64_t max_tokens = 4096;
  /// Sequences are grouped by length / bucket_width (1: exact lengths); within a group the order
  /// is random when shuffling, so batches differ between epochs.
  int64_t bucket_width = 8;
  /// Most sequences per batch (0: no limit).
  int64_t max_batch_size = 0;
  /// Shuffle the order within length groups and the order of the batches, from (seed, epoch).
  bool shuffle = true;
  uint64_t seed = 0;  ///< seeds the shuffles (with the epoch); use the loader's seed
};

/// The index lists of one epoch: every sequence exactly once, each batch's padded size within the
/// budget. Sequences are sorted by (length group, random or index order) and cut greedily into
/// batches; the batches are then shuffled. Deterministic in (lengths, options, epoch).
/// ValueError when a sequence alone exceeds max_tokens (naming it: raise max_tokens or truncate).
std::vector<std::vector<int64_t>> token_budget_batches(const std::vector<int64_t>& lengths,
                                                       const TokenBudgetOptions& options, int64_t epoch);

/// A DataLoaderOptions::batch_sampler giving token_budget_batches(lengths, options, epoch).
BatchSampler token_budget_sampler(std::vector<int64_t> lengths, TokenBudgetOptions options);

}  // namespace precis::data
