#pragma once
// ZeRO stage 1 (Rajbhandari et al., 2020): the optimizer state sharded across the data-parallel
// ranks, on DistributedDataParallel's buckets. Each rank keeps fp32 masters and moments for its
// shard only (12/N bytes per parameter with Adam instead of 12), steps that shard with the same
// optimizer kernels as unsharded training, and the updated parameters are all-gathered.
//
//   auto pg = dist::init_process_group();
//   dist::DistributedDataParallel ddp(pg, model.named_parameters(), model.named_buffers(),
//                                     {.scaler = &scaler});
//   dist::ZeroOptimizer opt(ddp, model.parameters(), [](std::vector<std::vector<Tensor>> shards) {
//     return std::make_unique<optim::Adam>(shards[0], optim::AdamOptions{.lr = 1e-3});
//   });
//   ... the loop of ddp.h, with scaler.unscale_(opt), scaler.clip_grad_norm_(opt, 1.0),
//   scaler.step(opt), scaler.update(), opt.zero_grad() as for any optimizer
//
// How: making it rebuilds ddp's buckets so that each is a whole number of world · kShardAlign
// elements and reduce-scatters them during backward (each rank gets the mean of its block of each
// bucket). Its parameters() are that block cut at parameter boundaries and every kShardAlign
// elements of a parameter ("pieces", leaf tensors aliasing one buffer per bucket, their .grad
// aliasing the reduced block): the wrapped optimizer steps them; step() then all-gathers each
// bucket's pieces into the model's parameters. Pieces of kShardAlign elements are the blocks in
// which the loss scaler's and clipping's kernels sum squares, so the whole model's squared norm is
// recombined from every rank's block sums in the unsharded order, bit for bit
// (reduce_gradient_stats). state_dict() is the unsharded optimizer's, whatever the world size
// (docs/distributed.md, "Sharded optimizer state").
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dist/ddp.h"
#include "optim/optimizer.h"

namespace precis::dist {

/// Shards an optimizer (SGD, Adam, AdamW, with fp32 masters for f16/bf16 parameters) over the
/// ranks of a DistributedDataParallel: see the file comment and docs/distributed.md.
class ZeroOptimizer : public optim::Optimizer {
 public:
  /// Makes the wrapped optimizer from this rank's pieces, one list per parameter group (in the
  /// groups' order; never empty: a rank without a piece of a group gets one of zero elements).
  /// It must keep those groups and pieces as given.
  using Factory = std::function<std::unique_ptr<optim::Optimizer>(std::vector<std::vector<Tensor>> shard_groups)>;

  /// Elements per piece at most, and the alignment of pieces within their parameter: the block
  /// of the CPU loss scaler's squared-norm pass (ops/cpu/unscale.cpp) and twice clipping's
  /// (ops/cpu/clip.cpp).
  static constexpr int64_t kShardAlign = 16384;

  /// `param_groups`: the model's parameters, each one a parameter of `ddp` that requires grad, in
  /// no two groups (ValueError naming the parameter otherwise). Rebuilds ddp's buckets for
  /// reduce-scatter (StateError when ddp already has a ZeroOptimizer, or during backward), copies
  /// this rank's block of the parameters into its pieces and calls `make` with them. `ddp` must
  /// outlive every call of this optimizer (either may be destroyed first).
  ZeroOptimizer(DistributedDataParallel& ddp, std::vector<std::vector<Tensor>> param_groups, const Factory& make);
  /// One parameter group.
  ZeroOptimizer(DistributedDataParallel& ddp, std::vector<Tensor> params, const Factory& make)
      : ZeroOptimizer(ddp, std::vector<std::vector<Tensor>>{std::move(params)}, make) {}
  /// While it lives, optim::clip_grad_norm_ / clip_grad_value_ / grad_norms refuse the model's
  /// parameters (their .grad is the rank's unreduced gradient; optim::mark_sharded_gradient) and
  /// say to clip through this optimizer; destroyed, it lifts that.
  ~ZeroOptimizer() override;

  /// Copies the model's parameters into this rank's pieces (so that parameters loaded or set since
  /// the last step count), steps the pieces with the wrapped optimizer (options as optim::StepOptions: the
  /// scaler's found_inf is already every rank's), then all-gathers every bucket's pieces into the
  /// model's parameters. Two buckets' gathers are in flight at a time (one copied out while the
  /// next travels), so the step holds at most two buckets of gathered values; the call returns
  /// when the parameters hold the new values.
  void step(const optim::StepOptions& options = {}) override;
  /// Clears the model parameters' gradients (as Optimizer::zero_grad) and drops the pieces'.
  void zero_grad(bool set_to_none = true) override;

  /// The wrapped optimizer's learning rate of a group.
  double group_lr(size_t group) const override { return inner_->group_lr(group); }
  /// Sets the wrapped optimizer's learning rate of a group.
  void set_group_lr(size_t group, double lr) override { inner_->set_group_lr(group, lr); }
  /// As the wrapped optimizer's.
  bool has_momentum() const override { return inner_->has_momentum(); }
  /// As the wrapped optimizer's.
  double group_momentum(size_t group) const override { return inner_->group_momentum(group); }
  /// As the wrapped optimizer's.
  void set_group_momentum(size_t group, double momentum) override { inner_->set_group_momentum(group, momentum); }

  /// Makes the wrapped optimizer capturable (its steps read the lr from device memory). A
  /// ZeroOptimizer step itself cannot be captured: it reads the ranks' gradient statistics on the host.
  void set_capturable(bool capturable) override { inner_->set_capturable(capturable); }
  /// As the wrapped optimizer's.
  bool capturable() const override { return inner_->capturable(); }
  /// The wrapped optimizer's device copy of a group's lr and momentum.
  Tensor scheduled(size_t group) const override { return inner_->scheduled(group); }

  /// The state of one of this rank's pieces (parameters()); the whole model's is state_dict().
  Tensor state(const Tensor& piece, const std::string& key) const override;
  /// The unsharded optimizer's state dict over the model's parameters (full shapes, the same keys
  /// as the wrapped optimizer type's own), on every rank: a collective (all ranks call it; one
  /// all_gather per bucket and state key). Independent of the world size.
  StateDict state_dict() const override;
  /// Loads an unsharded state dict (from state_dict() at any world size, or from the wrapped
  /// optimizer type unsharded): each rank keeps its pieces' slices. No communication.
  void load_state_dict(const StateDict& dict) override;
  /// found_inf becomes the max over the ranks, and sq_norms the whole model's squared norm in
  /// entry 0 (zeros after), summed in the unsharded order: one all_reduce of every piece's squared
  /// norm (see the file comment). Reads the values on the host.
  void reduce_gradient_stats(const Tensor& found_inf, const Tensor& sq_norms) override;

  /// Clips the pieces' gradients by the whole model's 2-norm, as optim::clip_grad_norm_ over the
  /// model's gradients would (bit for bit on the CPU): the pieces' block sums (every
  /// kShardAlign / 2 elements, clipping's block) are all-reduced and combined in the unsharded
  /// order. A collective; call it on every rank. Only norm_type 2 (NotImplementedError otherwise).
  /// With a loss scaler, clip through GradScaler::clip_grad_norm_ instead (it uses
  /// reduce_gradient_stats).
  Tensor clip_grad_norm_(double max_norm, double norm_type = 2.0) override;

  /// The wrapped optimizer (over this rank's pieces).
  optim::Optimizer& inner() { return *inner_; }
  /// The model's parameters, group after group.
  const std::vector<Tensor>& model_parameters() const { return model_params_; }

 protected:
  std::vector<std::pair<std::string, double>> group_options_as_reals(size_t) const override { return {}; }
  void load_group_options(size_t, const StateDict&) override {}
  std::vector<std::string> state_keys() const override { return {}; }

 private:
  struct ModelParam {
    Tensor tensor;
    size_t group = 0;
    int64_t bucket = 0, offset = 0;  // in ddp's buckets
    int64_t first_block = 0;         // global index of its first kShardAlign block
    size_t ddp_param = 0;            // into ddp's parameters
  };
  struct Piece {
    int64_t param = -1;  // into params_, or -1 for an empty placeholder
    size_t group = 0;
    int64_t bucket = 0, begin = 0, length = 0, shard_offset = 0;
    Tensor tensor;
  };
  struct Layout;
  ZeroOptimizer(DistributedDataParallel& ddp, Layout layout, const Factory& make);
  static Layout plan(DistributedDataParallel& ddp, std::vector<std::vector<Tensor>> groups);
  void attach_gradients();
  // Sums over the ranks the per-block values `local` (global block index at granularity `block`,
  // value), each held by one rank, and combines them in the unsharded order: per parameter from
  // its first block, then over the parameters. `extra` rides along (summed) and comes back.
  double combine_blocks(const std::vector<std::pair<int64_t, double>>& local, int64_t block, double& extra) const;

  DistributedDataParallel& ddp_;
  std::vector<ModelParam> params_;
  std::vector<Tensor> model_params_;
  std::vector<Piece> pieces_;         // parameters() order
  std::vector<Tensor> shard_params_;  // per bucket: this rank's block, in the parameters' dtype
  std::unique_ptr<optim::Optimizer> inner_;
  // ddp's end-of-backward callback holds a weak reference: destroyed first, this optimizer is no
  // longer called (its buckets stay sharded); destroyed last, it never touches ddp.
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);
};

}  // namespace precis::dist
