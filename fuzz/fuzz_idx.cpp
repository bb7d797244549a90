// The IDX reader (data/idx.h) on a fuzzed file: plain or gzip, detected from the bytes, then the
// array as a tensor and through the image and label entry points.
#include "fuzz/common.h"
#include "fuzz/idx_readers.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  precis::fuzz::init_once();
  const std::string& path = precis::fuzz::write_temp(data, size, "-idx");
  precis::fuzz::read_idx_every_way(path);
  return 0;
}
