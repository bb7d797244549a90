// Wrapper for text-pipeline snippets: a WordPiece tokenizer `tok` trained on `corpus` (a few
// hundred short lines).
#include <precis/precis.h>

#include <iostream>
#include <string>
#include <vector>

using namespace precis;

int main() {
  std::vector<std::string> corpus;
  for (int i = 0; i < 200; ++i)
    corpus.push_back("line " + std::to_string(i) + ": the quick brown fox jumps over the lazy dog " +
                     std::string(static_cast<size_t>(i % 7), 'a'));
  data::WordPieceTokenizer tok(data::train_wordpiece_vocab(corpus, {.vocab_size = 120, .min_frequency = 1}));

  // @snippet

  return 0;
}
