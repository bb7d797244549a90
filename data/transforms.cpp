#include "data/transforms.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "tensor/factory.h"

namespace precis::data {

namespace {

// The image as a contiguous f32 (C, H, W) tensor, checked.
Tensor checked_image(const Tensor& image, const char* who) {
  PRECIS_CHECK_SHAPE(image.defined() && image.dim() == 3, who, ": expects an image (C, H, W), got ",
                     image.defined() ? image.describe() : std::string("an undefined tensor"));
  PRECIS_CHECK_DTYPE(image.dtype() == DType::f32, who, ": expects f32 pixels, got ", image.describe(),
                     " (convert with .to(DType::f32))");
  PRECIS_CHECK_DEVICE(image.device().is_cpu(), who, ": runs on the CPU, got ", image.describe());
  return image.contiguous();
}

}  // namespace

Transform random_crop(int64_t height, int64_t width, int64_t padding) {
  PRECIS_CHECK(height >= 1 && width >= 1 && padding >= 0, "random_crop: needs height, width >= 1 and padding >= 0, got (",
               height, ", ", width, ", ", padding, ")");
  return [=](const Tensor& image, SampleRng& rng) {
    const Tensor in = checked_image(image, "random_crop");
    const int64_t c = in.size(0), h = in.size(1), w = in.size(2);
    PRECIS_CHECK_SHAPE(h + 2 * padding >= height && w + 2 * padding >= width, "random_crop: a ", height, "x", width,
                       " crop does not fit image ", in.describe(), " padded by ", padding);
    const int64_t top = rng.randint(h + 2 * padding - height + 1) - padding;
    const int64_t left = rng.randint(w + 2 * padding - width + 1) - padding;
    // out[ch, y, x] = in[ch, top + y, left + x], zero outside the image.
    Tensor out = zeros({c, height, width});
    const float* src = in.data_ptr<float>();
    float* dst = out.data_ptr<float>();
    const int64_t x0 = std::max<int64_t>(0, -left), x1 = std::min(width, w - left);
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t y = 0; y < height; ++y) {
        const int64_t sy = top + y;
        if (sy < 0 || sy >= h || x1 <= x0) continue;
        std::memcpy(dst + (ch * height + y) * width + x0, src + (ch * h + sy) * w + left + x0,
                    static_cast<size_t>(x1 - x0) * sizeof(float));
      }
    return out;
  };
}

Transform random_horizontal_flip(double p) {
  PRECIS_CHECK(p >= 0.0 && p <= 1.0, "random_horizontal_flip: p must be in [0, 1], got ", p);
  return [=](const Tensor& image, SampleRng& rng) {
    const Tensor in = checked_image(image, "random_horizontal_flip");
    if (!rng.bernoulli(p)) return in;
    const int64_t rows = in.size(0) * in.size(1), w = in.size(2);
    Tensor out = empty(in.sizes());
    const float* src = in.data_ptr<float>();
    float* dst = out.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r) std::reverse_copy(src + r * w, src + (r + 1) * w, dst + r * w);
    return out;
  };
}

Transform normalize(std::vector<float> mean, std::vector<float> std) {
  PRECIS_CHECK(!mean.empty() && mean.size() == std.size(), "normalize: mean and std need the same non-zero length, got ",
               mean.size(), " and ", std.size());
  for (float s : std) PRECIS_CHECK(s > 0.0f, "normalize: std entries must be > 0, got ", s);
  return [mean = std::move(mean), std = std::move(std)](const Tensor& image, SampleRng&) {
    const Tensor in = checked_image(image, "normalize");
    const int64_t c = in.size(0), plane = in.size(1) * in.size(2);
    PRECIS_CHECK_SHAPE(mean.size() == 1 || static_cast<int64_t>(mean.size()) == c, "normalize: ", mean.size(),
                       " means/stds for an image with ", c, " channels: ", in.describe());
    Tensor out = empty(in.sizes());
    const float* src = in.data_ptr<float>();
    float* dst = out.data_ptr<float>();
    for (int64_t ch = 0; ch < c; ++ch) {
      const size_t k = mean.size() == 1 ? 0 : static_cast<size_t>(ch);
      const float m = mean[k], inv = 1.0f / std[k];
      for (int64_t i = 0; i < plane; ++i) dst[ch * plane + i] = (src[ch * plane + i] - m) * inv;
    }
    return out;
  };
}

Transform compose(std::vector<Transform> transforms) {
  for (const Transform& t : transforms) PRECIS_CHECK(t != nullptr, "compose: an empty transform");
  return [transforms = std::move(transforms)](const Tensor& image, SampleRng& rng) {
    Tensor x = image;
    for (const Transform& t : transforms) x = t(x, rng);
    return x;
  };
}

TransformDataset::TransformDataset(std::shared_ptr<const Dataset> base, Transform transform, size_t field)
    : base_(std::move(base)), transform_(std::move(transform)), field_(field) {
  PRECIS_CHECK(base_ != nullptr, "TransformDataset: the base dataset is null");
  PRECIS_CHECK(transform_ != nullptr, "TransformDataset: the transform is empty");
}

Example TransformDataset::get(int64_t index) const {
  SampleRng rng(0, static_cast<uint64_t>(index), 0);
  return sample(index, rng);
}

Example TransformDataset::sample(int64_t index, SampleRng& rng) const {
  Example ex = base_->sample(index, rng);
  PRECIS_CHECK_INDEX(field_ < ex.size(), "TransformDataset: field ", field_, " of an example with ", ex.size(),
                     " fields");
  ex.tensors[field_] = transform_(ex.tensors[field_], rng);
  return ex;
}

}  // namespace precis::data
