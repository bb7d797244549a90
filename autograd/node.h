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
  Shape sizes;
  DType dtype = DType::f32;
  Device device;
};

/// Input `input_nr` of `fn` (fn null: the input needed no gradient).
struct Edge {
  std::shared_ptr<Node> fn;
  uint32_t input_nr = 0;
  bool valid() const { return fn != nullptr; }
};

class Node : public std::enable_shared_from_this<Node> {
 public:
  Node();
  virtual ~Node();
  /// Maps the gradients of this node's outputs (undefined where none arrived) to the gradients
  /// of its inputs, one per next edge (undefined where an input needs none).
  virtual TensorList apply(TensorList&& grad_outputs) = 0;
  virtual std::string name() const = 0;
  /// The op-table row this node belongs to, when it came from an op.
  virtual bool has_op() const { return false; }
  virtual OpId op() const { return OpId::copy; }
  /// Drops saved tensors after a backward without retain_graph.
  virtual void release_saved() {}

  std::vector<Edge>& next_edges() { return next_edges_; }
  std::vector<InputMetadata>& input_metadata() { return input_metadata_; }
  const std::vector<InputMetadata>& input_metadata() const { return input_metadata_; }
  const std::vector<Edge>& next_edges() const { return next_edges_; }
  uint64_t sequence_nr() const { return sequence_nr_; }
  uint32_t num_outputs() const { return num_outputs_; }
  void set_num_outputs(uint32_t n) { num_outputs_ = n; }

  /// Hooks on the gradient of output `output_nr` (Tensor::register_hook on a non-leaf).
  struct PreHook {
    int id;
    uint32_t output_nr;
    std::function<Tensor(const Tensor&)> fn;
  };
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

/// A Node whose backward is a closure: what every op's forward records.
class FunctionNode final : public Node {
 public:
  using Backward = std::function<TensorList(const TensorList& grad_outputs)>;
  FunctionNode(OpId op, Backward backward, std::string name = {});
  TensorList apply(TensorList&& grad_outputs) override;
  std::string name() const override;
  bool has_op() const override { return true; }
  OpId op() const override { return op_; }
  void release_saved() override { backward_ = nullptr; }

 private:
  OpId op_;
  Backward backward_;
  std::string name_;
};

/// The sink of a leaf tensor: adds the incoming gradient into .grad, then runs the leaf's
/// post-accumulate hooks. The first gradient becomes .grad without a copy when nothing else holds
/// it or its memory; later ones are added into that same tensor in place (same dtype, device and
/// shape, .grad contiguous and not requiring grad), so .grad keeps its identity across backwards
/// (gradient buckets can hold it). Otherwise .grad is replaced by the out-of-place sum.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(Tensor leaf);
  TensorList apply(TensorList&& grad_outputs) override;
  std::string name() const override { return "AccumulateGrad"; }
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
  explicit SavedTensor(const Tensor& t);
  /// Throws StateError if the tensor was modified in place after it was saved.
  Tensor unpack(const char* op_name = nullptr) const;
  bool defined() const { return tensor_.defined(); }

 private:
  Tensor tensor_;
  uint32_t version_ = 0;
};

}  // namespace precis::autograd
