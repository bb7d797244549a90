// The text-corpus readers (data/text/corpus.h) on a fuzzed file: read_text_lines on it as a
// plain file, then as WordNet's data.noun in a folder (read_wordnet_glosses, read_corpus).
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "data/text/corpus.h"
#include "fuzz/common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  precis::fuzz::init_once();
  const std::string& path = precis::fuzz::write_temp(data, size, "-corpus.txt");
  try {
    (void)precis::data::read_text_lines(path);
  } catch (const precis::Error&) {
  }
  static const std::string dir = [] {
    std::string d = std::filesystem::temp_directory_path() / ("precis-fuzz-wordnet-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  {
    std::ofstream out(dir + "/data.noun", std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    if (!out) __builtin_trap();
  }
  try {
    (void)precis::data::read_wordnet_glosses(dir);
  } catch (const precis::Error&) {
  }
  try {
    (void)precis::data::read_corpus(dir);
  } catch (const precis::Error&) {
  }
  return 0;
}
