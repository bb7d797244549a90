#pragma once
// The ops' side of activation checkpointing (autograd/checkpoint.h): what an op must know when a
// checkpointed region runs again in backward.
//
//  - is_recomputing(): an op with an effect beyond its outputs must not apply it twice. batch_norm
//    does not update the running statistics again (the forward did; the recomputation uses the
//    batch statistics, as the forward did).
//  - kept_or_computed(): selective recomputation keeps the outputs of chosen ops (the GEMMs) from
//    the forward and recomputes only the rest. The expensive ops route their computation through
//    it: in a selective region's forward their outputs are kept, and in its recomputation the
//    kept outputs come back in call order instead of being computed again, while the op still
//    records its backward node as usual. attention_softmax keeps its dropout mask, not its
//    output: its recomputation applies the kept mask instead of drawing it.
//
//   Tensor out = kept_or_computed(OpId::linear, [&] { return run_the_gemm(); });
#include <array>
#include <functional>
#include <utility>
#include <vector>

#include "ops/op_table.h"
#include "tensor/tensor.h"

namespace precis {

/// True while a checkpointed region is being recomputed on this thread.
bool is_recomputing();

/// Marks the thread as recomputing for its scope (the checkpoint's backward uses it).
class RecomputingGuard {
 public:
  RecomputingGuard();
  ~RecomputingGuard();
  RecomputingGuard(const RecomputingGuard&) = delete;
  RecomputingGuard& operator=(const RecomputingGuard&) = delete;

 private:
  bool prev_;
};

/// One call of an op whose outputs a selective region can keep (the ops that route their
/// computation through kept_or_computed: linear, linear_gelu, conv2d, matmul, and
/// attention_softmax with dropout, whose kept output is its packed dropout mask).
struct KeepCandidate {
  OpId op;        ///< the op called
  int64_t index;  ///< how many calls of `op` the region made before this one (from 0, in call order)
};

/// Decides, for each candidate call of a selective region's forward, whether its outputs are kept
/// (true) or recomputed in backward (false); it may be asked more than once about one call
/// (keeps_for_recompute asks ahead of it), so it must be a function of the candidate alone. Only
/// the forward asks: the replay follows what the forward recorded.
using KeepPolicy = std::function<bool(const KeepCandidate&)>;

/// The outputs a selective region keeps from its forward, in call order. A region's store records
/// during its forward and replays during each recomputation; a store without a policy (full
/// checkpointing) keeps nothing but still passes calls on to an enclosing region's store, so that
/// nested regions see the same sequence of calls in the forward and in a recomputation.
class KeptOutputs {
 public:
  /// A store keeping the outputs of the calls `policy` chooses (none when it is empty).
  explicit KeptOutputs(KeepPolicy policy);
  /// Whether the next call of `op` in this region's forward is kept.
  bool keeps_next(OpId op) const;
  /// Bytes held by the kept outputs (each storage once).
  int64_t nbytes() const;
  /// Drops what was kept (after the last backward).
  void clear() { recorded_.clear(); }

  /// Records calls on this thread for its scope: each candidate call stores the policy's choice,
  /// and its outputs when kept.
  class Recording {
   public:
    /// Makes `store` the thread's recording store (under the enclosing one, which sees its calls too).
    explicit Recording(KeptOutputs& store);
    ~Recording();
    Recording(const Recording&) = delete;
    Recording& operator=(const Recording&) = delete;

   private:
    KeptOutputs* prev_;
  };
  /// Replays the recorded calls on this thread for its scope. finish() checks that the
  /// recomputation made every candidate call the forward made.
  class Replaying {
   public:
    /// Makes `store` the thread's store, replaying from its first recorded call.
    explicit Replaying(KeptOutputs& store);
    ~Replaying();
    Replaying(const Replaying&) = delete;
    Replaying& operator=(const Replaying&) = delete;
    /// StateError when fewer kept calls were replayed than the forward recorded.
    void finish() const;

   private:
    KeptOutputs* prev_;
    KeptOutputs& store_;
  };

  /// Whether this store or an enclosing one records the outputs of the next call of `op` now.
  bool records(OpId op) const;
  /// One call of `op` (see kept_or_computed).
  std::vector<Tensor> run(OpId op, const std::function<std::vector<Tensor>()>& compute);

 private:
  enum class Mode { idle, recording, replaying };
  // One per candidate call of the forward (a policy's choice can depend on the call's place, so
  // the replay must see every candidate call, not only the kept ones): its outputs when kept.
  struct Call {
    OpId op;
    bool kept;
    std::vector<Tensor> outputs;
    std::vector<uint32_t> versions;  // of the kept outputs when the op made them
  };
  KeepPolicy policy_;
  std::array<int64_t, kNumOps> calls_per_op_{};  // candidate calls of each op in the forward so far
  std::vector<Call> recorded_;
  size_t next_ = 0;
  Mode mode_ = Mode::idle;
  KeptOutputs* parent_ = nullptr;  // the enclosing region's store while recording
};

namespace detail {
inline thread_local KeptOutputs* t_kept_outputs = nullptr;
}  // namespace detail

/// True when a checkpointed region's store sees this thread's calls: a kept_or_computed() result
/// may then be held by the store (and replayed again), so it must not be written in place.
inline bool kept_outputs_active() { return detail::t_kept_outputs != nullptr; }

/// True when a selective region is recording on this thread and keeps this call of `op` (asked
/// before the call): the op then computes what its backward needs even under NoGradGuard
/// (linear_gelu's pre-activation), since the kept outputs will be replayed under grad mode.
bool keeps_for_recompute(OpId op);

/// Makes the calls of `part` in its scope count as calls of `whole` for a selective region's store
/// and its keep policy: a composite op composed from another where it has no fused kernel (the
/// GPU's linear_gelu, from linear and gelu) is then one candidate call of itself on every backend,
/// so that a policy's call indices do not depend on the device.
class KeepCountsAs {
 public:
  /// Renames calls of `part` to `whole` on this thread until the guard's scope ends.
  KeepCountsAs(OpId part, OpId whole);
  ~KeepCountsAs();
  KeepCountsAs(const KeepCountsAs&) = delete;
  KeepCountsAs& operator=(const KeepCountsAs&) = delete;

 private:
  OpId prev_part_, prev_whole_;
};

/// The outputs of one call of `op` (several: an op that also keeps a tensor for its backward),
/// from compute() or, in a selective recomputation, from the forward's store.
template <typename F>
std::vector<Tensor> kept_or_computed_list(OpId op, F&& compute) {
  if (detail::t_kept_outputs == nullptr) [[likely]]
    return compute();
  return detail::t_kept_outputs->run(op, std::forward<F>(compute));
}

/// The single output of one call of `op` (see kept_or_computed_list).
template <typename F>
Tensor kept_or_computed(OpId op, F&& compute) {
  if (detail::t_kept_outputs == nullptr) [[likely]]
    return compute();
  return detail::t_kept_outputs->run(op, [&] { return std::vector<Tensor>{compute()}; })[0];
}

}  // namespace precis
