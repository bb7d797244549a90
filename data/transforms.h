#pragma once
// Image transforms for augmentation. A transform maps one image (C, H, W) f32 to another and
// draws its randomness from the example's SampleRng, so the result depends only on
// (loader seed, epoch, example index): never on worker count or timing.
//
//   auto train = std::make_shared<data::TransformDataset>(
//       std::make_shared<data::Cifar10Dataset>(dir),
//       data::compose({data::random_crop(32, 32, 4), data::random_horizontal_flip(),
//                      data::normalize({0.49f, 0.48f, 0.45f}, {0.25f, 0.24f, 0.26f})}));
#include <functional>
#include <memory>
#include <vector>

#include "data/dataset.h"

namespace precis::data {

/// image: (C, H, W) f32 on the CPU → transformed image (a new tensor, or the input itself when
/// the transform leaves it unchanged: transforms never write into their input).
using Transform = std::function<Tensor(const Tensor& image, SampleRng& rng)>;

/// Zero-pads `padding` pixels on every side, then crops (height, width) at a uniformly random
/// offset (as torchvision's RandomCrop(size, padding)). Draws two integers: top, then left.
/// ShapeError when the crop is larger than the padded image.
Transform random_crop(int64_t height, int64_t width, int64_t padding = 0);

/// Mirrors the image left–right with probability p. Draws one uniform number.
Transform random_horizontal_flip(double p = 0.5);

/// (x - mean[c]) / std[c] per channel; mean and std have one entry per channel (or one for all).
/// Draws nothing.
Transform normalize(std::vector<float> mean, std::vector<float> std);

/// Applies the transforms in order, sharing the example's random stream.
Transform compose(std::vector<Transform> transforms);

/// A dataset whose field `field` (the image) goes through `transform`. The loader's per-example
/// random stream drives it (sample()); get(index) uses the fixed stream SampleRng(0, index, 0),
/// so it is deterministic too.
class TransformDataset : public Dataset {
 public:
  /// Shares `base`; ValueError when it is null or `transform` is empty. An example with no field
  /// `field` raises IndexError when it is loaded.
  TransformDataset(std::shared_ptr<const Dataset> base, Transform transform, size_t field = 0);
  int64_t size() const override { return base_->size(); }
  Example get(int64_t index) const override;
  Example sample(int64_t index, SampleRng& rng) const override;

 private:
  std::shared_ptr<const Dataset> base_;
  Transform transform_;
  size_t field_;
};

}  // namespace precis::data
