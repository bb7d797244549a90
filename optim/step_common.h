#pragma once
// Internal helper of the optimizers' step(): parameters grouped into one kernel call per
// (param group, device, param dtype), the key of the op table's sgd_step / adam_step kernels.
#include <map>
#include <tuple>
#include <vector>

#include "ops/op_table.h"
#include "tensor/tensor.h"

namespace precis::optim::detail {

template <typename Param>
class StepBatches {
 public:
  /// Adds a parameter's kernel arguments to the batch of (group, param's device, param's dtype).
  void add(size_t group, const Tensor& param, Param args) {
    const Device d = param.device();
    batches_[Key{group, static_cast<int>(d.type), d.index, static_cast<int>(param.dtype())}].push_back(std::move(args));
  }
  /// Calls fn(group, device type, dtype, params) for each batch, in (group, device, dtype) order.
  template <typename Fn>
  void run(Fn&& fn) const {
    for (const auto& [key, params] : batches_)
      fn(std::get<0>(key), static_cast<DeviceType>(std::get<1>(key)), static_cast<DType>(std::get<3>(key)), params);
  }

 private:
  using Key = std::tuple<size_t, int, int, int>;
  std::map<Key, std::vector<Param>> batches_;
};

}  // namespace precis::optim::detail
