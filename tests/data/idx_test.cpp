// IDX reader: the real Fashion-MNIST files, and malformed files made here.
#include <catch2/catch.hpp>

#include <filesystem>

#include "core/error.h"
#include "data/file_bytes.h"
#include "data/idx.h"
#include "test_files.h"

using namespace precis;
using namespace precis::data;
using namespace precis::data::testing;

namespace {

bool have_fashion_mnist() {
  if (std::filesystem::exists(std::string(kFashionMnistDir) + "/t10k-images-idx3-ubyte.gz")) return true;
  WARN("Fashion-MNIST is not installed (scripts/install-deps.sh --data): skipped");
  return false;
}

// Every label is one of 10 classes and each class holds `per_class` examples.
void require_balanced_classes(const std::vector<uint8_t>& labels, int64_t per_class) {
  std::vector<int64_t> counts(10, 0);
  for (uint8_t label : labels) {
    REQUIRE(label < 10);
    ++counts[label];
  }
  for (int64_t c : counts) REQUIRE(c == per_class);
}

std::vector<uint8_t> iota_bytes(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 37 % 251);
  return v;
}

}  // namespace

TEST_CASE("idx: Fashion-MNIST test split", "[data]") {
  if (!have_fashion_mnist()) return;
  MnistDataset test(kFashionMnistDir, /*train=*/false);
  REQUIRE(test.size() == 10000);
  REQUIRE(test.height() == 28);
  REQUIRE(test.width() == 28);
  require_balanced_classes(test.labels(), 1000);

  Example ex = test.get(123);
  REQUIRE(ex[0].sizes() == Shape{1, 28, 28});
  REQUIRE(ex[0].dtype() == DType::f32);
  REQUIRE(ex[1].dtype() == DType::i64);
  REQUIRE(ex[1].dim() == 0);
  REQUIRE(ex[1].item<int64_t>() == test.labels()[123]);
  const auto pixels = ex[0].to_vector<float>();
  float lo = 1, hi = 0;
  for (size_t i = 0; i < pixels.size(); ++i) {
    REQUIRE(pixels[i] == static_cast<float>(test.pixels(123)[i]) / 255.0f);
    lo = std::min(lo, pixels[i]);
    hi = std::max(hi, pixels[i]);
  }
  REQUIRE(lo == 0.0f);  // Fashion-MNIST images have a black background and bright pixels
  REQUIRE(hi > 0.5f);

  // The tensor readers agree with the dataset.
  const std::string dir = kFashionMnistDir;
  Tensor images = read_idx_images(dir + "/t10k-images-idx3-ubyte.gz");
  Tensor labels = read_idx_labels(dir + "/t10k-labels-idx1-ubyte.gz");
  REQUIRE(images.sizes() == Shape{10000, 28, 28});
  REQUIRE(labels.sizes() == Shape{10000});
  REQUIRE(images.select(0, 123).to_vector<float>() == pixels);
  REQUIRE(labels.to_vector<int64_t>()[9999] == test.labels()[9999]);
}

TEST_CASE("idx: Fashion-MNIST training split", "[data]") {
  if (!have_fashion_mnist()) return;
  MnistDataset train(kFashionMnistDir, /*train=*/true);
  REQUIRE(train.size() == 60000);
  require_balanced_classes(train.labels(), 6000);
  REQUIRE(train.get(59999)[0].sizes() == Shape{1, 28, 28});
  REQUIRE(fashion_mnist_classes().size() == 10);
}

TEST_CASE("idx: generated files, plain and gzip, all element types", "[data]") {
  ScratchDir dir;
  const auto pixels = iota_bytes(3 * 4 * 5);
  write_bytes(dir.file("images"), idx_bytes(0x08, {3, 4, 5}, pixels));
  write_bytes(dir.file("images.gz"), gzip_stored(idx_bytes(0x08, {3, 4, 5}, pixels)));
  for (const char* name : {"images", "images.gz"}) {
    Tensor t = read_idx_images(dir.file(name));
    REQUIRE(t.sizes() == Shape{3, 4, 5});
    REQUIRE(t.to_vector<float>()[17] == static_cast<float>(pixels[17]) / 255.0f);
  }
  // A large payload spans several stored blocks and zlib output chunks.
  const auto big = iota_bytes(300000);
  write_bytes(dir.file("big.gz"), gzip_stored(idx_bytes(0x08, {300000}, big)));
  REQUIRE(read_idx(dir.file("big.gz")).bytes == big);
  // Concatenated gzip members are one stream.
  auto two = gzip_stored({0, 0, 0x08, 1, 0, 0, 0, 3});
  const auto tail = gzip_stored({7, 8, 9});
  two.insert(two.end(), tail.begin(), tail.end());
  write_bytes(dir.file("two.gz"), two);
  REQUIRE(read_idx_labels(dir.file("two.gz")).to_vector<int64_t>() == std::vector<int64_t>{7, 8, 9});

  write_bytes(dir.file("i16"), idx_bytes(0x0B, {2}, {0xFF, 0xFE, 0x01, 0x00}));
  REQUIRE(idx_to_tensor(read_idx(dir.file("i16"))).to_vector<int32_t>() == std::vector<int32_t>{-2, 256});
  write_bytes(dir.file("f32"), idx_bytes(0x0D, {1}, {0x3F, 0xC0, 0x00, 0x00}));
  REQUIRE(idx_to_tensor(read_idx(dir.file("f32"))).to_vector<float>() == std::vector<float>{1.5f});
  write_bytes(dir.file("i8"), idx_bytes(0x09, {2}, {0x80, 0x7F}));
  REQUIRE(idx_to_tensor(read_idx(dir.file("i8"))).to_vector<int32_t>() == std::vector<int32_t>{-128, 127});

  // An MNIST-layout folder with plain files.
  write_bytes(dir.file("train-images-idx3-ubyte"), idx_bytes(0x08, {3, 4, 5}, pixels));
  write_bytes(dir.file("train-labels-idx1-ubyte.gz"), gzip_stored(idx_bytes(0x08, {3}, {2, 0, 1})));
  MnistDataset ds(dir.path().string(), true);
  REQUIRE(ds.size() == 3);
  REQUIRE(ds.get(2)[1].item<int64_t>() == 1);
  REQUIRE(ds.get(1)[0].sizes() == Shape{1, 4, 5});
  REQUIRE_THROWS_AS(ds.get(3), IndexError);
}

TEST_CASE("idx: malformed files raise IOError naming the file and the problem", "[data]") {
  ScratchDir dir;
  const auto payload = iota_bytes(2 * 3 * 3);
  auto check = [&](const std::string& name, const std::vector<uint8_t>& bytes, const std::vector<std::string>& parts) {
    INFO(name);
    write_bytes(dir.file(name), bytes);
    std::vector<std::string> all = parts;
    all.push_back(dir.file(name));
    require_io_error([&] { read_idx_images(dir.file(name)); }, all);
  };
  check("empty", {}, {"too short"});
  check("bad-magic", {1, 2, 8, 3, 0, 0, 0, 1}, {"bad magic"});
  check("bad-type", idx_bytes(0x07, {2, 3, 3}, payload), {"unknown element type 0x7"});
  check("zero-dims", {0, 0, 8, 0}, {"0 dimensions"});
  check("short-header", {0, 0, 8, 3, 0, 0, 0, 2, 0, 0}, {"truncated header"});
  auto truncated = idx_bytes(0x08, {2, 3, 3}, payload);
  truncated.resize(truncated.size() - 1);
  check("truncated", truncated, {"truncated data", "[2, 3, 3]", "need 18 bytes", "has 17"});
  auto extra = idx_bytes(0x08, {2, 3, 3}, payload);
  extra.push_back(0);
  check("extra", extra, {"1 unexpected bytes", "inconsistent"});
  check("wrong-ndims", idx_bytes(0x08, {18}, payload), {"expected 3 dims"});
  check("wrong-type", idx_bytes(0x0C, {1, 1, 1}, {0, 0, 0, 1}), {"expected 0x08"});

  auto gz = gzip_stored(idx_bytes(0x08, {2, 3, 3}, payload));
  auto gz_truncated = gz;
  gz_truncated.resize(gz.size() - 12);
  check("truncated.gz", gz_truncated, {"gzip stream is truncated"});
  auto gz_bad_crc = gz;
  gz_bad_crc[gz.size() - 6] ^= 0xFF;
  check("bad-crc.gz", gz_bad_crc, {"corrupt gzip data", "incorrect data check"});
  auto gz_bad_block = gz;
  gz_bad_block[10] = 0x07;  // BTYPE = 11: reserved
  check("bad-block.gz", gz_bad_block, {"corrupt gzip data"});

  require_io_error([&] { read_idx(dir.file("missing")); }, {"No such file", dir.file("missing")});
  require_io_error([&] { MnistDataset(dir.path().string(), false); }, {"t10k-images-idx3-ubyte", "nor"});
  write_bytes(dir.file("t10k-images-idx3-ubyte"), idx_bytes(0x08, {2, 3, 3}, payload));
  write_bytes(dir.file("t10k-labels-idx1-ubyte"), idx_bytes(0x08, {3}, {0, 1, 2}));
  require_io_error([&] { MnistDataset(dir.path().string(), false); }, {"has 2 images", "has 3 labels"});
}
