#pragma once
// Where the tests find what lies outside their executables. The paths are compiled into one file
// (paths.cpp) instead of onto every test file's command line: an absolute path there made each
// test file a compiler-cache miss in a checkout at another path (CI's fresh-machine root).
#include <string>

namespace precis::testing {

/// tests/ of the source tree: $PRECIS_TEST_DATA_DIR when set (the GPU check runs the executables
/// in another copy of the tree, tests/gpu/steps.sh), else the tree they were built from.
const std::string& test_data_dir();
/// tests/golden/fixtures: the values PyTorch wrote (tests/golden/gen_fixtures.py).
std::string golden_dir();
/// The precis-train to run: $PRECIS_TRAIN_EXE when set (the GPU check's bundle moves the
/// executables, tests/gpu/steps.sh), else the one built beside the tests.
std::string train_exe();

}  // namespace precis::testing
