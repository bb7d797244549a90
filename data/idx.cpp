#include "data/idx.h"

#include <algorithm>
#include <cstring>

#include "core/checked_math.h"
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

// The most elements an IDX header may declare: 2^40 (a terabyte of bytes) is far beyond any
// dataset in the format, so a larger count means a corrupt header (a flipped bit in a dim).
constexpr int64_t kMaxIdxElements = int64_t{1} << 40;

// Reads the header, then exactly the payload it declares, then checks that nothing follows. A
// gzip file is inflated only as far as the header says it reaches (and at most 1 MiB further to
// count trailing bytes), so a small file that inflates to gigabytes is rejected cheaply.
IdxArray parse_idx(ByteReader& r) {
  const std::string& path = r.path();
  uint8_t magic[4];
  const size_t got_magic = r.read(magic, 4);
  PRECIS_CHECK_T(IOError, got_magic == 4, "read_idx: ", path, ": file too short for an IDX header (", got_magic,
                 " bytes; an IDX file starts with 4 magic bytes)");
  PRECIS_CHECK_T(IOError, magic[0] == 0 && magic[1] == 0, "read_idx: ", path,
                 ": bad magic (the first two bytes must be 0; is this an IDX file?)");
  IdxArray a;
  a.type_code = magic[2];
  const int64_t elem = element_bytes(a.type_code);
  PRECIS_CHECK_T(IOError, elem > 0, "read_idx: ", path, ": unknown element type 0x", std::hex,
                 int{a.type_code}, std::dec, " (expected 0x08 u8, 0x09 i8, 0x0B i16, 0x0C i32, 0x0D f32 or 0x0E f64)");
  const int ndims = magic[3];
  PRECIS_CHECK_T(IOError, ndims >= 1, "read_idx: ", path, ": the header declares 0 dimensions");
  const size_t header = 4 + 4 * static_cast<size_t>(ndims);
  std::vector<uint8_t> dim_bytes(4 * static_cast<size_t>(ndims));
  const size_t got_dims = r.read(dim_bytes.data(), dim_bytes.size());
  PRECIS_CHECK_T(IOError, got_dims == dim_bytes.size(), "read_idx: ", path, ": truncated header (", ndims,
                 " dims need ", header, " bytes, the file has ", 4 + got_dims, ")");
  // Checked after every dim, before the product can overflow: a flipped bit in a header makes a
  // dim of up to 2^32 - 1, and 255 of them multiply far past int64.
  int64_t numel = 1;
  for (int d = 0; d < ndims; ++d) {
    a.dims.push_back(load_be32(dim_bytes.data() + 4 * d));
    const std::optional<int64_t> n = checked_mul(numel, a.dims.back());
    PRECIS_CHECK_T(IOError, n && *n <= kMaxIdxElements, "read_idx: ", path, ": implausible dims ",
                   dims_str(a.dims), d + 1 < ndims ? "..." : "", " (more than 2^40 elements; corrupt header?)");
    numel = *n;
  }
  const auto payload = static_cast<size_t>(numel * elem);  // <= 2^43
  // A plain file's size is known: check it before allocating what the header asks for.
  if (!r.compressed()) {
    const uint64_t have = r.file_size() - header;
    PRECIS_CHECK_T(IOError, have >= payload, "read_idx: ", path, ": truncated data: dims ", dims_str(a.dims), " need ",
                   payload, " bytes after the header, the file has ", have);
    PRECIS_CHECK_T(IOError, have == payload, "read_idx: ", path, ": ", have - payload,
                   " unexpected bytes after the data of dims ", dims_str(a.dims),
                   " (dims inconsistent with the file size)");
  }
  // Grow the buffer as data arrives (doubling from 1 MiB), so a gzip file whose header claims
  // more than it holds costs only what it holds.
  size_t have = 0;
  while (have < payload) {
    const size_t want = std::min(payload, std::max(have * 2, size_t{1} << 20));
    a.bytes.resize(want);
    have += r.read(a.bytes.data() + have, want - have);
    PRECIS_CHECK_T(IOError, have == want, "read_idx: ", path, ": truncated data: dims ", dims_str(a.dims), " need ",
                   payload, " bytes after the header, the file has ", have);
  }
  constexpr uint64_t kCountTrailing = uint64_t{1} << 20;
  const uint64_t extra = r.skip(kCountTrailing + 1);
  PRECIS_CHECK_T(IOError, extra == 0, "read_idx: ", path, ": ",
                 extra > kCountTrailing ? "more than " + std::to_string(kCountTrailing) : std::to_string(extra),
                 " unexpected bytes after the data of dims ", dims_str(a.dims),
                 " (dims inconsistent with the file size)");
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
  const std::optional<int64_t> n = checked_numel(dims);
  PRECIS_CHECK_SHAPE(n.has_value(), "IdxArray: dims ", dims_str(dims), " are negative or overflow int64");
  return *n;
}

IdxArray read_idx(const std::string& path) {
  ByteReader reader(path);
  return parse_idx(reader);
}

Tensor idx_to_tensor(const IdxArray& a) {
  const int64_t n = a.numel();
  const int64_t elem = element_bytes(a.type_code);
  PRECIS_CHECK(elem > 0, "idx_to_tensor: unknown element type 0x", std::hex, int{a.type_code}, std::dec);
  // An IdxArray may be built by hand: its bytes must match its dims before they are read.
  const std::optional<uint64_t> need = checked_nbytes(n, static_cast<size_t>(elem));
  PRECIS_CHECK_SHAPE(need && *need == a.bytes.size(), "idx_to_tensor: dims ", dims_str(a.dims), " of element type 0x",
                     std::hex, int{a.type_code}, std::dec, " need ", n, " x ", elem, " bytes, the array holds ",
                     a.bytes.size());
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
  return byte_image_example(px, {1, height_, width_}, labels_[static_cast<size_t>(index)]);
}

const std::vector<std::string>& fashion_mnist_classes() {
  static const std::vector<std::string> names = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                 "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  return names;
}

}  // namespace precis::data
