#pragma once
// Internal helpers of the optimizers' step(): the scaler pointers and the grouping of CUDA
// parameters into multi-tensor launches.
#include <map>
#include <tuple>
#include <vector>

#include "optim/fused_update.h"
#include "optim/optimizer.h"

namespace precis::optim::detail {

inline ScalerArgs scaler_args(const StepOptions& o) {
  ScalerArgs s;
  if (o.grad_scale.defined()) s.grad_scale = static_cast<const float*>(o.grad_scale.data_ptr());
  if (o.found_inf.defined()) s.found_inf = static_cast<const float*>(o.found_inf.data_ptr());
  return s;
}

/// CUDA parameters grouped by (group, device, param dtype, grad dtype): one multi-tensor launch
/// each. Holds the (possibly contiguous-copied) gradients until the launch.
template <typename TensorArgs>
class CudaBatches {
 public:
  void add(size_t group, const Tensor& param, const Tensor& grad, const TensorArgs& args) {
    const Key key{group, param.device().index, static_cast<int>(param.dtype()), static_cast<int>(grad.dtype())};
    batches_[key].push_back(args);
    keep_alive_.push_back(grad);
  }
  /// Calls launch(group, device_index, param_dtype, grad_dtype, tensors) for each batch.
  template <typename Fn>
  void launch(Fn&& fn) const {
    for (const auto& [key, tensors] : batches_)
      fn(std::get<0>(key), std::get<1>(key), std::get<2>(key), std::get<3>(key), tensors);
  }
  bool empty() const { return batches_.empty(); }

 private:
  using Key = std::tuple<size_t, int, int, int>;
  std::map<Key, std::vector<TensorArgs>> batches_;
  std::vector<Tensor> keep_alive_;
};

}  // namespace precis::optim::detail
