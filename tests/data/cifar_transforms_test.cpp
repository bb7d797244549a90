// CIFAR-10 binary reader on generated files, and the image transforms.
#include <catch2/catch.hpp>

#include <set>

#include "core/error.h"
#include "data/cifar.h"
#include "data/data_loader.h"
#include "data/transforms.h"
#include "tensor/factory.h"
#include "test_files.h"

using namespace precis;
using namespace precis::data;
using namespace precis::data::testing;

namespace {

// Record r of a generated file: label (r + salt) % 10, pixel i = (i * 7 + r + salt) % 256.
std::vector<uint8_t> cifar_records(int n, int salt) {
  std::vector<uint8_t> out;
  for (int r = 0; r < n; ++r) {
    out.push_back(static_cast<uint8_t>((r + salt) % 10));
    for (int i = 0; i < kCifarImageBytes; ++i) out.push_back(static_cast<uint8_t>((i * 7 + r + salt) % 256));
  }
  return out;
}

Tensor test_image(int64_t c, int64_t h, int64_t w) {
  std::vector<float> v(static_cast<size_t>(c * h * w));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i + 1);
  return from_vector(v, {c, h, w});
}

}  // namespace

TEST_CASE("cifar: reads generated batch files", "[data]") {
  ScratchDir dir;
  const int counts[] = {3, 2, 1, 1, 2};
  for (int b = 1; b <= 5; ++b)
    write_bytes(dir.file("data_batch_" + std::to_string(b) + ".bin"), cifar_records(counts[b - 1], 10 * b));
  write_bytes(dir.file("test_batch.bin.gz"), gzip_stored(cifar_records(4, 3)));

  Cifar10Dataset train(dir.path().string(), true);
  REQUIRE(train.size() == 9);
  // Example 4 is record 1 of data_batch_2 (salt 20).
  Example ex = train.get(4);
  REQUIRE(ex[0].sizes() == Shape{3, 32, 32});
  REQUIRE(ex[1].item<int64_t>() == (1 + 20) % 10);
  const auto px = ex[0].to_vector<float>();
  for (int c = 0; c < 3; ++c)
    for (int y : {0, 17, 31})
      for (int x : {0, 5, 31}) {
        const int i = c * 1024 + y * 32 + x;
        REQUIRE(px[static_cast<size_t>(i)] == static_cast<float>((i * 7 + 1 + 20) % 256) / 255.0f);
      }
  Cifar10Dataset test(dir.path().string(), false);
  REQUIRE(test.size() == 4);
  REQUIRE(test.labels() == std::vector<uint8_t>{3, 4, 5, 6});
  REQUIRE(cifar10_classes()[3] == "cat");
}

TEST_CASE("cifar: malformed files raise IOError naming the file", "[data]") {
  ScratchDir dir;
  auto bytes = cifar_records(2, 0);
  bytes.pop_back();
  write_bytes(dir.file("test_batch.bin"), bytes);
  REQUIRE_THROWS_WITH(Cifar10Dataset(dir.path().string(), false),
                      Catch::Contains("test_batch.bin") && Catch::Contains("not a whole number of 3073-byte records"));
  bytes = cifar_records(2, 0);
  bytes[kCifarRecordBytes] = 10;
  write_bytes(dir.file("test_batch.bin"), bytes);
  REQUIRE_THROWS_WITH(Cifar10Dataset(dir.path().string(), false),
                      Catch::Contains("record 1 has label 10"));
  write_bytes(dir.file("test_batch.bin"), {});
  REQUIRE_THROWS_AS(Cifar10Dataset(dir.path().string(), false), IOError);
  REQUIRE_THROWS_WITH(Cifar10Dataset(dir.path().string(), true), Catch::Contains("data_batch_1.bin"));
}

TEST_CASE("transforms: random crop pads with zeros and crops at the drawn offset", "[data]") {
  const Tensor img = test_image(2, 5, 6);
  const auto src = img.to_vector<float>();
  SampleRng id_rng(1, 2, 3);
  REQUIRE(random_crop(5, 6, 0)(img, id_rng).to_vector<float>() == src);

  std::set<std::pair<int64_t, int64_t>> offsets;
  for (uint64_t s = 0; s < 400; ++s) {
    SampleRng rng(9, s, 0), replay(9, s, 0);
    const Tensor out = random_crop(4, 3, 2)(img, rng);
    REQUIRE(out.sizes() == Shape{2, 4, 3});
    const int64_t top = replay.randint(5 + 4 - 4 + 1) - 2;
    const int64_t left = replay.randint(6 + 4 - 3 + 1) - 2;
    offsets.insert({top, left});
    const auto got = out.to_vector<float>();
    for (int64_t c = 0; c < 2; ++c)
      for (int64_t y = 0; y < 4; ++y)
        for (int64_t x = 0; x < 3; ++x) {
          const int64_t sy = top + y, sx = left + x;
          const float want = (sy < 0 || sy >= 5 || sx < 0 || sx >= 6) ? 0.0f : src[static_cast<size_t>((c * 5 + sy) * 6 + sx)];
          REQUIRE(got[static_cast<size_t>((c * 4 + y) * 3 + x)] == want);
        }
  }
  REQUIRE(offsets.size() == 6 * 8);  // every offset in [-2, 3] x [-2, 5] occurs
  SampleRng rng(0, 0, 0);
  REQUIRE_THROWS_AS(random_crop(8, 8, 1)(img, rng), ShapeError);
  REQUIRE_THROWS_AS(random_crop(2, 2)(zeros({5, 6}), rng), ShapeError);
  REQUIRE_THROWS_AS(random_crop(2, 2)(zeros({1, 5, 6}, {.dtype = DType::f64}), rng), DTypeError);
}

TEST_CASE("transforms: horizontal flip, normalise, compose", "[data]") {
  const Tensor img = test_image(2, 3, 4);
  SampleRng rng(0, 0, 0);
  const auto flipped = random_horizontal_flip(1.0)(img, rng).to_vector<float>();
  for (int64_t r = 0; r < 6; ++r)
    for (int64_t x = 0; x < 4; ++x) REQUIRE(flipped[static_cast<size_t>(r * 4 + x)] == static_cast<float>(r * 4 + (3 - x) + 1));
  REQUIRE(random_horizontal_flip(0.0)(img, rng).to_vector<float>() == img.to_vector<float>());
  int flips = 0;
  for (uint64_t s = 0; s < 2000; ++s) {
    SampleRng r(5, s, 1);
    flips += random_horizontal_flip()(img, r).to_vector<float>()[0] != 1.0f;
  }
  REQUIRE(flips > 900);
  REQUIRE(flips < 1100);

  const auto norm = normalize({1.0f, 2.0f}, {2.0f, 4.0f})(img, rng).to_vector<float>();
  REQUIRE(norm[0] == (1.0f - 1.0f) / 2.0f);
  REQUIRE(norm[12] == (13.0f - 2.0f) / 4.0f);
  REQUIRE(normalize({0.5f}, {0.5f})(img, rng).to_vector<float>()[1] == 3.0f);
  REQUIRE_THROWS_AS(normalize({0.5f, 0.5f, 0.5f}, {1.f, 1.f, 1.f})(img, rng), ShapeError);
  REQUIRE_THROWS_AS(normalize({0.5f}, {0.0f}), ValueError);

  // compose draws from one stream in order: the same as applying the parts by hand.
  const Transform t = compose({random_crop(3, 4, 1), random_horizontal_flip(), normalize({0.1f}, {2.0f})});
  SampleRng a(3, 4, 5), b(3, 4, 5);
  const Tensor by_hand = normalize({0.1f}, {2.0f})(random_horizontal_flip()(random_crop(3, 4, 1)(img, b), b), b);
  REQUIRE(t(img, a).to_vector<float>() == by_hand.to_vector<float>());
}

TEST_CASE("transforms: augmented batches are the same for any worker count", "[data]") {
  Tensor images = rand({40, 3, 8, 8});
  Tensor labels = arange(40.0, {.dtype = DType::i64});
  auto base = std::make_shared<TensorDataset>(std::vector<Tensor>{images, labels});
  auto augmented = std::make_shared<TransformDataset>(
      base, compose({random_crop(8, 8, 2), random_horizontal_flip(), normalize({0.5f}, {0.25f})}));
  auto collect = [&](int workers, int64_t epoch) {
    DataLoader loader(augmented, {.batch_size = 6, .shuffle = true, .seed = 11, .num_workers = workers});
    std::vector<float> all;
    for (Batch& b : loader.epoch(epoch)) {
      const auto v = b[0].to_vector<float>();
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  };
  const auto ref = collect(0, 2);
  REQUIRE(collect(1, 2) == ref);
  REQUIRE(collect(3, 2) == ref);
  REQUIRE(collect(3, 3) != ref);
  REQUIRE(augmented->get(5)[0].to_vector<float>() == augmented->get(5)[0].to_vector<float>());
}
