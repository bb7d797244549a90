// PRECIS_TEST_DATA_DIR and PRECIS_TRAIN_EXE_PATH are this file's own definitions
// (tests/CMakeLists.txt).
#include "tests/support/paths.h"

#include <cstdlib>

namespace precis::testing {

const std::string& test_data_dir() {
  static const std::string dir = [] {
    const char* moved = std::getenv("PRECIS_TEST_DATA_DIR");
    return moved != nullptr && *moved != '\0' ? std::string(moved) : std::string(PRECIS_TEST_DATA_DIR);
  }();
  return dir;
}

std::string golden_dir() { return test_data_dir() + "/golden/fixtures"; }

std::string train_exe() {
  const char* moved = std::getenv("PRECIS_TRAIN_EXE");
  return moved != nullptr && *moved != '\0' ? std::string(moved) : std::string(PRECIS_TRAIN_EXE_PATH);
}

}  // namespace precis::testing
