// BertConfig::mini_from_vocab_file on files that are not vocabularies (issue 13: a directory was
// read as an empty file and reported as "empty").
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "models/bert.h"
#include "tests/support/tensor_testing.h"

using namespace precis;

TEST_CASE("bert: a vocab path that is a directory or empty is refused by name", "[models]") {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("precis_vocab_dir_test." + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir / "vocab.txt");
  PRECIS_REQUIRE_THROWS_WITH_ALL(models::BertConfig::mini_from_vocab_file((dir / "vocab.txt").string()), IOError,
                                 "vocab.txt", "is a directory");
  std::ofstream(dir / "empty.txt").close();
  PRECIS_REQUIRE_THROWS_WITH_ALL(models::BertConfig::mini_from_vocab_file((dir / "empty.txt").string()), IOError,
                                 "empty.txt", "is empty");
  std::filesystem::remove_all(dir);
}
