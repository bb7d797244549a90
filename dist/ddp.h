#pragma once
// Data-parallel training (torch.nn.parallel.DistributedDataParallel's reducer): every rank holds a
// replica of the parameters, computes gradients on its share of the batch, and after backward
// every rank's .grad holds the mean over the ranks, so the optimizers step identical replicas.
//
//   auto pg = dist::init_process_group();
//   dist::DistributedDataParallel ddp(pg, model.named_parameters(), model.named_buffers(),
//                                     {.scaler = &scaler});
//   for (batch : this rank's share) {
//     ddp.pre_forward();                          // BatchNorm buffers from rank 0
//     Tensor loss = loss_fn(model(batch.x), batch.y);
//     scaler.scale(loss).backward();              // gradients reduced while backward runs
//     scaler.step(opt); scaler.update(); opt.zero_grad();
//   }
//
// How: gradients are grouped in buckets, in reverse registration order (roughly the order backward
// produces them), a small first bucket then bucket_cap_mb each. Each parameter's post-accumulate
// hook copies its gradient / world size into its bucket's slice; a bucket whose gradients are all
// in is all-reduced (sum) at once, buckets launching in index order only, so that every rank
// issues the same collectives in the same order. A callback queued for the end of backward
// launches what is left, waits for every bucket and writes the means back into .grad (in place).
// The loss scaler's rank-local "non-finite loss" flag (the options' scaler, else the one this
// thread last scaled a loss with) rides in one extra element at the tail of the last bucket, so
// every rank skips (and keeps its scale) alike without another collective.
// With a ZeroOptimizer (dist/zero.h) the buckets are reduce-scattered instead: each rank keeps the
// mean of its shard only, and the optimizer steps that shard.
// Works on dist/ (not nn::Module) so that it sits below models: pass named_parameters().
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dist/process_group.h"

namespace precis::amp {
class GradScaler;
}

namespace precis::dist {

/// How DistributedDataParallel buckets and reduces (PyTorch's DDP defaults).
struct DistributedDataParallelOptions {
  /// Bytes of gradients per bucket after the first (PyTorch's default 25 MiB).
  double bucket_cap_mb = 25;
  /// The first bucket (the last layers' gradients, ready first) is small so that communication
  /// starts early (PyTorch's 1 MiB).
  double first_bucket_cap_mb = 1;
  /// Broadcast the buffers (BatchNorm running statistics) from rank 0 in pre_forward().
  bool broadcast_buffers = true;
  /// false: a parameter whose gradient backward did not produce is an error naming it (it would
  /// leave its bucket unlaunched). true: it contributes the gradient it holds (accumulated under
  /// no_sync), or zeros when it has none; after the reduction a parameter that some rank used
  /// since the last synced pass gets the sum of the ranks' contributions over the world size (so
  /// zeros count in the mean), and one that no rank used keeps its .grad untouched (none stays
  /// none, so optimizers skip it: no weight decay, no momentum), as PyTorch's. Costs one more
  /// all_reduce per synced pass (the ranks' used-map), read on the host at the end of backward.
  bool find_unused_parameters = false;
  /// The loss scaler whose non-finite-loss flag is reduced with the gradients and set back. Null:
  /// the enabled scaler whose scale() this thread called last (amp::GradScaler::last_scaling()),
  /// if any, so that omitting it cannot let a rank-local non-finite loss desynchronise the scales.
  amp::GradScaler* scaler = nullptr;
};

/// Data-parallel training over a ProcessGroup: averages the gradients of every rank during
/// backward, bucket by bucket, so that each rank's optimizer takes the same step
/// (docs/distributed.md).
class DistributedDataParallel {
 public:
  /// (name, tensor) pairs, as Module::named_parameters() returns them.
  using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

  /// Checks that every rank passes the same parameters and buffers (names, shapes, dtypes, order):
  /// otherwise ValueError on every rank naming the first difference (never a hang: each rank first
  /// gathers a count and hash of the others). Then copies rank 0's parameters and buffers to every
  /// rank, builds the buckets and registers one post-accumulate hook per parameter that requires
  /// grad. Parameters and buffers must be contiguous and on one device, the CPU or (with NCCL) one
  /// GPU (DeviceError / ValueError otherwise).
  DistributedDataParallel(std::shared_ptr<ProcessGroup> group, NamedTensors named_parameters,
                          NamedTensors named_buffers = {}, DistributedDataParallelOptions options = {});
  /// Removes the hooks. A reduction still in flight is waited for.
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  /// Call before each forward: broadcasts the buffers from rank 0 (when broadcast_buffers).
  void pre_forward();

  /// Whether the next backward reduces the gradients. false: backward only accumulates locally
  /// (gradient accumulation: call require_sync(acc.is_last_micro_step()) before each forward).
  void require_sync(bool sync) { sync_ = sync; }
  /// Whether the next backward reduces the gradients.
  bool require_sync() const { return sync_; }

  /// RAII form of require_sync(false) (torch's `with ddp.no_sync():`).
  class NoSync {
   public:
    /// Turns reduction off for `ddp` until this guard is destroyed (then restores the setting).
    explicit NoSync(DistributedDataParallel& ddp) : ddp_(ddp), before_(ddp.sync_) { ddp.sync_ = false; }
    ~NoSync() { ddp_.sync_ = before_; }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool before_;
  };
  /// Gradients of backward passes inside the returned guard's lifetime are not reduced.
  NoSync no_sync() { return NoSync(*this); }

  /// The group the gradients are reduced over.
  ProcessGroup& process_group() const { return *group_; }
  /// The parameter names of each bucket, in launch order.
  std::vector<std::vector<std::string>> bucket_parameter_names() const;
  /// Whether a ZeroOptimizer shards the gradients (reduce-scatter instead of all-reduce).
  bool sharded() const { return sharded_; }

 private:
  friend class ZeroOptimizer;
  struct Param {
    std::string name;
    Tensor tensor;
    int64_t bucket = 0;
    int64_t offset = 0;  // elements into the bucket's flat buffer
    int hook = -1;
    bool ready = false;  // its gradient is in the bucket in the current backward pass
    bool used = false;     // backward produced its gradient since the last synced pass
    bool reduced = true;   // the last synced pass gave it the mean (false: no rank used it)
  };
  struct Bucket {
    Tensor flat;                   // f32 (f64 for f64 parameters); the last one may have a tail
    std::vector<int64_t> params;   // indices into params_
    int64_t pending = 0;
    std::shared_ptr<Work> work;
    Tensor shard;                  // sharded: this rank's block of the reduced bucket, flat.numel() / world
  };

  void verify_same_everywhere(const NamedTensors& params, const NamedTensors& buffers);
  void build_buckets(const DistributedDataParallelOptions& o);
  void on_gradient(int64_t index);
  void launch_ready();
  void launch_flag();
  Tensor flag_to_send();
  void reduce_usage();
  void finalize();
  void end_synced_pass();
  void reset_pass();
  // ZeRO (dist/zero.h): rebuilds the buckets so that each is a whole number of world · align
  // elements, holds one parameter dtype, and no parameter crosses a multiple of `align` except at
  // its own multiples of `align` (so every block of `align` elements of a parameter, counted from
  // its start, lies in one rank's shard); then reduce-scatters them, and calls after_reduce at
  // the end of each synced backward instead of writing the means into .grad.
  void enable_sharding(int64_t align, std::function<void()> after_reduce);

  std::shared_ptr<ProcessGroup> group_;
  std::vector<Param> params_;
  NamedTensors buffers_;
  std::vector<Bucket> buckets_;
  DistributedDataParallelOptions options_;
  bool sync_ = true;
  bool pass_active_ = false;
  size_t next_launch_ = 0;
  Device device_ = Device::cpu();  // where every parameter, buffer and bucket lives
  int64_t tail_offset_ = -1;  // the scaler flag's slot in the last bucket, or -1
  amp::GradScaler* flag_scaler_ = nullptr;  // whose flag went out in the current pass, if any's
  bool sharded_ = false;
  int64_t align_ = 1;
  Tensor flag_;                       // sharded: the scaler's flag, reduced by its own all_reduce
  std::shared_ptr<Work> flag_work_;
  std::function<void()> after_reduce_;
};

}  // namespace precis::dist
