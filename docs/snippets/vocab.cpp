// Wrapper for tokenizer snippets: writes a small WordPiece vocabulary to vocab.txt in the working
// directory (trained on `corpus`, four sentences, also available to the snippet).
#include <precis/precis.h>

#include <iostream>
#include <string>
#include <vector>

using namespace precis;

int main() {
  const std::vector<std::string> corpus = {
      "Hello, world! A question? An answer.", "The quick brown fox jumps over the lazy dog.",
      "A fox is a small wild dog.", "Dogs and foxes jump; lazy dogs sleep."};
  data::write_vocab("vocab.txt", data::train_wordpiece_vocab(corpus, {.vocab_size = 90, .min_frequency = 1}));

  // @snippet

  return 0;
}
