#include "data/cifar.h"

#include "core/error.h"
#include "data/file_bytes.h"
#include "tensor/factory.h"

namespace precis::data {

void read_cifar10_file(const std::string& path, std::vector<uint8_t>& labels, std::vector<uint8_t>& pixels) {
  const std::vector<uint8_t> bytes =
      read_file_bytes(path, kCifarMaxRecordsPerFile * kCifarRecordBytes, "CIFAR-10 batch file (10000 records)");
  PRECIS_CHECK_T(IOError, !bytes.empty(), "read_cifar10_file: ", path, " is empty");
  PRECIS_CHECK_T(IOError, bytes.size() % kCifarRecordBytes == 0, "read_cifar10_file: ", path, ": ", bytes.size(),
                 " bytes is not a whole number of 3073-byte records (1 label + 3072 pixels); truncated or not "
                 "CIFAR-10 binary (CIFAR-100 records have 2 label bytes)");
  const size_t n = bytes.size() / kCifarRecordBytes;
  labels.reserve(labels.size() + n);
  pixels.reserve(pixels.size() + n * kCifarImageBytes);
  for (size_t r = 0; r < n; ++r) {
    const uint8_t* rec = bytes.data() + r * kCifarRecordBytes;
    PRECIS_CHECK_T(IOError, rec[0] < 10, "read_cifar10_file: ", path, ": record ", r, " has label ", int{rec[0]},
                   " (CIFAR-10 labels are 0..9)");
    labels.push_back(rec[0]);
    pixels.insert(pixels.end(), rec + 1, rec + kCifarRecordBytes);
  }
}

Cifar10Dataset::Cifar10Dataset(const std::string& dir, bool train) {
  std::vector<std::string> files;
  if (train)
    for (int i = 1; i <= 5; ++i) files.push_back(dir + "/data_batch_" + std::to_string(i) + ".bin");
  else
    files.push_back(dir + "/test_batch.bin");
  for (const std::string& f : files) read_cifar10_file(find_plain_or_gz(f), labels_, pixels_);
}

Example Cifar10Dataset::get(int64_t index) const {
  check_index("Cifar10Dataset", index, size());
  const uint8_t* px = pixels_.data() + index * kCifarImageBytes;
  return byte_image_example(px, {3, 32, 32}, labels_[static_cast<size_t>(index)]);
}

const std::vector<std::string>& cifar10_classes() {
  static const std::vector<std::string> names = {"airplane", "automobile", "bird",  "cat",  "deer",
                                                 "dog",      "frog",       "horse", "ship", "truck"};
  return names;
}

}  // namespace precis::data
