// The --distributed pieces of precis-train (models/train/distributed.h).
#include "models/train/distributed.h"

#include "amp/grad_scaler.h"
#include "autograd/grad_mode.h"
#include "dist/sampler.h"
#include "models/nn/linear.h"
#include "models/nn/module.h"
#include "ops/functional.h"
#include "tensor/factory.h"

namespace precis::train {

namespace {

// The loader's data set, not owned: the task keeps it alive for the run.
std::shared_ptr<const data::Dataset> borrowed(const data::DataLoader& loader) {
  return std::shared_ptr<const data::Dataset>(&loader.dataset(), [](const data::Dataset*) {});
}

}  // namespace

std::unique_ptr<DistributedRun> make_distributed_run(nn::Module& model, amp::GradScaler& scaler,
                                                     const data::DataLoader& train, const data::DataLoader& test) {
  auto run = std::make_unique<DistributedRun>();
  run->group = dist::init_process_group();
  const int rank = run->rank(), world = run->size();
  run->ddp = std::make_unique<dist::DistributedDataParallel>(
      run->group, model.named_parameters(), model.named_buffers(),
      dist::DistributedDataParallelOptions{.scaler = &scaler});

  // Global batch i: the task loader's batches i·world .. i·world + world − 1, joined; every rank
  // takes an equal contiguous share (the original batches when they are full).
  const data::DataLoader* task_train = &train;
  auto global = [task_train, world](int64_t epoch) {
    const auto batches = task_train->batch_indices(epoch);
    dist::BatchLists out;
    for (size_t i = 0; i < batches.size(); i += static_cast<size_t>(world)) {
      out.emplace_back();
      for (size_t k = i; k < std::min(batches.size(), i + static_cast<size_t>(world)); ++k)
        out.back().insert(out.back().end(), batches[k].begin(), batches[k].end());
    }
    return out;
  };
  data::DataLoaderOptions to = train.options();
  to.batch_sampler = dist::distributed_batch_sampler(global, rank, world);
  run->train_loader = std::make_unique<data::DataLoader>(borrowed(train), to);

  // Evaluation: whole test batches round-robin; the sums are reduced afterwards.
  const data::DataLoader* task_test = &test;
  data::DataLoaderOptions eo = test.options();
  eo.batch_sampler = [task_test, rank, world](int64_t epoch) {
    const auto batches = task_test->batch_indices(epoch);
    dist::BatchLists mine;
    for (size_t i = static_cast<size_t>(rank); i < batches.size(); i += static_cast<size_t>(world))
      mine.push_back(batches[i]);
    return mine;
  };
  run->test_loader = std::make_unique<data::DataLoader>(borrowed(test), eo);
  return run;
}

void reduce_evaluation(DistributedRun& run, double& loss_sum, double& correct, double& count) {
  Tensor t = from_vector<double>({loss_sum, correct, count}, {3});
  run.group->all_reduce(t, dist::ReduceOp::sum)->wait();
  const auto v = t.to_vector<double>();
  loss_sum = v[0], correct = v[1], count = v[2];
}

void reduce_fp8_amaxes(DistributedRun& run, nn::Module& model) {
  std::vector<Tensor> slots;  // views of the live histories' slot 0
  for (const auto& [name, m] : model.named_modules()) {
    const auto* linear = dynamic_cast<const nn::Linear*>(m);
    if (linear == nullptr || !linear->fp8_enabled()) continue;
    const amp::Fp8LinearState s = linear->fp8_scaling().state();
    for (const amp::DelayedScalingState* d : {&s.input, &s.weight, &s.grad_output})
      slots.push_back(d->amax_history().narrow(0, 0, 1));
  }
  if (slots.empty()) return;
  NoGradGuard no_grad;
  const Tensor all = cat(slots, 0);
  run.group->all_reduce(all, dist::ReduceOp::max)->wait();
  for (size_t i = 0; i < slots.size(); ++i) Tensor(slots[i]).copy_(all.narrow(0, static_cast<int64_t>(i), 1));
}

}  // namespace precis::train
