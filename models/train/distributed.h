#pragma once
// precis-train --distributed: the pieces the trainer adds when it runs as one rank of an mpirun job
// (docs/distributed.md). Rank r trains on its share of each global batch (the global batch is
// world_size consecutive batches of the task's loader, so `mpirun -np N ... --batch B` sees the
// micro-batches that `--batch B --accum N` sees), DistributedDataParallel averages the gradients
// during backward, rank 0 writes checkpoints, metrics and progress, and evaluation is sharded and
// reduced.
#include <memory>

#include "data/data_loader.h"
#include "dist/ddp.h"

namespace precis::nn {
class Module;
}
namespace precis::amp {
class GradScaler;
}

namespace precis::train {

struct DistributedRun {
  std::shared_ptr<dist::ProcessGroup> group;
  std::unique_ptr<dist::DistributedDataParallel> ddp;
  std::unique_ptr<data::DataLoader> train_loader;  ///< this rank's shares of the task's batches
  std::unique_ptr<data::DataLoader> test_loader;   ///< this rank's test batches: i % world == rank
  int rank() const { return group->rank(); }
  int size() const { return group->size(); }
};

/// The process group (MPI under mpirun), DDP over `model` with `scaler`'s loss flag, and loaders
/// over the same data sets as `train` and `test`, which must outlive the result.
std::unique_ptr<DistributedRun> make_distributed_run(nn::Module& model, amp::GradScaler& scaler,
                                                     const data::DataLoader& train, const data::DataLoader& test);

/// (loss_sum, correct, count) summed over the ranks (in place, f64).
void reduce_evaluation(DistributedRun& run, double& loss_sum, double& correct, double& count);

/// --precision fp8: the step's amaxes (slot 0 of every fp8 linear layer's three histories) become
/// their max over the ranks, so that every rank moves to the same scales, as one process
/// accumulating the ranks' micro-batches would: one all_reduce(max) of one small tensor per
/// optimizer step, after backward (the gradient buckets' all-reduces end before the output
/// gradients' amaxes are known). A no-op without fp8 layers.
void reduce_fp8_amaxes(DistributedRun& run, nn::Module& model);

}  // namespace precis::train
