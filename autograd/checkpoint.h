#pragma once
// Activation checkpointing (torch.utils.checkpoint, and Megatron's selective recomputation):
// run part of the forward without keeping its intermediate tensors, and run it again in backward
// to get them back. Memory for the intermediates of one region at a time, for one more forward
// of the region per step.
//
//   Tensor y = autograd::checkpoint([&](const Tensor& x, const Tensor& mask) { return layer.forward(x, mask); },
//                                   x, mask);
//   loss(y).backward();  // the layer's forward runs again here, then its backward
//
// The recomputation is the same computation as the forward, bit for bit (Note [Exact
// recomputation] in checkpoint.cpp): the same autocast settings and casts, the same random
// numbers from the same generators, grad mode on, on the thread that runs backward. Gradients
// reach the function's tensor arguments and every tensor requiring grad that the function reads
// (the module parameters its closure captures) through the engine as without checkpointing, so
// each leaf's gradient is accumulated once per backward (data-parallel hooks fire once).
//
// Contract: the function must be deterministic in what it computes from its arguments and the
// tensors it captures, must not modify them in place (CheckpointError for its arguments and the
// tensors requiring grad it reads; a captured buffer that requires no grad is not checked, and
// the recomputation would modify it a second time, as in PyTorch), and must not change
// them between forward and backward (CheckpointError at backward: pass tensors that change, such
// as a reused input buffer, as arguments so their versions are checked). Tensors it captures that
// do not require grad are read again at backward as they are then. `fn` itself is kept and called
// again at backward (unlike Python's closures, C++ references keep nothing alive): whatever it
// captures by reference must outlive the backward — modules and members do; a local of the
// function that called checkpoint does not, so capture such a local by value or pass it as an
// argument. docs/checkpointing.md.
#include <concepts>
#include <cstdint>
#include <functional>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "autograd/node.h"
#include "ops/op_table.h"
#include "ops/recompute.h"

namespace precis::autograd {

/// What a checkpointed region keeps for backward.
enum class CheckpointMode : uint8_t {
  none,       ///< no checkpointing: the function runs as a plain call and keeps everything
  full,       ///< keeps only the region's inputs; backward recomputes the whole region
  selective,  ///< also keeps the outputs of CheckpointOptions::kept_ops; backward recomputes the rest
};

/// "none", "full" or "selective".
const char* checkpoint_mode_name(CheckpointMode mode);
/// The mode named "none", "full" or "selective"; ValueError otherwise.
CheckpointMode parse_checkpoint_mode(std::string_view name);

/// The ops whose outputs selective recomputation keeps by default: the GEMMs with a weight
/// (linear, linear_gelu, conv2d), and attention's fused score pass (attention_softmax), whose kept
/// output is its dropout mask alone. The GEMMs hold most of a layer's FLOPs, and their outputs are
/// the size of the activations around them; the mask is one bit per score (1/16 of the bf16
/// weights it spares a Philox draw for). matmul (attention's score and context products) is not
/// kept: in attention its outputs are (batch, heads, L, L), the memory selective recomputation
/// exists to drop, for FLOPs that grow only as L·L·d. Add OpId::matmul to keep those too.
std::vector<OpId> default_selective_kept_ops();

/// How checkpoint() treats a region.
struct CheckpointOptions {
  CheckpointMode mode = CheckpointMode::full;  ///< what the region keeps
  /// selective: ops whose outputs are kept from the forward (ignored in the other modes).
  std::vector<OpId> kept_ops = default_selective_kept_ops();
  /// selective, finer than kept_ops (which it replaces when set): asked about each call of an op
  /// that can be kept (linear, linear_gelu, conv2d, matmul, attention_softmax) in the region's forward, with the op
  /// and how many calls of it came before in the region; true keeps that call's outputs. It must
  /// be a function of the candidate alone (linear_gelu asks before its call as well as at it).
  /// PyTorch's selective checkpointing policy function, decided on the call's place rather than
  /// its arguments. E.g. in a BERT layer (linear calls 0-2 q, k, v; 3 the attention output; 4 the
  /// feed-forward output) keep linear_gelu and linear calls 3-4, recomputing q, k and v.
  KeepPolicy keep = {};
};

/// checkpoint() on a type-erased function: `fn` computes the region's outputs (it has its
/// arguments bound); `inputs` are its tensor arguments (their versions are checked). With
/// CheckpointMode::none or grad mode off, returns fn().
TensorList checkpoint_list(std::function<TensorList()> fn, const TensorList& inputs,
                           const CheckpointOptions& options = {});

namespace detail {
template <typename T>
struct is_tensor_tuple : std::false_type {};
template <typename... T>
struct is_tensor_tuple<std::tuple<T...>> : std::bool_constant<(std::is_same_v<T, Tensor> && ...)> {};
template <>
struct is_tensor_tuple<std::pair<Tensor, Tensor>> : std::true_type {};

template <typename R>
TensorList to_list(R&& r) {
  using D = std::remove_cvref_t<R>;
  if constexpr (std::is_same_v<D, Tensor>) {
    return {std::forward<R>(r)};
  } else if constexpr (std::is_same_v<D, TensorList>) {
    return std::forward<R>(r);
  } else {
    static_assert(is_tensor_tuple<D>::value,
                  "checkpoint: the function must return a Tensor, a std::vector<Tensor>, or a std::tuple or "
                  "std::pair of Tensors");
    return std::apply([](auto&&... t) { return TensorList{std::forward<decltype(t)>(t)...}; }, std::forward<R>(r));
  }
}

template <typename R>
R from_list(TensorList&& list) {
  if constexpr (std::is_same_v<R, Tensor>) {
    return std::move(list.at(0));
  } else if constexpr (std::is_same_v<R, TensorList>) {
    return std::move(list);
  } else {
    return [&]<size_t... I>(std::index_sequence<I...>) {
      return R{std::move(list.at(I))...};
    }(std::make_index_sequence<std::tuple_size_v<R>>{});
  }
}

template <typename A>
void collect_tensor(TensorList& out, const A& a) {
  if constexpr (std::is_same_v<A, Tensor>) out.push_back(a);
}
}  // namespace detail

/// Runs fn(args...) as a checkpointed region (see the file comment) and returns what it returns:
/// a Tensor, a std::vector<Tensor>, or a std::tuple / std::pair of Tensors. Tensor arguments are
/// the region's inputs (they need not require grad; one may be returned as it is); other arguments
/// are copied and passed again to the recomputation, so tensors inside them (a
/// std::vector<Tensor>) are handles to the same data, not checked for in-place changes between
/// forward and backward as Tensor arguments are: pass tensors directly. `fn` is copied and kept
/// until backward. Regions nest.
template <typename F, typename... Args>
  requires std::invocable<F&, const Args&...>
auto checkpoint(const CheckpointOptions& options, F fn, const Args&... args) {
  using R = std::remove_cvref_t<std::invoke_result_t<F&, const Args&...>>;
  TensorList inputs;
  (detail::collect_tensor(inputs, args), ...);
  auto run = [fn = std::move(fn), ... args = args]() mutable -> TensorList { return detail::to_list(fn(args...)); };
  return detail::from_list<R>(checkpoint_list(std::move(run), inputs, options));
}

/// checkpoint(options, fn, args...) with the default options (full checkpointing).
template <typename F, typename... Args>
  requires std::invocable<F&, const Args&...>
auto checkpoint(F fn, const Args&... args) {
  return checkpoint(CheckpointOptions{}, std::move(fn), args...);
}

}  // namespace precis::autograd
