#pragma once
// Trains a WordPiece vocabulary from a corpus.
//
// Algorithm (bottom-up merging, as Schuster & Nakajima's WordPiece; ids need not match Google's
// tooling):
//  1. Words: the corpus through the tokenizer's own basic tokenisation (so training and encoding
//     see the same words), counted.
//  2. Alphabet: every character that starts a word ("c") and every one that continues a word
//     ("##c"). Each word starts as its characters: "hug" = h ##u ##g.
//  3. Repeat until the vocabulary has vocab_size tokens: among adjacent symbol pairs (a, b) seen
//     at least min_frequency times, merge the one with the best score (ties: higher count(ab),
//     then earlier tokens). The merged token is a + b without b's "##"; every occurrence in every
//     word is replaced, and the counts are updated incrementally. Scores (MergeScore):
//       likelihood_gain (default): count(ab) · log(count(ab) · N / (count(a) · count(b))), N = the
//         number of symbols: the rise in the corpus's unigram log-likelihood when ab becomes one
//         symbol (WordPiece's criterion, to first order). Balances frequency and association.
//       pmi: count(ab) / (count(a) · count(b)) (the score in Hugging Face's course description).
//         Favours rare pairs: it builds whole rare words early, so text encodes into more pieces.
//       frequency: count(ab) (BPE).
//  4. Vocabulary = special tokens, then the alphabet (sorted by code point), then merged tokens in
//     the order they were made. It stops early (smaller vocabulary) when no pair is left.
// Every word of the corpus then encodes without [UNK] (its characters are all in the alphabet),
// except words over max_input_chars_per_word characters.
#include <cstdint>
#include <string>
#include <vector>

#include "data/text/wordpiece.h"

namespace precis::data {

enum class MergeScore { likelihood_gain, pmi, frequency };

/// What train_wordpiece_vocab builds (see the algorithm above).
struct WordPieceTrainerOptions {
  int64_t vocab_size = 30522;  ///< tokens wanted, specials included (30522: BERT-base's vocabulary)
  MergeScore score = MergeScore::likelihood_gain;  ///< how merge candidates are ranked (step 3)
  /// Pairs seen fewer times than this are never merged.
  int64_t min_frequency = 2;
  /// Normalisation and special-token names (the vocabulary starts with [PAD], [UNK], [CLS], [SEP],
  /// [MASK] as named here, ids 0..4).
  WordPieceOptions tokenizer = {};
};

/// The trained vocabulary (write it with write_vocab, load it with WordPieceTokenizer). ValueError
/// when vocab_size is smaller than the special tokens plus the corpus's alphabet (the message
/// gives that minimum) or the corpus has no words.
std::vector<std::string> train_wordpiece_vocab(const std::vector<std::string>& corpus,
                                               const WordPieceTrainerOptions& options = {});

}  // namespace precis::data
