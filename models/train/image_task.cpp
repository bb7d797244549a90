// ResNet image classification: Fashion-MNIST / MNIST (1×28×28) or CIFAR-10 (3×32×32).
#include <filesystem>

#include "autograd/grad_mode.h"
#include "core/error.h"
#include "data/cifar.h"
#include "data/idx.h"
#include "data/transforms.h"
#include "models/resnet.h"
#include "models/train/task.h"
#include "ops/functional.h"

namespace precis::train {

namespace {

class Subset : public data::Dataset {
 public:
  Subset(std::shared_ptr<const data::Dataset> base, int64_t n) : base_(std::move(base)), n_(n) {}
  int64_t size() const override { return n_; }
  data::Example get(int64_t index) const override {
    data::check_index("Subset", index, n_);
    return base_->get(index);
  }
  data::Example sample(int64_t index, data::SampleRng& rng) const override {
    data::check_index("Subset", index, n_);
    return base_->sample(index, rng);
  }

 private:
  std::shared_ptr<const data::Dataset> base_;
  int64_t n_;
};

bool is_cifar_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  return fs::exists(fs::path(dir) / "data_batch_1.bin") || fs::exists(fs::path(dir) / "test_batch.bin");
}

class ImageTask : public TrainTask {
 public:
  ImageTask(const TrainOptions& o, std::ostream& log) {
    std::string dir = o.data.empty() ? data::kFashionMnistDir : o.data;
    if (std::filesystem::exists(std::filesystem::path(dir) / "cifar-10-batches-bin"))
      dir = (std::filesystem::path(dir) / "cifar-10-batches-bin").string();
    PRECIS_CHECK_T(IOError, std::filesystem::is_directory(dir), "--data: the folder '", dir,
                   "' does not exist. Fashion-MNIST comes from the Debian package dataset-fashion-mnist "
                   "(scripts/install-deps.sh --data); --data may name a folder of MNIST-format IDX files or "
                   "CIFAR-10 binaries.");
    std::shared_ptr<const data::Dataset> train, test;
    int64_t channels = 1, size = 28, pad = 2;
    std::vector<float> mean{0.2860f}, std{0.3530f};  // Fashion-MNIST's pixel statistics
    std::string name;
    if (is_cifar_dir(dir)) {
      train = std::make_shared<data::Cifar10Dataset>(dir, true);
      test = std::make_shared<data::Cifar10Dataset>(dir, false);
      channels = 3, size = 32, pad = 4;
      mean = {0.4914f, 0.4822f, 0.4465f};
      std = {0.2470f, 0.2435f, 0.2616f};
      name = "CIFAR-10";
    } else {
      auto tr = std::make_shared<data::MnistDataset>(dir, true);
      test = std::make_shared<data::MnistDataset>(dir, false);
      size = tr->height();
      PRECIS_CHECK(tr->height() == tr->width(), "--data: expected square images in '", dir, "', got ",
                   tr->height(), "×", tr->width());
      train = tr;
      name = dir.find("fashion") != std::string::npos ? "Fashion-MNIST" : "MNIST-format";
    }
    const int64_t full_train = train->size(), full_test = test->size();
    train = take_first(train, o.limit_train);
    test = take_first(test, o.limit_test);
    data::Transform norm = data::normalize(mean, std);
    data::Transform train_tf =
        o.augment ? data::compose({data::random_crop(size, size, pad), data::random_horizontal_flip(), norm}) : norm;
    auto train_ds = std::make_shared<data::TransformDataset>(train, train_tf);
    auto test_ds = std::make_shared<data::TransformDataset>(test, norm);
    train_loader_ = std::make_unique<data::DataLoader>(
        train_ds, data::DataLoaderOptions{.batch_size = o.batch, .shuffle = true, .seed = o.seed,
                                          .num_workers = o.workers, .pin_memory = o.device.is_cuda()});
    test_loader_ = std::make_unique<data::DataLoader>(
        test_ds, data::DataLoaderOptions{.batch_size = o.eval_batch, .shuffle = false, .seed = o.seed,
                                         .num_workers = o.workers, .pin_memory = o.device.is_cuda()});
    model_ = models::resnet(o.model, {.num_classes = 10, .in_channels = channels, .width = o.width});
    model_->set_checkpointing({.mode = o.checkpoint_activations});
    if (!o.quiet)
      log << "data: " << name << " (" << dir << "), " << train->size() << "/" << full_train << " train, "
          << test->size() << "/" << full_test << " test, " << channels << "×" << size << "×" << size
          << (o.augment ? ", augmentation: random crop (pad " + std::to_string(pad) + ") + flip" : "") << "\n"
          << "model: " << o.model << ", " << model_->num_parameters() << " parameters\n";
  }

  std::shared_ptr<nn::Module> model() override { return model_; }
  std::shared_ptr<nn::Module> clone_model(const nn::Module& m) const override {
    return dynamic_cast<const models::ResNet&>(m).clone<models::ResNet>();
  }
  ForwardStats forward(nn::Module& m, const data::Batch& host, Device device) override {
    ForwardStats s;
    s.count = s.samples = host[1].numel();
    const data::Batch b = to_device(host, device);
    const Tensor& y = b[1];
    Tensor logits = m.forward(b[0]);
    s.loss = cross_entropy(logits, y);
    NoGradGuard no_grad;
    auto [values, pred] = max(logits.detach(), 1);
    s.correct = sum(eq(pred, y));
    return s;
  }
  data::DataLoader& train_loader() override { return *train_loader_; }
  data::DataLoader& test_loader() override { return *test_loader_; }
  const char* metric() const override { return "accuracy"; }

 private:
  std::shared_ptr<models::ResNet> model_;
  std::unique_ptr<data::DataLoader> train_loader_, test_loader_;
};

}  // namespace

data::Batch to_device(const data::Batch& batch, Device device) {
  if (device.is_cpu()) return batch;
  data::Batch out = batch;
  // A pinned batch (the loaders pin for a CUDA device) is copied asynchronously on the copy
  // stream, so the copy of the next batch can overlap this step's kernels.
  for (Tensor& t : out.tensors)
    if (t.defined()) t = t.to(device, /*non_blocking=*/t.is_pinned());
  return out;
}

std::shared_ptr<const data::Dataset> take_first(std::shared_ptr<const data::Dataset> base, int64_t n) {
  if (n <= 0 || n >= base->size()) return base;
  return std::make_shared<Subset>(std::move(base), n);
}

std::unique_ptr<TrainTask> make_image_task(const TrainOptions& options, std::ostream& log) {
  return std::make_unique<ImageTask>(options, log);
}

}  // namespace precis::train
