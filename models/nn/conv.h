#pragma once
// nn::Conv2d and the pooling layers (torch.nn.Conv2d, MaxPool2d, AvgPool2d, AdaptiveAvgPool2d).
#include <optional>
#include <string>
#include <vector>

#include "core/rng.h"
#include "models/nn/module.h"

namespace precis::nn {

/// A (height, width) pair given as one value (both dims) or two: `.stride = 2`, `.padding = {1, 0}`.
struct Size2 {
  int64_t h = 0;
  int64_t w = 0;
  Size2(int64_t v) : h(v), w(v) {}  // NOLINT: implicit, as PyTorch's int-or-tuple
  Size2(int64_t h_, int64_t w_) : h(h_), w(w_) {}
  std::vector<int64_t> vec() const { return {h, w}; }
  std::string str() const;
};

struct Conv2dOptions {
  Size2 stride = 1;
  Size2 padding = 0;
  Size2 dilation = 1;
  int64_t groups = 1;
  bool bias = true;
  Generator* generator = nullptr;
};

class Conv2d : public Module {
 public:
  using Options = Conv2dOptions;
  /// weight: (out_channels, in_channels / groups, kH, kW), bias: (out_channels).
  Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, Options options = {});

  /// x: (N, C, H, W) → (N, out_channels, Ho, Wo). Lower under autocast (precis::conv2d).
  Tensor forward(const Tensor& x) override;
  /// PyTorch's default: kaiming_uniform_(weight, a = √5), bias U(±1/√fan_in).
  void reset_parameters(Generator* gen = nullptr);
  std::string type_name() const override { return "Conv2d"; }
  std::string extra_repr() const override;

  int64_t in_channels() const { return in_channels_; }
  int64_t out_channels() const { return out_channels_; }
  const Options& options() const { return options_; }

  Tensor weight;  ///< "weight"
  Tensor bias;    ///< "bias"; undefined with bias = false

 private:
  int64_t in_channels_;
  int64_t out_channels_;
  Size2 kernel_size_;
  Options options_;
};

struct MaxPool2dOptions {
  std::optional<Size2> stride = std::nullopt;  ///< defaults to the kernel size
  Size2 padding = 0;
  Size2 dilation = 1;
  bool ceil_mode = false;
};

class MaxPool2d : public Module {
 public:
  using Options = MaxPool2dOptions;
  explicit MaxPool2d(Size2 kernel_size, Options options = {});
  Tensor forward(const Tensor& x) override;  ///< Passthrough.
  std::string type_name() const override { return "MaxPool2d"; }
  std::string extra_repr() const override;

 private:
  Size2 kernel_size_;
  Options options_;
};

struct AvgPool2dOptions {
  std::optional<Size2> stride = std::nullopt;  ///< defaults to the kernel size
  Size2 padding = 0;                           ///< zero padding, at most half the kernel
  bool ceil_mode = false;
  bool count_include_pad = true;  ///< the zero padding counts in the divisor
  int64_t divisor_override = 0;   ///< when non-zero, the divisor of every window
};

/// torch.nn.AvgPool2d: the mean of each kernel_size window. Passthrough (accumulates in fp32).
class AvgPool2d : public Module {
 public:
  using Options = AvgPool2dOptions;
  explicit AvgPool2d(Size2 kernel_size, Options options = {});
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "AvgPool2d"; }
  std::string extra_repr() const override;

 private:
  Size2 kernel_size_;
  Options options_;
};

class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(Size2 output_size) : output_size_(output_size) {}
  Tensor forward(const Tensor& x) override;  ///< Passthrough.
  std::string type_name() const override { return "AdaptiveAvgPool2d"; }
  std::string extra_repr() const override { return "output_size=" + output_size_.str(); }

 private:
  Size2 output_size_;
};

}  // namespace precis::nn
