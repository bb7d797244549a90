// The IDX reader (data/idx.h) on a fuzzed file: plain or gzip, detected from the bytes, then the
// array as a tensor and through the image and label entry points.
#include "core/error.h"
#include "data/idx.h"
#include "fuzz/common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  precis::fuzz::init_once();
  const std::string& path = precis::fuzz::write_temp(data, size, "-idx");
  try {
    precis::data::IdxArray a = precis::data::read_idx(path);
    (void)precis::data::idx_to_tensor(a);
  } catch (const precis::Error&) {
  }
  try {
    (void)precis::data::read_idx_images(path);
  } catch (const precis::Error&) {
  }
  try {
    (void)precis::data::read_idx_labels(path);
  } catch (const precis::Error&) {
  }
  return 0;
}
