#pragma once
// The ResNet family with torchvision's layout and parameter names (conv1.weight, bn1.running_mean,
// layer1.0.conv1.weight, layer2.0.downsample.0.weight, fc.weight), so torchvision checkpoints map
// 1:1 onto these modules.
//
// ImageNet layout (resnet18/34/50): 7×7 stride-2 stem conv, BatchNorm, ReLU, 3×3 stride-2 max-pool,
// four stages of width·{1, 2, 4, 8} channels (·4 for Bottleneck), global average pool, fc.
// CIFAR layout (resnet18_cifar, resnet20/32/56): 3×3 stride-1 stem conv and no max-pool, for
// 28×28 or 32×32 images. resnet20/32/56 are He et al.'s 3-stage CIFAR ResNets (16/32/64
// channels, (depth − 2)/6 BasicBlocks per stage). Their shortcut is option B (a 1×1 conv + BN
// projection where the shape changes, torchvision's downsample) rather than the paper's option A
// (zero-padded identity): it keeps one block class and torchvision's names, for 0.4% more
// parameters on resnet20.
#include <memory>
#include <vector>

#include "autograd/checkpoint.h"
#include "core/rng.h"
#include "models/nn/nn.h"

namespace precis::models {

/// Options of the ResNet builders (resnet18(), resnet20(), ...), torchvision's where it has them.
struct ResNetOptions {
  int64_t num_classes = 1000;  ///< outputs of fc (logits), like torchvision's `num_classes`
  int64_t in_channels = 3;   ///< 1 for grey-scale images (MNIST, Fashion-MNIST)
  /// Channels of the first stage; 0 = the model's standard (64, or 16 for resnet20/32/56). A small
  /// width keeps the topology and names with fewer parameters (tests, quick experiments).
  int64_t width = 0;
  bool zero_init_residual = false;  ///< zero the last BN weight of each block (Goyal et al.)
  Generator* generator = nullptr;   ///< initialisation (the default generator when null)
};

/// Two 3×3 convs; expansion 1.
class BasicBlock : public nn::Module {
 public:
  static constexpr int64_t kExpansion = 1;  ///< output channels = planes·kExpansion (torchvision's `expansion`)
  /// in_planes → planes channels; stride on conv1; a 1×1 conv + BN downsample when the stride or
  /// the channel count changes.
  BasicBlock(int64_t in_planes, int64_t planes, int64_t stride = 1, Generator* gen = nullptr);
  /// relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)). x: (N, in_planes, H, W).
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "BasicBlock"; }

  nn::Child<nn::Conv2d> conv1;  ///< 3×3, in_planes → planes, with the block's stride; no bias
  nn::Child<nn::BatchNorm2d> bn1;  ///< after conv1
  nn::Child<nn::Conv2d> conv2;  ///< 3×3, planes → planes, stride 1; no bias
  nn::Child<nn::BatchNorm2d> bn2;  ///< after conv2; zeroed weight with zero_init_residual
  nn::Child<nn::Sequential> downsample;  ///< empty for the identity shortcut
};

/// 1×1 reduce, 3×3 (with the stride, torchvision's "v1.5"), 1×1 expand ×4.
class Bottleneck : public nn::Module {
 public:
  static constexpr int64_t kExpansion = 4;  ///< output channels = planes·kExpansion (torchvision's `expansion`)
  /// in_planes → planes·4 channels; stride on conv2; a 1×1 conv + BN downsample when the stride or
  /// the channel count changes. Convs without bias, initialised from gen (the default generator
  /// when null); ResNet re-initialises them.
  Bottleneck(int64_t in_planes, int64_t planes, int64_t stride = 1, Generator* gen = nullptr);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Bottleneck"; }

  nn::Child<nn::Conv2d> conv1;  ///< 1×1 reduce, in_planes → planes, stride 1
  nn::Child<nn::BatchNorm2d> bn1;  ///< after conv1
  nn::Child<nn::Conv2d> conv2;  ///< 3×3, planes → planes, with the block's stride
  nn::Child<nn::BatchNorm2d> bn2;  ///< after conv2
  nn::Child<nn::Conv2d> conv3;  ///< 1×1 expand, planes → planes·4, stride 1
  nn::Child<nn::BatchNorm2d> bn3;  ///< after conv3; zeroed weight with zero_init_residual
  /// 1×1 conv (with the stride) + BatchNorm2d, children "0" and "1"; empty for the identity shortcut.
  nn::Child<nn::Sequential> downsample;
};

enum class BlockKind { basic, bottleneck };
enum class Stem { imagenet, cifar };

/// torchvision's ResNet: stem (conv1, bn1, ReLU, maxpool in the ImageNet layout), the stages
/// layer1..layerK of blocks, global average pooling, fc. Build one with resnet18(), resnet20(), ...
/// or resnet(name). Convs are initialised He normal (fan_out, relu), BN weights 1 and biases 0, fc as
/// an nn::Linear; random draws come from options.generator. Parameters are f32 on the CPU (use to()).
class ResNet : public nn::Module {
 public:
  /// blocks_per_stage: e.g. {2, 2, 2, 2} (resnet18) or {3, 3, 3} (resnet20); stage i has
  /// width·2^i planes and stride 2 except the first. options.width must be set (> 0).
  ResNet(BlockKind block, std::vector<int64_t> blocks_per_stage, Stem stem, const ResNetOptions& options);
  /// x: (N, in_channels, H, W) → logits (N, num_classes). A channels-last x
  /// (contiguous(x, MemoryFormat::ChannelsLast)) keeps every activation channels-last, which on the
  /// CPU spares oneDNN's per-conv activation reorders (docs/design/cpu-conv.md).
  Tensor forward(const Tensor& x) override;
  /// The features before fc: (N, fc.in_features).
  Tensor features(const Tensor& x);
  /// Activation checkpointing of the stages (autograd/checkpoint.h): with mode full or selective
  /// each residual block of each stage (layer1, layer2, ...) is a region whose activations are
  /// recomputed in backward. Default: none.
  void set_checkpointing(const autograd::CheckpointOptions& options) { checkpointing_ = options; }
  /// The blocks' checkpointing options.
  const autograd::CheckpointOptions& checkpointing() const { return checkpointing_; }
  std::string type_name() const override { return "ResNet"; }

  nn::Child<nn::Conv2d> conv1;  ///< stem: 7×7 stride 2 padding 3 (ImageNet) or 3×3 stride 1 (CIFAR); no bias
  nn::Child<nn::BatchNorm2d> bn1;  ///< after conv1
  nn::Child<nn::MaxPool2d> maxpool;  ///< empty in the CIFAR layout
  std::vector<nn::Child<nn::Sequential>> layers;  ///< "layer1", "layer2", ...
  nn::Child<nn::Linear> fc;  ///< Linear(last stage's channels, num_classes), the classifier

 private:
  Stem stem_;
  autograd::CheckpointOptions checkpointing_{.mode = autograd::CheckpointMode::none};
};

/// ImageNet layout. Parameters: resnet18 11.7M, resnet34 21.8M, resnet50 25.6M (1000 classes).
std::shared_ptr<ResNet> resnet18(const ResNetOptions& options = {});
std::shared_ptr<ResNet> resnet34(const ResNetOptions& options = {});
std::shared_ptr<ResNet> resnet50(const ResNetOptions& options = {});
/// resnet18's four stages behind the CIFAR stem (3×3 conv, no max-pool).
std::shared_ptr<ResNet> resnet18_cifar(const ResNetOptions& options = {});
/// He et al.'s CIFAR ResNets (width 16 by default; shortcut option B, see above).
std::shared_ptr<ResNet> resnet20(const ResNetOptions& options = {});
std::shared_ptr<ResNet> resnet32(const ResNetOptions& options = {});
std::shared_ptr<ResNet> resnet56(const ResNetOptions& options = {});
/// By name: "resnet18", "resnet34", "resnet50", "resnet18_cifar", "resnet20", "resnet32", "resnet56"
/// (ValueError listing them otherwise).
std::shared_ptr<ResNet> resnet(const std::string& name, const ResNetOptions& options = {});

}  // namespace precis::models
