// The CIFAR-10 batch reader (data/cifar.h) on a fuzzed file (plain or gzip).
#include "core/error.h"
#include "data/cifar.h"
#include "fuzz/common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  precis::fuzz::init_once();
  const std::string& path = precis::fuzz::write_temp(data, size, "-batch.bin");
  std::vector<uint8_t> labels, pixels;
  try {
    precis::data::read_cifar10_file(path, labels, pixels);
    if (pixels.size() != labels.size() * precis::data::kCifarImageBytes) __builtin_trap();
  } catch (const precis::Error&) {
  }
  return 0;
}
