// embedding: rows of a (V, D) table picked by indices of any shape. Forward runs the index_select
// kernel; backward adds the output gradient into a dense (V, D) zero table with the index_add
// kernel and zeroes the padding row (under create_graph through the index_add and masked_fill
// ops instead, so that the gradient is differentiable).
#include "ops/precision.h"
#include "autograd/record.h"
#include "ops/device_asserts.h"
#include "ops/functional.h"
#include "ops/kernels.h"
#include "ops/op_table.h"
#include "tensor/factory.h"

namespace precis {

using autograd::TensorList;

Tensor embedding(const Tensor& indices, const Tensor& weight_in, std::optional<int64_t> padding_row) {
  const Tensor weight = apply_precision(OpId::embedding, weight_in)[0];
  PRECIS_CHECK(indices.defined() && weight.defined(), "embedding: indices and weight must be defined");
  auto operands = [&] { return "indices " + indices.describe() + ", weight " + weight.describe(); };
  PRECIS_CHECK_DTYPE(indices.dtype() == DType::i64 || indices.dtype() == DType::i32,
                     "embedding: indices must be i64 or i32, got ", operands(),
                     "; convert them with indices.to(DType::i64)");
  PRECIS_CHECK_SHAPE(weight.dim() == 2, "embedding: weight must be a (num_embeddings, embedding_dim) table, got ",
                     operands());
  PRECIS_CHECK_DEVICE(indices.device() == weight.device(), "embedding: indices and weight must be on one device, got ",
                      operands());
  const int64_t rows = weight.size(0), dim = weight.size(1);
  // As PyTorch: padding_idx in [-V, V), negative counting from the end; none when absent.
  int64_t padding_idx = -1;
  if (padding_row) {
    PRECIS_CHECK_INDEX(*padding_row >= -rows && *padding_row < rows, "embedding: padding_idx ", *padding_row,
                       " is out of range for ", rows, " rows (", operands(), "); valid: ", -rows, " to ", rows - 1);
    padding_idx = *padding_row < 0 ? *padding_row + rows : *padding_row;
  }
  const Tensor flat = indices.detach().reshape({-1}).to(DType::i64).contiguous();
  detail::check_index_range(flat, rows, std::nullopt, [rows, all = operands()](int64_t v) {
    return detail::str_cat("embedding: index ", v, " is out of range for a table of ", rows, " rows (valid: 0 to ",
                           rows - 1, "); ", all);
  });
  const int64_t n = flat.numel();
  Tensor out = empty({n, dim}, {.dtype = weight.dtype(), .device = weight.device()});
  kernel<kernels::IndexSelectKernel>(OpId::index_select, weight.device().type, weight.dtype())(out, weight.detach(), 0,
                                                                                              flat);
  Shape out_shape = indices.sizes();
  out_shape.push_back(dim);
  out = out.view(out_shape);
  if (autograd::needs_grad({&weight})) {
    autograd::record(OpId::embedding, {weight}, {out},
                     [flat, rows, dim, n, padding_idx, dtype = weight.dtype(),
                      device = weight.device()](const TensorList& g) -> TensorList {
                       const Tensor src = g[0].reshape({n, dim});
                       if (!autograd::needs_grad({&src}) && src.dtype() == dtype) {
                         // The usual case (nothing records this backward): the index_add kernel
                         // adds into a fresh zero table directly, with neither index_add's copy of
                         // its input nor a masking pass over the whole (V, D) table; for a
                         // 30522-row vocabulary that copy was a third of this backward's time.
                         Tensor grad = zeros({rows, dim}, {.dtype = dtype, .device = device});
                         kernel<kernels::IndexAddKernel>(OpId::index_add, device.type, dtype)(grad, 0, flat, src);
                         if (padding_idx >= 0) grad.select(0, padding_idx).zero_();
                         return {grad};
                       }
                       Tensor grad = index_add(zeros({rows, dim}, {.dtype = dtype, .device = device}), 0, flat, src);
                       if (padding_idx >= 0) {
                         const Tensor is_pad = eq(arange(static_cast<double>(rows), {.dtype = DType::i64, .device = device}),
                                                  padding_idx);
                         grad = masked_fill(grad, is_pad.unsqueeze(1), 0.0);
                       }
                       return {grad};
                     });
  }
  return out;
}

}  // namespace precis
