#include "models/resnet.h"

#include <optional>

#include "core/checked_math.h"
#include "ops/functional.h"

namespace precis::models {

namespace {

nn::Conv2d conv3x3(int64_t in, int64_t out, int64_t stride, Generator* gen) {
  return nn::Conv2d(in, out, 3, {.stride = stride, .padding = 1, .bias = false, .generator = gen});
}
nn::Conv2d conv1x1(int64_t in, int64_t out, int64_t stride, Generator* gen) {
  return nn::Conv2d(in, out, 1, {.stride = stride, .bias = false, .generator = gen});
}
nn::Sequential projection(int64_t in, int64_t out, int64_t stride, Generator* gen) {
  return nn::Sequential{conv1x1(in, out, stride, gen), nn::BatchNorm2d(out)};
}


}  // namespace

BasicBlock::BasicBlock(int64_t in_planes, int64_t planes, int64_t stride, Generator* gen)
    : conv1(add("conv1", conv3x3(in_planes, planes, stride, gen))),
      bn1(add("bn1", nn::BatchNorm2d(planes))),
      conv2(add("conv2", conv3x3(planes, planes, 1, gen))),
      bn2(add("bn2", nn::BatchNorm2d(planes))) {
  if (stride != 1 || in_planes != planes) downsample = add("downsample", projection(in_planes, planes, stride, gen));
}

Tensor BasicBlock::forward(const Tensor& x) {
  Tensor y = relu(bn1(conv1(x)));
  y = bn2(conv2(y));
  return relu(y + (downsample ? downsample(x) : x));
}

Bottleneck::Bottleneck(int64_t in_planes, int64_t planes, int64_t stride, Generator* gen)
    : conv1(add("conv1", conv1x1(in_planes, planes, 1, gen))),
      bn1(add("bn1", nn::BatchNorm2d(planes))),
      conv2(add("conv2", conv3x3(planes, planes, stride, gen))),
      bn2(add("bn2", nn::BatchNorm2d(planes))),
      conv3(add("conv3", conv1x1(planes, planes * kExpansion, 1, gen))),
      bn3(add("bn3", nn::BatchNorm2d(planes * kExpansion))) {
  if (stride != 1 || in_planes != planes * kExpansion)
    downsample = add("downsample", projection(in_planes, planes * kExpansion, stride, gen));
}

Tensor Bottleneck::forward(const Tensor& x) {
  Tensor y = relu(bn1(conv1(x)));
  y = relu(bn2(conv2(y)));
  y = bn3(conv3(y));
  return relu(y + (downsample ? downsample(x) : x));
}

ResNet::ResNet(BlockKind block, std::vector<int64_t> blocks_per_stage, Stem stem, const ResNetOptions& options)
    : stem_(stem) {
  PRECIS_CHECK(options.width > 0 && options.num_classes > 0 && options.in_channels > 0 && !blocks_per_stage.empty(),
               "models::ResNet: width, num_classes and in_channels must be positive and there must be a stage; got "
               "width ",
               options.width, ", num_classes ", options.num_classes, ", in_channels ", options.in_channels);
  Generator* gen = options.generator;
  const int64_t w = options.width;
  if (stem == Stem::imagenet) {
    conv1 = add("conv1", nn::Conv2d(options.in_channels, w, 7,
                                    {.stride = 2, .padding = 3, .bias = false, .generator = gen}));
  } else {
    conv1 = add("conv1", conv3x3(options.in_channels, w, 1, gen));
  }
  bn1 = add("bn1", nn::BatchNorm2d(w));
  if (stem == Stem::imagenet) maxpool = add("maxpool", nn::MaxPool2d(3, {.stride = 2, .padding = 1}));
  const int64_t expansion = block == BlockKind::basic ? BasicBlock::kExpansion : Bottleneck::kExpansion;
  int64_t in_planes = w;
  int64_t planes = w;
  for (size_t stage = 0; stage < blocks_per_stage.size(); ++stage) {
    // The width doubles per stage: checked, so that many stages or a huge width are an error
    // instead of a shift past 63 bits (undefined) or a wrapped channel count.
    const std::optional<int64_t> doubled = stage == 0 ? std::optional<int64_t>(w) : checked_mul(planes, 2);
    const std::optional<int64_t> widest = doubled ? checked_mul(*doubled, expansion) : std::nullopt;
    PRECIS_CHECK(widest.has_value() && blocks_per_stage[stage] >= 0, "models::ResNet: stage ", stage + 1, " of ",
                 blocks_per_stage.size(), " with width ", w,
                 " does not fit: the channel count (width * 2^stage * expansion) must fit in int64 and the block count (",
                 blocks_per_stage[stage], ") must not be negative; use fewer stages or a smaller width");
    planes = *doubled;
    nn::Sequential seq;
    for (int64_t i = 0; i < blocks_per_stage[stage]; ++i) {
      const int64_t stride = (stage > 0 && i == 0) ? 2 : 1;
      if (block == BlockKind::basic) seq.push_back(BasicBlock(in_planes, planes, stride, gen));
      else seq.push_back(Bottleneck(in_planes, planes, stride, gen));
      in_planes = planes * expansion;
    }
    layers.push_back(add("layer" + std::to_string(stage + 1), std::move(seq)));
  }
  fc = add("fc", nn::Linear(in_planes, options.num_classes, {.generator = gen}));

  // torchvision's initialisation: He normal (fan_out, relu) for convs; BN weight 1, bias 0
  // (the BatchNorm2d defaults); fc keeps Linear's default.
  for (auto& [name, m] : named_modules()) {
    if (auto* conv = dynamic_cast<nn::Conv2d*>(m))
      nn::init::kaiming_normal_(conv->weight, 0.0, nn::init::FanMode::fan_out, "relu", gen);
  }
  if (options.zero_init_residual) {
    for (auto& [name, m] : named_modules()) {
      if (auto* b = dynamic_cast<Bottleneck*>(m)) nn::init::zeros_(b->bn3->weight);
      if (auto* b = dynamic_cast<BasicBlock*>(m)) nn::init::zeros_(b->bn2->weight);
    }
  }
}

Tensor ResNet::features(const Tensor& x) {
  PRECIS_CHECK_SHAPE(x.dim() == 4 && x.size(1) == conv1->in_channels(), "ResNet: input ", x.describe(),
                     " must be (N, ", conv1->in_channels(), ", H, W)");
  Tensor y = relu(bn1(conv1(x)));
  if (maxpool) y = maxpool(y);
  // Checkpointed, each residual block is a region: the recomputation then holds one block's
  // activations at a time, where a whole stage's (layer1's, at the largest resolution, most of
  // the network's) set the backward's peak. Without, a stage's own Sequential settings apply.
  for (auto& layer : layers) {
    if (checkpointing_.mode == autograd::CheckpointMode::none) {
      y = layer->forward(y);
      continue;
    }
    for (size_t i = 0; i < layer->size(); ++i)
      y = autograd::checkpoint(checkpointing_, [block = &(*layer)[i]](const Tensor& in) { return block->forward(in); },
                               y);
  }
  return adaptive_avg_pool2d(y, {1, 1}).flatten(1);
}

Tensor ResNet::forward(const Tensor& x) { return fc(features(x)); }

namespace {
ResNetOptions with_width(ResNetOptions o, int64_t standard) {
  if (o.width == 0) o.width = standard;
  return o;
}
}  // namespace

std::shared_ptr<ResNet> resnet18(const ResNetOptions& o) {
  return std::make_shared<ResNet>(BlockKind::basic, std::vector<int64_t>{2, 2, 2, 2}, Stem::imagenet, with_width(o, 64));
}
std::shared_ptr<ResNet> resnet34(const ResNetOptions& o) {
  return std::make_shared<ResNet>(BlockKind::basic, std::vector<int64_t>{3, 4, 6, 3}, Stem::imagenet, with_width(o, 64));
}
std::shared_ptr<ResNet> resnet50(const ResNetOptions& o) {
  return std::make_shared<ResNet>(BlockKind::bottleneck, std::vector<int64_t>{3, 4, 6, 3}, Stem::imagenet,
                                  with_width(o, 64));
}
std::shared_ptr<ResNet> resnet18_cifar(const ResNetOptions& o) {
  return std::make_shared<ResNet>(BlockKind::basic, std::vector<int64_t>{2, 2, 2, 2}, Stem::cifar, with_width(o, 64));
}
std::shared_ptr<ResNet> resnet20(const ResNetOptions& o) {
  return std::make_shared<ResNet>(BlockKind::basic, std::vector<int64_t>{3, 3, 3}, Stem::cifar, with_width(o, 16));
}
std::shared_ptr<ResNet> resnet32(const ResNetOptions& o) {
  return std::make_shared<ResNet>(BlockKind::basic, std::vector<int64_t>{5, 5, 5}, Stem::cifar, with_width(o, 16));
}
std::shared_ptr<ResNet> resnet56(const ResNetOptions& o) {
  return std::make_shared<ResNet>(BlockKind::basic, std::vector<int64_t>{9, 9, 9}, Stem::cifar, with_width(o, 16));
}

std::shared_ptr<ResNet> resnet(const std::string& name, const ResNetOptions& o) {
  if (name == "resnet18") return resnet18(o);
  if (name == "resnet34") return resnet34(o);
  if (name == "resnet50") return resnet50(o);
  if (name == "resnet18_cifar") return resnet18_cifar(o);
  if (name == "resnet20") return resnet20(o);
  if (name == "resnet32") return resnet32(o);
  if (name == "resnet56") return resnet56(o);
  PRECIS_CHECK(false, "models::resnet: unknown model '", name,
               "' (resnet18, resnet34, resnet50, resnet18_cifar, resnet20, resnet32, resnet56)");
  return nullptr;
}

}  // namespace precis::models
