#include "data/collate.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "tensor/factory.h"

namespace precis::data {

namespace {

void check_field_count(const std::vector<Example>& examples, const char* who) {
  PRECIS_CHECK(!examples.empty(), who, ": a batch needs at least one example");
  for (size_t e = 1; e < examples.size(); ++e)
    PRECIS_CHECK_SHAPE(examples[e].size() == examples[0].size(), who, ": example ", e, " has ", examples[e].size(),
                       " fields but example 0 has ", examples[0].size());
}

Tensor stack_field(std::vector<Example>& examples, size_t field, const char* who) {
  const Tensor& first = examples[0].tensors[field];
  PRECIS_CHECK_DEVICE(first.device().is_cpu(), who, ": examples must be on the CPU, field ", field, " is ",
                      first.describe());
  Shape shape = first.sizes();
  shape.insert(shape.begin(), static_cast<int64_t>(examples.size()));
  Tensor out = empty(shape, {.dtype = first.dtype()});
  const size_t bytes = static_cast<size_t>(first.numel()) * first.element_size();
  auto* dst = static_cast<char*>(out.data_ptr());
  for (size_t e = 0; e < examples.size(); ++e) {
    const Tensor& t = examples[e].tensors[field];
    PRECIS_CHECK_SHAPE(t.sizes() == first.sizes(), who, ": field ", field, " of example ", e, " is ",
                       t.describe(), " but example 0 has ", first.describe(),
                       " (pad variable-length fields with pad_collate)");
    PRECIS_CHECK_DTYPE(t.dtype() == first.dtype(), who, ": field ", field, " of example ", e, " is ", t.describe(),
                       " but example 0 has ", first.describe());
    const Tensor c = t.contiguous();
    std::memcpy(dst + e * bytes, c.data_ptr(), bytes);
  }
  return out;
}

}  // namespace

std::vector<Tensor> stack_examples(std::vector<Example>& examples) {
  check_field_count(examples, "stack_examples");
  std::vector<Tensor> out;
  out.reserve(examples[0].size());
  for (size_t f = 0; f < examples[0].size(); ++f) out.push_back(stack_field(examples, f, "stack_examples"));
  return out;
}

CollateFn pad_collate(std::vector<double> pad_values, bool add_attention_mask) {
  return [pad_values = std::move(pad_values), add_attention_mask](std::vector<Example>& examples) {
    check_field_count(examples, "pad_collate");
    PRECIS_CHECK(pad_values.size() <= examples[0].size(), "pad_collate: ", pad_values.size(),
                 " pad values for examples of ", examples[0].size(), " fields");
    const auto batch = static_cast<int64_t>(examples.size());
    std::vector<Tensor> out;
    int64_t max_len = 0;
    for (size_t f = 0; f < pad_values.size(); ++f) {
      const Tensor& first = examples[0].tensors[f];
      for (size_t e = 0; e < examples.size(); ++e) {
        const Tensor& t = examples[e].tensors[f];
        PRECIS_CHECK_SHAPE(t.dim() == 1, "pad_collate: field ", f, " of example ", e, " must be 1-D, got ",
                           t.describe());
        PRECIS_CHECK_DTYPE(t.dtype() == first.dtype(), "pad_collate: field ", f, " of example ", e, " is ",
                           t.describe(), " but example 0 has ", first.describe());
        PRECIS_CHECK_DEVICE(t.device().is_cpu(), "pad_collate: examples must be on the CPU, got ", t.describe());
        if (f == 0) max_len = std::max(max_len, t.size(0));
        else
          PRECIS_CHECK_SHAPE(t.size(0) == examples[e].tensors[0].size(0), "pad_collate: field ", f, " of example ",
                             e, " has length ", t.size(0), " but field 0 has ", examples[e].tensors[0].size(0));
      }
      Tensor padded = full({batch, max_len}, pad_values[f], {.dtype = first.dtype()});
      auto* dst = static_cast<char*>(padded.data_ptr());
      const size_t elem = first.element_size();
      for (int64_t e = 0; e < batch; ++e) {
        const Tensor c = examples[e].tensors[f].contiguous();
        std::memcpy(dst + static_cast<size_t>(e * max_len) * elem, c.data_ptr(), static_cast<size_t>(c.numel()) * elem);
      }
      out.push_back(std::move(padded));
    }
    for (size_t f = pad_values.size(); f < examples[0].size(); ++f)
      out.push_back(stack_field(examples, f, "pad_collate"));
    if (add_attention_mask && !pad_values.empty()) {
      Tensor mask = zeros({batch, max_len}, {.dtype = DType::i64});
      auto* m = mask.data_ptr<int64_t>();
      for (int64_t e = 0; e < batch; ++e)
        std::fill_n(m + e * max_len, examples[e].tensors[0].size(0), int64_t{1});
      out.push_back(std::move(mask));
    }
    return out;
  };
}

}  // namespace precis::data
