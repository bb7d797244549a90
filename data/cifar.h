#pragma once
// CIFAR-10 in its binary distribution (cifar-10-batches-bin): each record is 1 label byte then
// 3072 pixel bytes (1024 red, 1024 green, 1024 blue, each 32×32 row-major).
#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace precis::data {

inline constexpr int64_t kCifarImageBytes = 3 * 32 * 32;
inline constexpr int64_t kCifarRecordBytes = 1 + kCifarImageBytes;
/// The distribution's batch files hold 10000 records each; a larger file (or one that inflates to
/// more) is refused before it is read further.
inline constexpr int64_t kCifarMaxRecordsPerFile = 10000;

/// The records of one CIFAR-10 batch file (plain or gzip), appended to `labels` and `pixels`.
/// IOError naming the file when its size is not a multiple of 3073 bytes, it holds more than
/// kCifarMaxRecordsPerFile records, or a label exceeds 9.
void read_cifar10_file(const std::string& path, std::vector<uint8_t>& labels, std::vector<uint8_t>& pixels);

/// CIFAR-10 from a folder of data_batch_1.bin … data_batch_5.bin (train) or test_batch.bin
/// (test). Example = {image f32 (3, 32, 32) in [0, 1] (byte / 255), label i64 0-d}.
class Cifar10Dataset : public Dataset {
 public:
  /// Reads the five training files (train) or the test file into memory, each plain or with a .gz
  /// suffix; IOError naming the file when one is missing or malformed.
  explicit Cifar10Dataset(const std::string& dir, bool train = true);
  int64_t size() const override { return static_cast<int64_t>(labels_.size()); }
  Example get(int64_t index) const override;
  const std::vector<uint8_t>& labels() const { return labels_; }  ///< every label (0..9), in dataset order

 private:
  std::vector<uint8_t> labels_;
  std::vector<uint8_t> pixels_;
};

/// CIFAR-10's class names, by label.
const std::vector<std::string>& cifar10_classes();

}  // namespace precis::data
