// GPU coverage of the bundled models, computed without a GPU: a training step and an evaluation of
// each model (ResNet with the CIFAR and the ImageNet stem, basic and bottleneck blocks; BERT-mini
// masked-LM) run on the CPU in f32, under bf16 and f16 autocast (f16 with the loss scaler, the
// CUDA default) and with bf16 weights (fp32 masters), while every kernel lookup is recorded
// (set_kernel_lookup_observer). Every op looked up must then have a registered CUDA kernel for
// f32, f16 and bf16 and for the dtype it was looked up with. The registrations exist in a CUDA
// build without a device, so the check runs in every CUDA build; a CPU-only build checks the
// recording and says loudly that the CUDA half was not checked.
#include <catch2/catch.hpp>

#include <algorithm>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <utility>

#include "amp/autocast.h"
#include "amp/grad_scaler.h"
#include "core/grad_mode.h"
#include "models/bert.h"
#include "models/resnet.h"
#include "ops/detail/attention_softmax.h"
#include "ops/functional.h"
#include "ops/kernel_observer.h"
#include "ops/op_table.h"
#include "optim/adam.h"
#include "optim/sgd.h"
#include "tensor/factory.h"

using namespace precis;

namespace {

std::mutex g_mutex;
std::set<std::pair<OpId, DType>> g_lookups;

void record(OpId op, DeviceType device, DType dtype) {
  if (device != DeviceType::cpu) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  g_lookups.emplace(op, dtype);
}

// Records the lookups made while alive.
class LookupRecorder {
 public:
  LookupRecorder() { set_kernel_lookup_observer(&record); }
  ~LookupRecorder() { set_kernel_lookup_observer(nullptr); }
  LookupRecorder(const LookupRecorder&) = delete;
  LookupRecorder& operator=(const LookupRecorder&) = delete;
};

enum class Mode { f32, bf16_autocast, f16_autocast_scaled, bf16_weights };

amp::AutocastOptions autocast_for(Mode m) {
  if (m == Mode::bf16_autocast) return {.device_type = DeviceType::cpu, .dtype = DType::bf16, .enabled = true};
  if (m == Mode::f16_autocast_scaled) return {.device_type = DeviceType::cpu, .dtype = DType::f16, .enabled = true};
  return {.device_type = DeviceType::cpu, .dtype = DType::bf16, .enabled = false};
}

// One training step (forward under the mode's autocast, scaled backward, clipping through the
// scaler, optimizer step) and one evaluation (eval mode, no grad, loss and accuracy) of `model`.
template <typename Forward, typename Loss>
void step_and_eval(nn::Module& model, optim::Optimizer& opt, Mode mode, Forward&& forward, Loss&& loss_of) {
  amp::GradScaler scaler({.enabled = mode == Mode::f16_autocast_scaled});
  model.train();
  Tensor loss;
  {
    amp::Autocast ac(autocast_for(mode));
    loss = loss_of(forward());
  }
  scaler.scale(loss).backward();
  scaler.clip_grad_norm_(opt, 1.0);
  scaler.step(opt);
  scaler.update();
  opt.zero_grad();
  model.eval();
  {
    NoGradGuard no_grad;
    amp::Autocast ac(autocast_for(mode));
    const Tensor logits = forward();
    const Tensor l = loss_of(logits);
    const Tensor pred = std::get<1>(max(logits, -1));
    (void)sum(l.to(DType::f64)).item<double>();
    (void)sum(eq(pred, pred)).item<int64_t>();
  }
}

void run_resnet(const char* name, int64_t image, Mode mode) {
  Generator gen(7);
  auto model = models::resnet(name, {.num_classes = 5, .width = 4, .generator = &gen});
  if (mode == Mode::bf16_weights) model->to(DType::bf16);
  optim::SGD opt(model->parameters(), {.lr = 0.01, .momentum = 0.9, .weight_decay = 1e-4});
  const Tensor x = randn({2, 3, image, image}, {}, &gen).to(mode == Mode::bf16_weights ? DType::bf16 : DType::f32);
  const Tensor y = randint(0, 5, {2}, {.dtype = DType::i64}, &gen);
  step_and_eval(
      *model, opt, mode, [&] { return model->forward(x); },
      [&](const Tensor& logits) { return cross_entropy(logits, y); });
}

void run_bert(Mode mode) {
  Generator gen(11);
  models::BertConfig cfg = models::BertConfig::mini(64);
  cfg.generator = &gen;
  auto model = std::make_shared<models::BertForMaskedLM>(cfg);
  if (mode == Mode::bf16_weights) model->to(DType::bf16);
  optim::AdamW opt(model->parameters(), {.lr = 1e-3, .weight_decay = 0.01});
  const int64_t B = 2, L = 12;
  const Tensor ids = randint(0, 64, {B, L}, {.dtype = DType::i64}, &gen);
  // Mostly ignored positions (-100), as masked-LM batches have.
  const Tensor labels = where(lt(rand({B, L}, {}, &gen), 0.3), ids, full({B, L}, int64_t{-100}, {.dtype = DType::i64}));
  const Tensor mask = models::attention_mask_from_lengths(from_vector<int64_t>({L, L - 3}), L);
  step_and_eval(
      *model, opt, mode, [&] { return model->forward(ids, mask); },
      [&](const Tensor& logits) { return models::BertForMaskedLM::loss(logits, labels); });
}

std::string modes_name(Mode m) {
  switch (m) {
    case Mode::f32: return "f32";
    case Mode::bf16_autocast: return "bf16 autocast";
    case Mode::f16_autocast_scaled: return "f16 autocast + loss scaler";
    case Mode::bf16_weights: return "bf16 weights";
  }
  return "?";
}

}  // namespace

TEST_CASE("every kernel the bundled models look up in training and evaluation has a CUDA kernel for f32, f16, bf16",
          "[models][coverage][cuda_api]") {
  g_lookups.clear();
  {
    // Ops with an optional fused kernel (linear_gelu, dropout_add, attention's score pass, ...)
    // take it only where the backend has one (the CPU); on CUDA they run their composed ops, so
    // those are the lookups to record here.
    const bool fused = detail::set_fused_kernels(false);
    struct Restore {
      bool on;
      ~Restore() { detail::set_fused_kernels(on); }
    } restore{fused};
    LookupRecorder recorder;
    for (Mode mode : {Mode::f32, Mode::bf16_autocast, Mode::f16_autocast_scaled, Mode::bf16_weights}) {
      INFO("mode " << modes_name(mode));
      run_resnet("resnet20", 16, mode);        // CIFAR stem, basic blocks
      run_resnet("resnet18_cifar", 16, mode);  // CIFAR stem, four stages
      run_resnet("resnet18", 32, mode);        // ImageNet stem (7×7 stride 2, max-pool), basic blocks
      run_resnet("resnet50", 32, mode);        // ImageNet stem, bottlenecks
      run_bert(mode);
    }
  }
  std::set<OpId> ops;
  for (const auto& [op, dt] : g_lookups) ops.insert(op);
  // The recording itself: the ops every one of these models must have gone through.
  for (OpId op : {OpId::conv2d, OpId::conv2d_backward, OpId::batch_norm, OpId::batch_norm_backward, OpId::linear,
                  OpId::layer_norm, OpId::layer_norm_backward, OpId::cross_entropy, OpId::cross_entropy_backward,
                  OpId::index_select, OpId::matmul, OpId::softmax, OpId::sgd_step, OpId::adam_step,
                  OpId::unscale_grads}) {
    INFO("expected lookup of " << op_name(op));
    CHECK(ops.count(op) == 1);
  }
  std::string looked_up;
  for (OpId op : ops) looked_up += std::string(looked_up.empty() ? "" : ", ") + op_name(op);
  INFO("ops looked up: " << looked_up);
#ifdef PRECIS_HAS_CUDA
  std::string missing;
  for (OpId op : ops) {
    std::set<DType> need = {DType::f32, DType::f16, DType::bf16};
    for (const auto& [o, dt] : g_lookups)
      if (o == op) need.insert(dt);
    std::string lacks;
    for (DType dt : need)
      if (find_kernel(op, DeviceType::cuda, dt) == nullptr)
        lacks += std::string(lacks.empty() ? "" : "/") + std::string(dtype_name(dt));
    if (!lacks.empty()) missing += std::string(missing.empty() ? "" : "; ") + op_name(op) + " (" + lacks + ")";
  }
  INFO("ops without a CUDA kernel: " << missing);
  CHECK(missing.empty());
#else
  WARN("built without CUDA: " << ops.size()
                              << " ops recorded, but whether each has a CUDA kernel for f32, f16 and bf16 is NOT "
                                 "checked here; build with PRECIS_CUDA=ON to run the coverage check");
#endif
}
