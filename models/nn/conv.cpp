#include "models/nn/conv.h"

#include <cmath>

#include "models/nn/init.h"
#include "ops/functional.h"
#include "tensor/factory.h"

namespace precis::nn {

namespace {
// What every convolution layer's constructor checks, naming the layer.
void check_conv_layer(const char* layer, int64_t in, int64_t out, bool kernel_positive, const std::string& kernel,
                      int64_t groups) {
  PRECIS_CHECK(in > 0 && out > 0 && kernel_positive && groups > 0, layer,
               ": channels, kernel size and groups must be positive, got in ", in, ", out ", out, ", kernel ", kernel,
               ", groups ", groups);
  PRECIS_CHECK(in % groups == 0 && out % groups == 0, layer, ": groups (", groups, ") must divide in_channels (", in,
               ") and out_channels (", out, ")");
}

// PyTorch's initialisation of every convolution layer: kaiming_uniform_(a = √5) on the weight and
// U(±1/√fan_in) on the bias, fan_in from the weight's second dim on (torch's rule, whichever way
// round the layer's weight is).
void reset_conv_parameters(Tensor& weight, Tensor& bias, Generator* gen) {
  init::kaiming_uniform_(weight, std::sqrt(5.0), init::FanMode::fan_in, "leaky_relu", gen);
  if (bias.defined()) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(init::calculate_fans(weight).fan_in));
    init::uniform_(bias, -bound, bound, gen);
  }
}
}  // namespace

std::string Size2::str() const { return "(" + std::to_string(h) + ", " + std::to_string(w) + ")"; }

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, Options options)
    : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size), options_(options) {
  check_conv_layer("nn::Conv2d", in_channels, out_channels, kernel_size.h > 0 && kernel_size.w > 0, kernel_size.str(),
                   options.groups);
  weight = empty({out_channels, in_channels / options.groups, kernel_size.h, kernel_size.w});
  if (options.bias) bias = empty({out_channels});
  reset_parameters(options.generator);
  options_.generator = nullptr;  // used once; a copy must not keep a pointer to it
  register_parameter("weight", weight);
  register_parameter("bias", bias);
}

void Conv2d::reset_parameters(Generator* gen) {
  reset_conv_parameters(weight, bias, gen);
}

Tensor Conv2d::forward(const Tensor& x) {
  PRECIS_CHECK_SHAPE((x.dim() == 4 || x.dim() == 3) && x.size(-3) == in_channels_, "nn::Conv2d(", in_channels_, ", ",
                     out_channels_, "): input ", x.describe(), " must be (N, ", in_channels_, ", H, W) or (",
                     in_channels_, ", H, W)");
  return conv2d(x, weight, bias, options_.stride.vec(), options_.padding.vec(), options_.dilation.vec(),
                options_.groups);
}

std::string Conv2d::extra_repr() const {
  std::string s = std::to_string(in_channels_) + ", " + std::to_string(out_channels_) +
                  ", kernel_size=" + kernel_size_.str() + ", stride=" + options_.stride.str();
  if (options_.padding.h || options_.padding.w) s += ", padding=" + options_.padding.str();
  if (options_.dilation.h != 1 || options_.dilation.w != 1) s += ", dilation=" + options_.dilation.str();
  if (options_.groups != 1) s += ", groups=" + std::to_string(options_.groups);
  if (!bias.defined()) s += ", bias=false";
  return s;
}

Conv1d::Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Options options)
    : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size), options_(options) {
  check_conv_layer("nn::Conv1d", in_channels, out_channels, kernel_size > 0, std::to_string(kernel_size),
                   options.groups);
  weight = empty({out_channels, in_channels / options.groups, kernel_size});
  if (options.bias) bias = empty({out_channels});
  reset_parameters(options.generator);
  options_.generator = nullptr;  // used once; a copy must not keep a pointer to it
  register_parameter("weight", weight);
  register_parameter("bias", bias);
}

void Conv1d::reset_parameters(Generator* gen) {
  reset_conv_parameters(weight, bias, gen);
}

Tensor Conv1d::forward(const Tensor& x) {
  PRECIS_CHECK_SHAPE((x.dim() == 3 || x.dim() == 2) && x.size(-2) == in_channels_, "nn::Conv1d(", in_channels_, ", ",
                     out_channels_, "): input ", x.describe(), " must be (N, ", in_channels_, ", L) or (", in_channels_,
                     ", L)");
  return conv1d(x, weight, bias, options_.stride, options_.padding, options_.dilation, options_.groups);
}

std::string Conv1d::extra_repr() const {
  std::string s = std::to_string(in_channels_) + ", " + std::to_string(out_channels_) +
                  ", kernel_size=(" + std::to_string(kernel_size_) + ",), stride=(" + std::to_string(options_.stride) +
                  ",)";
  if (options_.padding) s += ", padding=(" + std::to_string(options_.padding) + ",)";
  if (options_.dilation != 1) s += ", dilation=(" + std::to_string(options_.dilation) + ",)";
  if (options_.groups != 1) s += ", groups=" + std::to_string(options_.groups);
  if (!bias.defined()) s += ", bias=false";
  return s;
}

ConvTranspose2d::ConvTranspose2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, Options options)
    : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size), options_(options) {
  check_conv_layer("nn::ConvTranspose2d", in_channels, out_channels, kernel_size.h > 0 && kernel_size.w > 0,
                   kernel_size.str(), options.groups);
  PRECIS_CHECK(options.output_padding.h < options.stride.h && options.output_padding.w < options.stride.w,
               "nn::ConvTranspose2d: output_padding ", options.output_padding.str(), " must be smaller than stride ",
               options.stride.str());
  weight = empty({in_channels, out_channels / options.groups, kernel_size.h, kernel_size.w});
  if (options.bias) bias = empty({out_channels});
  reset_parameters(options.generator);
  options_.generator = nullptr;  // used once; a copy must not keep a pointer to it
  register_parameter("weight", weight);
  register_parameter("bias", bias);
}

void ConvTranspose2d::reset_parameters(Generator* gen) {
  reset_conv_parameters(weight, bias, gen);
}

Tensor ConvTranspose2d::forward(const Tensor& x) {
  return forward(x, {});
}

// output_size empty: the options' output_padding.
Tensor ConvTranspose2d::forward(const Tensor& x, const std::vector<int64_t>& output_size) {
  PRECIS_CHECK_SHAPE((x.dim() == 4 || x.dim() == 3) && x.size(-3) == in_channels_, "nn::ConvTranspose2d(",
                     in_channels_, ", ", out_channels_, "): input ", x.describe(), " must be (N, ", in_channels_,
                     ", H, W) or (", in_channels_, ", H, W)");
  if (output_size.empty())
    return conv_transpose2d(x, weight, bias, options_.stride.vec(), options_.padding.vec(),
                            options_.output_padding.vec(), options_.groups, options_.dilation.vec());
  PRECIS_CHECK(output_size.size() >= 2, "nn::ConvTranspose2d: output_size ", shape_str(output_size),
               " must hold the output's height and width (or a whole shape ending with them)");
  const int64_t want[2] = {output_size[output_size.size() - 2], output_size.back()};
  const int64_t stride[2] = {options_.stride.h, options_.stride.w}, padding[2] = {options_.padding.h, options_.padding.w};
  const int64_t dilation[2] = {options_.dilation.h, options_.dilation.w}, kernel[2] = {kernel_size_.h, kernel_size_.w};
  std::vector<int64_t> extra(2);
  for (int d = 0; d < 2; ++d) {
    const int64_t least = (x.size(-2 + d) - 1) * stride[d] - 2 * padding[d] + dilation[d] * (kernel[d] - 1) + 1;
    PRECIS_CHECK(want[d] >= least && want[d] < least + stride[d], "nn::ConvTranspose2d: output_size ",
                 shape_str(output_size), " asks for a ", d == 0 ? "height" : "width", " of ", want[d],
                 "; for the input ", x.describe(), " it can be ", least, " to ", least + stride[d] - 1);
    extra[d] = want[d] - least;
  }
  return conv_transpose2d(x, weight, bias, options_.stride.vec(), options_.padding.vec(), extra, options_.groups,
                          options_.dilation.vec());
}

std::string ConvTranspose2d::extra_repr() const {
  std::string s = std::to_string(in_channels_) + ", " + std::to_string(out_channels_) +
                  ", kernel_size=" + kernel_size_.str() + ", stride=" + options_.stride.str();
  if (options_.padding.h || options_.padding.w) s += ", padding=" + options_.padding.str();
  if (options_.output_padding.h || options_.output_padding.w)
    s += ", output_padding=" + options_.output_padding.str();
  if (options_.dilation.h != 1 || options_.dilation.w != 1) s += ", dilation=" + options_.dilation.str();
  if (options_.groups != 1) s += ", groups=" + std::to_string(options_.groups);
  if (!bias.defined()) s += ", bias=false";
  return s;
}

MaxPool1d::MaxPool1d(int64_t kernel_size, Options options) : kernel_size_(kernel_size), options_(options) {
  PRECIS_CHECK(kernel_size > 0, "nn::MaxPool1d: kernel size must be positive, got ", kernel_size);
}

Tensor MaxPool1d::forward(const Tensor& x) {
  return max_pool1d(x, kernel_size_, options_.stride, options_.padding, options_.dilation, options_.ceil_mode);
}

std::string MaxPool1d::extra_repr() const {
  return "kernel_size=" + std::to_string(kernel_size_) + ", stride=" +
         std::to_string(options_.stride.value_or(kernel_size_)) + ", padding=" + std::to_string(options_.padding) +
         ", dilation=" + std::to_string(options_.dilation) + ", ceil_mode=" + (options_.ceil_mode ? "true" : "false");
}

AvgPool1d::AvgPool1d(int64_t kernel_size, Options options) : kernel_size_(kernel_size), options_(options) {
  PRECIS_CHECK(kernel_size > 0, "nn::AvgPool1d: kernel size must be positive, got ", kernel_size);
}

Tensor AvgPool1d::forward(const Tensor& x) {
  return avg_pool1d(x, kernel_size_, options_.stride, options_.padding, options_.ceil_mode,
                    options_.count_include_pad);
}

std::string AvgPool1d::extra_repr() const {
  return "kernel_size=(" + std::to_string(kernel_size_) + ",), stride=(" +
         std::to_string(options_.stride.value_or(kernel_size_)) + ",), padding=(" + std::to_string(options_.padding) +
         ",)";
}

MaxPool2d::MaxPool2d(Size2 kernel_size, Options options) : kernel_size_(kernel_size), options_(options) {
  PRECIS_CHECK(kernel_size.h > 0 && kernel_size.w > 0, "nn::MaxPool2d: kernel size must be positive, got ",
               kernel_size.str());
}

Tensor MaxPool2d::forward(const Tensor& x) {
  return max_pool2d(x, kernel_size_.vec(), options_.stride.value_or(kernel_size_).vec(), options_.padding.vec(),
                    options_.dilation.vec(), options_.ceil_mode);
}

std::string MaxPool2d::extra_repr() const {
  return "kernel_size=" + kernel_size_.str() + ", stride=" + options_.stride.value_or(kernel_size_).str() +
         ", padding=" + options_.padding.str() + ", dilation=" + options_.dilation.str() +
         ", ceil_mode=" + (options_.ceil_mode ? "true" : "false");
}

AvgPool2d::AvgPool2d(Size2 kernel_size, Options options) : kernel_size_(kernel_size), options_(options) {
  PRECIS_CHECK(kernel_size.h > 0 && kernel_size.w > 0, "nn::AvgPool2d: kernel size must be positive, got ",
               kernel_size.str());
  PRECIS_CHECK(options.divisor_override >= 0, "nn::AvgPool2d: divisor_override must be >= 0 (0: none), got ",
               options.divisor_override);
}

Tensor AvgPool2d::forward(const Tensor& x) {
  return avg_pool2d(x, kernel_size_.vec(), options_.stride.value_or(kernel_size_).vec(), options_.padding.vec(),
                    options_.ceil_mode, options_.count_include_pad, options_.divisor_override);
}

std::string AvgPool2d::extra_repr() const {
  return "kernel_size=" + kernel_size_.str() + ", stride=" + options_.stride.value_or(kernel_size_).str() +
         ", padding=" + options_.padding.str() + ", ceil_mode=" + (options_.ceil_mode ? "true" : "false") +
         ", count_include_pad=" + (options_.count_include_pad ? "true" : "false") +
         (options_.divisor_override ? ", divisor_override=" + std::to_string(options_.divisor_override) : "");
}

Tensor AdaptiveAvgPool2d::forward(const Tensor& x) { return adaptive_avg_pool2d(x, output_size_.vec()); }

}  // namespace precis::nn
