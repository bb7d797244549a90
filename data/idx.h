#pragma once
// The IDX format of MNIST and Fashion-MNIST (http://yann.lecun.com/exdb/mnist/): a big-endian
// header (0, 0, element type, number of dims, then each dim as a u32) followed by the elements.
// Files may be gzip-compressed (the usual *.gz downloads); that is detected from the bytes.
// precis has no u8 dtype, so images come back as f32 scaled to [0, 1] and labels as i64.
#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "tensor/tensor.h"

namespace precis::data {

/// One IDX file, as stored.
struct IdxArray {
  uint8_t type_code = 0;        ///< 0x08 u8, 0x09 i8, 0x0B i16, 0x0C i32, 0x0D f32, 0x0E f64
  std::vector<int64_t> dims;    ///< the sizes from the header, outermost first
  std::vector<uint8_t> bytes;   ///< the elements, big-endian as in the file (numel * element size)
  /// The product of dims (ShapeError if that overflows int64).
  int64_t numel() const;
};

/// Reads and validates an IDX file (plain or gzip). IOError naming the file and the problem for a
/// bad magic, unknown element type, zero dims, a header or payload shorter or longer than the
/// dims say, or a bad gzip stream.
IdxArray read_idx(const std::string& path);

/// The array as a tensor of its dims: u8, i8, i16 and i32 become i32; f32 and f64 keep their type.
Tensor idx_to_tensor(const IdxArray& array);

/// An IDX u8 image file as f32 (N, H, W) in [0, 1] (byte / 255). IOError unless u8 with 3 dims.
Tensor read_idx_images(const std::string& path);

/// An IDX u8 label file as i64 (N,). IOError unless u8 with 1 dim.
Tensor read_idx_labels(const std::string& path);

/// Where the Debian package dataset-fashion-mnist installs Fashion-MNIST.
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

/// MNIST-format dataset from a folder holding {train,t10k}-{images-idx3,labels-idx1}-ubyte,
/// each plain or .gz (MNIST, Fashion-MNIST, KMNIST). Example = {image f32 (1, H, W) in [0, 1],
/// label i64 0-d}. The images stay as bytes in memory (47 MB for 60k 28×28) and are converted
/// per example. IOError when a file is missing or malformed, or the two files disagree on N.
class MnistDataset : public Dataset {
 public:
  /// Reads the train (or t10k) image and label files of `dir` into memory (see above).
  explicit MnistDataset(const std::string& dir, bool train = true);
  int64_t size() const override { return size_; }
  Example get(int64_t index) const override;
  int64_t height() const { return height_; }  ///< image rows (28 for MNIST)
  int64_t width() const { return width_; }    ///< image columns (28 for MNIST)
  /// The labels, in dataset order.
  const std::vector<uint8_t>& labels() const { return labels_; }
  /// The pixels of example `index` (height() * width() bytes, row-major).
  const uint8_t* pixels(int64_t index) const;

 private:
  int64_t size_ = 0, height_ = 0, width_ = 0;
  std::vector<uint8_t> images_;
  std::vector<uint8_t> labels_;
};

/// Fashion-MNIST's class names, by label.
const std::vector<std::string>& fashion_mnist_classes();

}  // namespace precis::data
