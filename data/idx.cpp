#include "data/idx.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "data/file_bytes.h"
#include "tensor/factory.h"

namespace precis::data {

namespace {

int64_t element_bytes(uint8_t type_code) {
  switch (type_code) {
    case 0x08: case 0x09: return 1;
    case 0x0B: return 2;
    case 0x0C: case 0x0D: return 4;
    case 0x0E: return 8;
    default: return 0;
  }
}

uint32_t load_be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

std::string dims_str(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

IdxArray parse_idx(std::vector<uint8_t> raw, const std::string& path) {
  PRECIS_CHECK_T(IOError, raw.size() >= 4, "read_idx: ", path, ": file too short for an IDX header (", raw.size(),
                 " bytes; an IDX file starts with 4 magic bytes)");
  PRECIS_CHECK_T(IOError, raw[0] == 0 && raw[1] == 0, "read_idx: ", path,
                 ": bad magic (the first two bytes must be 0; is this an IDX file?)");
  IdxArray a;
  a.type_code = raw[2];
  const int64_t elem = element_bytes(a.type_code);
  PRECIS_CHECK_T(IOError, elem > 0, "read_idx: ", path, ": unknown element type 0x", std::hex,
                 int{a.type_code}, std::dec, " (expected 0x08 u8, 0x09 i8, 0x0B i16, 0x0C i32, 0x0D f32 or 0x0E f64)");
  const int ndims = raw[3];
  PRECIS_CHECK_T(IOError, ndims >= 1, "read_idx: ", path, ": the header declares 0 dimensions");
  const size_t header = 4 + 4 * static_cast<size_t>(ndims);
  PRECIS_CHECK_T(IOError, raw.size() >= header, "read_idx: ", path, ": truncated header (", ndims,
                 " dims need ", header, " bytes, the file has ", raw.size(), ")");
  int64_t numel = 1;
  for (int d = 0; d < ndims; ++d) {
    a.dims.push_back(load_be32(raw.data() + 4 + 4 * d));
    numel *= a.dims.back();
    PRECIS_CHECK_T(IOError, numel <= (int64_t{1} << 40), "read_idx: ", path, ": implausible dims ",
                   dims_str(a.dims), " (corrupt header?)");
  }
  const auto payload = static_cast<size_t>(numel * elem);
  PRECIS_CHECK_T(IOError, raw.size() - header >= payload, "read_idx: ", path, ": truncated data: dims ",
                 dims_str(a.dims), " need ", payload, " bytes after the header, the file has ", raw.size() - header);
  PRECIS_CHECK_T(IOError, raw.size() - header == payload, "read_idx: ", path, ": ", raw.size() - header - payload,
                 " unexpected bytes after the data of dims ", dims_str(a.dims),
                 " (dims inconsistent with the file size)");
  raw.erase(raw.begin(), raw.begin() + static_cast<std::ptrdiff_t>(header));
  a.bytes = std::move(raw);
  return a;
}

IdxArray read_u8_idx(const std::string& path, size_t ndims, const char* what) {
  IdxArray a = read_idx(path);
  PRECIS_CHECK_T(IOError, a.type_code == 0x08, "read_idx_", what, ": ", path, ": element type 0x", std::hex,
                 int{a.type_code}, std::dec, ", expected 0x08 (unsigned bytes)");
  PRECIS_CHECK_T(IOError, a.dims.size() == ndims, "read_idx_", what, ": ", path, ": dims ", dims_str(a.dims),
                 ", expected ", ndims, " dims");
  return a;
}

}  // namespace

int64_t IdxArray::numel() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

IdxArray read_idx(const std::string& path) { return parse_idx(read_file_bytes(path), path); }

Tensor idx_to_tensor(const IdxArray& a) {
  const int64_t n = a.numel();
  const uint8_t* p = a.bytes.data();
  auto be = [&](int64_t i, int bytes) {
    uint64_t v = 0;
    for (int b = 0; b < bytes; ++b) v = (v << 8) | p[i * bytes + b];
    return v;
  };
  switch (a.type_code) {
    case 0x0D: {
      Tensor t = empty(a.dims, {.dtype = DType::f32});
      auto* out = t.data_ptr<float>();
      for (int64_t i = 0; i < n; ++i) {
        const auto bits = static_cast<uint32_t>(be(i, 4));
        std::memcpy(out + i, &bits, 4);
      }
      return t;
    }
    case 0x0E: {
      Tensor t = empty(a.dims, {.dtype = DType::f64});
      auto* out = t.data_ptr<double>();
      for (int64_t i = 0; i < n; ++i) {
        const uint64_t bits = be(i, 8);
        std::memcpy(out + i, &bits, 8);
      }
      return t;
    }
    default: {
      Tensor t = empty(a.dims, {.dtype = DType::i32});
      auto* out = t.data_ptr<int32_t>();
      for (int64_t i = 0; i < n; ++i) {
        switch (a.type_code) {
          case 0x08: out[i] = p[i]; break;
          case 0x09: out[i] = static_cast<int8_t>(p[i]); break;
          case 0x0B: out[i] = static_cast<int16_t>(static_cast<uint16_t>(be(i, 2))); break;
          default: out[i] = static_cast<int32_t>(static_cast<uint32_t>(be(i, 4))); break;
        }
      }
      return t;
    }
  }
}

Tensor read_idx_images(const std::string& path) {
  const IdxArray a = read_u8_idx(path, 3, "images");
  Tensor t = empty(a.dims, {.dtype = DType::f32});
  std::transform(a.bytes.begin(), a.bytes.end(), t.data_ptr<float>(),
                 [](uint8_t b) { return static_cast<float>(b) / 255.0f; });
  return t;
}

Tensor read_idx_labels(const std::string& path) {
  const IdxArray a = read_u8_idx(path, 1, "labels");
  Tensor t = empty(a.dims, {.dtype = DType::i64});
  std::copy(a.bytes.begin(), a.bytes.end(), t.data_ptr<int64_t>());
  return t;
}

MnistDataset::MnistDataset(const std::string& dir, bool train) {
  const std::string prefix = dir + "/" + (train ? "train" : "t10k");
  const std::string image_path = find_plain_or_gz(prefix + "-images-idx3-ubyte");
  const std::string label_path = find_plain_or_gz(prefix + "-labels-idx1-ubyte");
  IdxArray images = read_u8_idx(image_path, 3, "images");
  IdxArray labels = read_u8_idx(label_path, 1, "labels");
  PRECIS_CHECK_T(IOError, images.dims[0] == labels.dims[0], "MnistDataset: ", image_path, " has ", images.dims[0],
                 " images but ", label_path, " has ", labels.dims[0], " labels");
  size_ = images.dims[0];
  height_ = images.dims[1];
  width_ = images.dims[2];
  images_ = std::move(images.bytes);
  labels_ = std::move(labels.bytes);
}

const uint8_t* MnistDataset::pixels(int64_t index) const {
  check_index("MnistDataset", index, size_);
  return images_.data() + index * height_ * width_;
}

Example MnistDataset::get(int64_t index) const {
  const uint8_t* px = pixels(index);
  Tensor image = empty({1, height_, width_}, {.dtype = DType::f32});
  std::transform(px, px + height_ * width_, image.data_ptr<float>(),
                 [](uint8_t b) { return static_cast<float>(b) / 255.0f; });
  return Example{image, scalar_tensor(static_cast<int64_t>(labels_[static_cast<size_t>(index)]), {.dtype = DType::i64})};
}

const std::vector<std::string>& fashion_mnist_classes() {
  static const std::vector<std::string> names = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                 "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  return names;
}

}  // namespace precis::data
