#pragma once
// The backward graph. Each op call that needs gradients records a Node holding what backward
// needs (saved tensors, shapes) and one Edge per differentiable input, pointing at the node that
// produced that input (or at the AccumulateGrad sink of a leaf).
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ops/op_table.h"
#include "tensor/tensor.h"

namespace precis::autograd {

using TensorList = std::vector<Tensor>;

class Node;

/// Shape, dtype and device of an op input, kept so the engine can check (and cast) the gradient
/// each backward returns for it.
struct InputMetadata {
  Shape sizes;               ///< a returned gradient must have exactly this shape (InternalError otherwise)
  DType dtype = DType::f32;  ///< a floating input's gradient is cast to it
  Device device;             ///< the gradient is moved to it
};

/// Input `input_nr` of `fn` (fn null: the input needed no gradient).
struct Edge {
  std::shared_ptr<Node> fn;  ///< the producer's node (owning: a graph lives as long as its outputs)
  uint32_t input_nr = 0;     ///< which output of `fn` the input was (its gradient slot there)
  bool valid() const { return fn != nullptr; }  ///< whether the input takes a gradient
};

/// A vertex of the backward graph, held by shared_ptr from the outputs' grad_fn and from the
/// edges of later nodes. Destroying a long chain frees it iteratively (no deep recursion).
/// Nodes are built while ops run and then only read by the engine; they are not thread-safe.
class Node : public std::enable_shared_from_this<Node> {
 public:
  /// Takes the next sequence number (a process-wide atomic counter).
  Node();
  virtual ~Node();
  /// Maps the gradients of this node's outputs (undefined where none arrived) to the gradients
  /// of its inputs, one per next edge (undefined where an input needs none).
  virtual TensorList apply(TensorList&& grad_outputs) = 0;
  /// A name for messages, e.g. "matmul_backward" or a custom Function's demangled type.
  virtual std::string name() const = 0;
  /// The op-table row this node belongs to, when it came from an op.
  virtual bool has_op() const { return false; }
  /// That op; meaningful only when has_op() (OpId::copy otherwise).
  virtual OpId op() const { return OpId::copy; }
  /// Drops saved tensors after a backward without retain_graph.
  virtual void release_saved() {}
  /// Whether the profiler (ops/profiler.h) times the ops this node runs as entries of their own
  /// instead of timing the node as one: a checkpointed region's node, whose recomputed forward
  /// and inner backward pass are what a user choosing what to recompute needs to see.
  virtual bool profiles_own_ops() const { return false; }

  /// One edge per input, in argument order (filled when the node is recorded).
  std::vector<Edge>& next_edges() { return next_edges_; }
  /// Metadata per input, parallel to next_edges() (empty for AccumulateGrad).
  std::vector<InputMetadata>& input_metadata() { return input_metadata_; }
  /// Read-only input_metadata().
  const std::vector<InputMetadata>& input_metadata() const { return input_metadata_; }
  /// Read-only next_edges().
  const std::vector<Edge>& next_edges() const { return next_edges_; }
  /// Creation order: among ready nodes the engine runs the most recent first (after AccumulateGrad).
  uint64_t sequence_nr() const { return sequence_nr_; }
  /// Outputs of the forward op, i.e. gradient slots apply() receives (1 by default).
  uint32_t num_outputs() const { return num_outputs_; }
  /// Set when the node is recorded, from the op's output count.
  void set_num_outputs(uint32_t n) { num_outputs_ = n; }

  /// Hooks on the gradient of output `output_nr` (Tensor::register_hook on a non-leaf).
  struct PreHook {
    int id;              ///< the handle register_hook returned (for remove_hook)
    uint32_t output_nr;  ///< the output whose gradient the hook sees
    /// Sees that gradient before apply(); a defined return value replaces it.
    std::function<Tensor(const Tensor&)> fn;
  };
  /// The hooks, run in registration order.
  std::vector<PreHook>& pre_hooks() { return pre_hooks_; }
  /// Non-leaf tensors that asked retain_grad(), by output number (weak: no cycle).
  std::vector<std::pair<uint32_t, std::weak_ptr<TensorImpl>>>& retained() { return retained_; }

 private:
  std::vector<Edge> next_edges_;
  std::vector<InputMetadata> input_metadata_;  // parallel to next_edges_ (empty for AccumulateGrad)
  uint64_t sequence_nr_;
  uint32_t num_outputs_ = 1;
  std::vector<PreHook> pre_hooks_;
  std::vector<std::pair<uint32_t, std::weak_ptr<TensorImpl>>> retained_;
};

/// The sequence number the next Node created will take: nodes numbered below it exist already.
uint64_t next_sequence_nr();

/// A Node whose backward is a closure: what every op's forward records.
class FunctionNode final : public Node {
 public:
  /// Maps the output gradients to one gradient per input (undefined for inputs needing none).
  using Backward = std::function<TensorList(const TensorList& grad_outputs)>;
  /// `name` empty: named "<op name>_backward".
  FunctionNode(OpId op, Backward backward, std::string name = {});
  /// Runs the closure; StateError when it was released (a second backward without retain_graph).
  TensorList apply(TensorList&& grad_outputs) override;
  /// The name given, else "<op name>_backward".
  std::string name() const override;
  bool has_op() const override { return true; }
  /// The op that recorded this node.
  OpId op() const override { return op_; }
  void release_saved() override { backward_ = nullptr; }

 private:
  OpId op_;
  Backward backward_;
  std::string name_;
};

/// What a gradient hook returned for `grad`: `replaced`, or `grad` when the hook returned none.
/// A hook may change values only: a different shape, dtype or device is a ShapeError / DTypeError /
/// DeviceError naming `where()` (PyTorch: "hook ... has changed the size of value"); `where` runs
/// only then, so a hook call builds no message.
Tensor checked_hook_result(const Tensor& grad, const Tensor& replaced, const std::function<std::string()>& where);

/// The sink of a leaf tensor: adds the incoming gradient into .grad, then runs the leaf's
/// post-accumulate hooks. The first gradient becomes .grad without a copy when nothing else holds
/// it or its memory; later ones are added into that same tensor in place (same dtype, device and
/// shape, .grad contiguous and not requiring grad), so .grad keeps its identity across backwards
/// (gradient buckets can hold it). Otherwise .grad is replaced by the out-of-place sum.
class AccumulateGrad final : public Node {
 public:
  /// The sink of `leaf` (held strongly: the graph keeps the leaf alive).
  explicit AccumulateGrad(Tensor leaf);
  /// Runs the leaf's hooks (register_hook) on g, then adds it into .grad and runs the
  /// post-accumulate hooks.
  TensorList apply(TensorList&& grad_outputs) override;
  /// g after the leaf's hooks (autograd::grad captures this for a leaf input, as PyTorch).
  Tensor run_hooks(Tensor g) const;
  std::string name() const override { return "AccumulateGrad"; }  ///< "AccumulateGrad"
  /// The leaf whose .grad this node accumulates (PyTorch's AccumulateGrad.variable).
  const Tensor& variable() const { return leaf_; }

 private:
  Tensor leaf_;
};

/// A tensor kept for backward, with the version it had when saved. unpack() refuses a tensor
/// that was modified in place since. Holds a detached alias, so saving an op's own output makes
/// no reference cycle.
class SavedTensor {
 public:
  SavedTensor() = default;
  /// Keeps a detached alias of `t` (sharing its storage, no copy) and its current version; an
  /// undefined `t` gives an undefined SavedTensor.
  explicit SavedTensor(const Tensor& t);
  /// Throws StateError if the tensor was modified in place after it was saved.
  Tensor unpack(const char* op_name = nullptr) const;
  bool defined() const { return tensor_.defined(); }  ///< whether a defined tensor was saved

 private:
  Tensor tensor_;
  uint32_t version_ = 0;
};

}  // namespace precis::autograd
