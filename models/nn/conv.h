#pragma once
// nn::Conv2d, nn::Conv1d, nn::ConvTranspose2d and the pooling layers (torch.nn.Conv2d, Conv1d,
// ConvTranspose2d, MaxPool1d, AvgPool1d, MaxPool2d, AvgPool2d, AdaptiveAvgPool2d).
#include <optional>
#include <string>
#include <vector>

#include "core/rng.h"
#include "models/nn/module.h"

namespace precis::nn {

/// A (height, width) pair given as one value (both dims) or two: `.stride = 2`, `.padding = {1, 0}`.
struct Size2 {
  int64_t h = 0;  ///< height (first spatial dim)
  int64_t w = 0;  ///< width (second spatial dim)
  /// The same value for both dims; implicit so that a plain integer converts, like PyTorch's
  /// int-or-tuple arguments.
  Size2(int64_t v) : h(v), w(v) {}  // NOLINT: implicit, as PyTorch's int-or-tuple
  /// Height and width separately.
  Size2(int64_t h_, int64_t w_) : h(h_), w(w_) {}
  /// {h, w}, the form the functional ops (precis::conv2d, max_pool2d...) take.
  std::vector<int64_t> vec() const { return {h, w}; }
  /// "(h, w)", as printed by the layers' extra_repr().
  std::string str() const;
};

/// Options of nn::Conv2d, with torch.nn.Conv2d's defaults.
struct Conv2dOptions {
  Size2 stride = 1;    ///< Like torch.nn.Conv2d's `stride`.
  Size2 padding = 0;   ///< Zero padding on each side, like torch.nn.Conv2d's `padding` (no "same"/"valid").
  Size2 dilation = 1;  ///< Spacing of the kernel taps, like torch.nn.Conv2d's `dilation`.
  int64_t groups = 1;  ///< Channel groups; must divide in_channels and out_channels.
  bool bias = true;    ///< Whether the layer has a learnable bias.
  /// The random source of the initial weights (the default generator when null). Used only by the
  /// constructor; options() reports it as null afterwards.
  Generator* generator = nullptr;
};

/// torch.nn.Conv2d: a 2-D convolution (cross-correlation) with learnable weight and bias.
/// Parameters are f32 on the CPU (use to()); the input must have their dtype outside autocast.
class Conv2d : public Module {
 public:
  using Options = Conv2dOptions;  ///< The options struct, as `nn::Conv2d::Options{.stride = 2}`.
  /// weight: (out_channels, in_channels / groups, kH, kW), bias: (out_channels).
  Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, Options options = {});

  /// x: (N, in_channels, H, W) or unbatched (in_channels, H, W) → (N, out_channels, Ho, Wo) (or
  /// (out_channels, Ho, Wo)), with Ho, Wo as in precis::conv2d. Lower under autocast.
  Tensor forward(const Tensor& x) override;
  /// PyTorch's default: kaiming_uniform_(weight, a = √5), bias U(±1/√fan_in).
  void reset_parameters(Generator* gen = nullptr);
  std::string type_name() const override { return "Conv2d"; }
  std::string extra_repr() const override;

  int64_t in_channels() const { return in_channels_; }    ///< C of the input.
  int64_t out_channels() const { return out_channels_; }  ///< Channels of the output.
  /// The options given at construction (generator reset to null); a reference into this layer.
  const Options& options() const { return options_; }

  Tensor weight;  ///< "weight"
  Tensor bias;    ///< "bias"; undefined with bias = false

 private:
  int64_t in_channels_;
  int64_t out_channels_;
  Size2 kernel_size_;
  Options options_;
};

/// Options of nn::Conv1d, with torch.nn.Conv1d's defaults.
struct Conv1dOptions {
  int64_t stride = 1;    ///< Like torch.nn.Conv1d's `stride`.
  int64_t padding = 0;   ///< Zero padding on each side (no "same"/"valid").
  int64_t dilation = 1;  ///< Spacing of the kernel taps.
  int64_t groups = 1;    ///< Channel groups; must divide in_channels and out_channels.
  bool bias = true;      ///< Whether the layer has a learnable bias.
  /// The random source of the initial weights (the default generator when null). Used only by the
  /// constructor; options() reports it as null afterwards.
  Generator* generator = nullptr;
};

/// torch.nn.Conv1d: a 1-D convolution over (N, C, L) sequences (audio, text, time series).
class Conv1d : public Module {
 public:
  using Options = Conv1dOptions;  ///< The options struct.
  /// weight: (out_channels, in_channels / groups, kernel_size), bias: (out_channels).
  Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Options options = {});
  /// x: (N, in_channels, L) or unbatched (in_channels, L) → (N, out_channels, Lo). Lower under autocast.
  Tensor forward(const Tensor& x) override;
  /// PyTorch's default: kaiming_uniform_(weight, a = √5), bias U(±1/√fan_in), fan_in = in/groups·K.
  void reset_parameters(Generator* gen = nullptr);
  std::string type_name() const override { return "Conv1d"; }
  std::string extra_repr() const override;

  int64_t in_channels() const { return in_channels_; }    ///< C of the input.
  int64_t out_channels() const { return out_channels_; }  ///< Channels of the output.
  /// The options given at construction (generator reset to null); a reference into this layer.
  const Options& options() const { return options_; }

  Tensor weight;  ///< "weight"
  Tensor bias;    ///< "bias"; undefined with bias = false

 private:
  int64_t in_channels_;
  int64_t out_channels_;
  int64_t kernel_size_;
  Options options_;
};

/// Options of nn::ConvTranspose2d, with torch.nn.ConvTranspose2d's defaults and argument order.
struct ConvTranspose2dOptions {
  Size2 stride = 1;          ///< Like torch.nn.ConvTranspose2d's `stride`.
  Size2 padding = 0;         ///< Removed from each side of the output (dilation·(k − 1) − padding is added).
  /// Added to one side of the output, below stride: picks among the output sizes that a stride-s
  /// conv2d maps to one input size (U-Net's k3 s2 p1 needs 1 to double an even size).
  Size2 output_padding = 0;
  int64_t groups = 1;        ///< Channel groups; must divide in_channels and out_channels.
  bool bias = true;          ///< Whether the layer has a learnable bias.
  Size2 dilation = 1;        ///< Spacing of the kernel taps.
  /// The random source of the initial weights (the default generator when null). Used only by the
  /// constructor; options() reports it as null afterwards.
  Generator* generator = nullptr;
};

/// torch.nn.ConvTranspose2d: the transposed convolution (precis::conv_transpose2d), the usual
/// learned upsampling of decoders and generators: `ConvTranspose2d(c, c / 2, 2, {.stride = 2})`
/// doubles H and W. Parameters are f32 on the CPU (use to()).
class ConvTranspose2d : public Module {
 public:
  using Options = ConvTranspose2dOptions;  ///< The options struct.
  /// weight: (in_channels, out_channels / groups, kH, kW) (PyTorch's layout), bias: (out_channels).
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, Options options = {});

  /// x: (N, in_channels, H, W) or unbatched (in_channels, H, W) → (N, out_channels, Ho, Wo), with
  /// Ho = (H − 1)·stride − 2·padding + dilation·(kH − 1) + output_padding + 1. Lower under autocast.
  Tensor forward(const Tensor& x) override;
  /// PyTorch's forward(x, output_size): the output_padding that gives output_size ({Ho, Wo}, or a
  /// whole shape whose last two sizes are taken — a skip connection's sizes() in a U-Net), in
  /// place of the option's (empty: the option's). ValueError when no output_padding below stride
  /// gives it.
  Tensor forward(const Tensor& x, const std::vector<int64_t>& output_size);
  /// PyTorch's default: kaiming_uniform_(weight, a = √5), bias U(±1/√fan_in), fan_in from the
  /// weight's second dim (out_channels / groups · kH · kW), as PyTorch computes it.
  void reset_parameters(Generator* gen = nullptr);
  std::string type_name() const override { return "ConvTranspose2d"; }
  std::string extra_repr() const override;

  int64_t in_channels() const { return in_channels_; }    ///< C of the input.
  int64_t out_channels() const { return out_channels_; }  ///< Channels of the output.
  /// The options given at construction (generator reset to null); a reference into this layer.
  const Options& options() const { return options_; }

  Tensor weight;  ///< "weight"
  Tensor bias;    ///< "bias"; undefined with bias = false

 private:
  int64_t in_channels_;
  int64_t out_channels_;
  Size2 kernel_size_;
  Options options_;
};

/// Options of nn::MaxPool1d, with torch.nn.MaxPool1d's defaults.
struct MaxPool1dOptions {
  std::optional<int64_t> stride = std::nullopt;  ///< defaults to the kernel size
  int64_t padding = 0;                           ///< implicit -inf padding, at most half the kernel
  int64_t dilation = 1;                          ///< spacing of the window's elements
  bool ceil_mode = false;                        ///< round the output size up instead of down
};

/// torch.nn.MaxPool1d: the maximum of each kernel_size window along L (precis::max_pool1d).
class MaxPool1d : public Module {
 public:
  using Options = MaxPool1dOptions;  ///< The options struct.
  /// kernel_size must be positive (precis::Error otherwise); the other checks happen in forward().
  explicit MaxPool1d(int64_t kernel_size, Options options = {});
  Tensor forward(const Tensor& x) override;  ///< Passthrough.
  std::string type_name() const override { return "MaxPool1d"; }
  std::string extra_repr() const override;

 private:
  int64_t kernel_size_;
  Options options_;
};

/// Options of nn::AvgPool1d, with torch.nn.AvgPool1d's defaults.
struct AvgPool1dOptions {
  std::optional<int64_t> stride = std::nullopt;  ///< defaults to the kernel size
  int64_t padding = 0;                           ///< zero padding, at most half the kernel
  bool ceil_mode = false;                        ///< round the output size up instead of down
  bool count_include_pad = true;                 ///< the zero padding counts in the divisor
};

/// torch.nn.AvgPool1d: the mean of each kernel_size window along L (precis::avg_pool1d).
class AvgPool1d : public Module {
 public:
  using Options = AvgPool1dOptions;  ///< The options struct.
  /// kernel_size must be positive (precis::Error otherwise); the other checks happen in forward().
  explicit AvgPool1d(int64_t kernel_size, Options options = {});
  Tensor forward(const Tensor& x) override;  ///< Passthrough.
  std::string type_name() const override { return "AvgPool1d"; }
  std::string extra_repr() const override;

 private:
  int64_t kernel_size_;
  Options options_;
};

/// Options of nn::MaxPool2d, with torch.nn.MaxPool2d's defaults.
struct MaxPool2dOptions {
  std::optional<Size2> stride = std::nullopt;  ///< defaults to the kernel size
  Size2 padding = 0;   ///< implicit -inf padding on each side, at most half the kernel
  Size2 dilation = 1;  ///< spacing of the window's elements, like torch.nn.MaxPool2d's `dilation`
  /// Round the output size up instead of down (a window must still start inside the input or
  /// its left padding).
  bool ceil_mode = false;
};

/// torch.nn.MaxPool2d: the maximum of each kernel_size window (precis::max_pool2d); NaN
/// propagates, the gradient goes to each window's maximum.
class MaxPool2d : public Module {
 public:
  using Options = MaxPool2dOptions;  ///< The options struct.
  /// kernel_size must be positive (precis::Error otherwise); the other checks happen in forward().
  explicit MaxPool2d(Size2 kernel_size, Options options = {});
  Tensor forward(const Tensor& x) override;  ///< Passthrough.
  std::string type_name() const override { return "MaxPool2d"; }
  std::string extra_repr() const override;

 private:
  Size2 kernel_size_;
  Options options_;
};

/// Options of nn::AvgPool2d, with torch.nn.AvgPool2d's defaults.
struct AvgPool2dOptions {
  std::optional<Size2> stride = std::nullopt;  ///< defaults to the kernel size
  Size2 padding = 0;                           ///< zero padding, at most half the kernel
  bool ceil_mode = false;         ///< round the output size up instead of down
  bool count_include_pad = true;  ///< the zero padding counts in the divisor
  int64_t divisor_override = 0;   ///< when non-zero, the divisor of every window
};

/// torch.nn.AvgPool2d: the mean of each kernel_size window. Passthrough (accumulates in fp32).
class AvgPool2d : public Module {
 public:
  using Options = AvgPool2dOptions;  ///< The options struct.
  /// kernel_size must be positive and divisor_override >= 0 (precis::Error otherwise); the other
  /// checks happen in forward().
  explicit AvgPool2d(Size2 kernel_size, Options options = {});
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "AvgPool2d"; }
  std::string extra_repr() const override;

 private:
  Size2 kernel_size_;
  Options options_;
};

/// torch.nn.AdaptiveAvgPool2d: average pooling to a fixed (Ho, Wo) whatever the input size
/// (precis::adaptive_avg_pool2d); output_size 1 is global average pooling.
class AdaptiveAvgPool2d : public Module {
 public:
  /// The output's spatial size (Ho, Wo); checked against the input in forward().
  explicit AdaptiveAvgPool2d(Size2 output_size) : output_size_(output_size) {}
  Tensor forward(const Tensor& x) override;  ///< Passthrough.
  std::string type_name() const override { return "AdaptiveAvgPool2d"; }
  std::string extra_repr() const override { return "output_size=" + output_size_.str(); }

 private:
  Size2 output_size_;
};

}  // namespace precis::nn
