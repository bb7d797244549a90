#include "ops/precision.h"

namespace precis {

PrecisionPolicy* set_precision_policy(PrecisionPolicy* policy) {
  PrecisionPolicy* previous = detail::t_precision_policy;
  detail::t_precision_policy = policy;
  return previous;
}

std::vector<Tensor> apply_precision_list(OpId op, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> out = inputs;
  if (PrecisionPolicy* p = detail::t_precision_policy) [[unlikely]]
    p->apply_list(op, out);
  return out;
}

}  // namespace precis
