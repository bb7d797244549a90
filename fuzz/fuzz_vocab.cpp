// read_vocab / WordPieceTokenizer::from_file (data/text/wordpiece.h) on a fuzzed vocab.txt; a
// vocabulary that loads then tokenizes, encodes and decodes a fixed text.
#include "core/error.h"
#include "data/text/wordpiece.h"
#include "fuzz/common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  precis::fuzz::init_once();
  const std::string& path = precis::fuzz::write_temp(data, size, "-vocab.txt");
  try {
    (void)precis::data::read_vocab(path);
  } catch (const precis::Error&) {
  }
  try {
    auto tok = precis::data::WordPieceTokenizer::from_file(path);
    auto e = tok.encode_pair("Héllo, wörld! 你好 unaffable [MASK] running", "a question?",
                             {.truncate_to = 16, .pad_to = 20});
    (void)tok.decode(e.ids, false);
    (void)tok.decode(e.ids, true);
  } catch (const precis::Error&) {
  }
  return 0;
}
