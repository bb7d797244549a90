// embedding: rows of a (V, D) table picked by indices of any shape, declared once for the op
// front-end (ops/frontend.h). Forward runs the index_select kernel; backward adds the output
// gradient into a dense (V, D) zero table with the index_add kernel and zeroes the padding row
// (under create_graph through the index_add and masked_fill ops instead, so that the gradient is
// differentiable).
#include "ops/device_asserts.h"
#include "ops/frontend.h"
#include "ops/functional.h"
#include "ops/contracts/kernels.h"
#include "ops/op_table.h"
#include "tensor/factory.h"

namespace precis {

using autograd::TensorList;

using detail::Domain;
using detail::OpContext;

namespace {

// The weight is the one operand; the indices and padding_idx are parameters (no gradient flows to
// the indices).
struct Embedding {
  static constexpr OpId id = OpId::embedding;
  static constexpr Domain domain = Domain::any;
  static constexpr const char* names[] = {"weight"};
  struct Saved {
    Tensor flat;  // the indices, flattened, i64
    int64_t rows = 0, dim = 0, n = 0, padding_idx = -1;
    DType dtype = DType::f32;
    Device device;
  };
  static Tensor forward(OpContext<Saved>& ctx, const std::array<Tensor, 1>& in, const Tensor& indices,
                        std::optional<int64_t> padding_row) {
    const Tensor& weight = in[0];
    PRECIS_CHECK(indices.defined(), "embedding: indices and weight must be defined");
    auto operands = [&] { return "indices " + indices.describe() + ", weight " + weight.describe(); };
    PRECIS_CHECK_DTYPE(indices.dtype() == DType::i64 || indices.dtype() == DType::i32,
                       "embedding: indices must be i64 or i32, got ", operands(),
                       "; convert them with indices.to(DType::i64)");
    PRECIS_CHECK_SHAPE(weight.dim() == 2, "embedding: weight must be a (num_embeddings, embedding_dim) table, got ",
                       operands());
    PRECIS_CHECK_DEVICE(indices.device() == weight.device(),
                        "embedding: indices and weight must be on one device, got ", operands());
    const int64_t rows = weight.size(0), dim = weight.size(1);
    // As PyTorch: padding_idx in [-V, V), negative counting from the end; none when absent.
    int64_t padding_idx = -1;
    if (padding_row) {
      PRECIS_CHECK_INDEX(*padding_row >= -rows && *padding_row < rows, "embedding: padding_idx ", *padding_row,
                         " is out of range for ", rows, " rows (", operands(), "); valid: ", -rows, " to ", rows - 1);
      padding_idx = *padding_row < 0 ? *padding_row + rows : *padding_row;
    }
    Tensor flat = indices.detach().reshape({-1}).to(DType::i64).contiguous();
    detail::check_index_range(flat, rows, std::nullopt, [rows, all = operands()](int64_t v) {
      return detail::str_cat("embedding: index ", v, " is out of range for a table of ", rows, " rows (valid: 0 to ",
                             rows - 1, "); ", all);
    });
    const int64_t n = flat.numel();
    Tensor out = empty({n, dim}, {.dtype = weight.dtype(), .device = weight.device()});
    kernel<kernels::IndexSelectKernel>(OpId::index_select, weight.device().type, weight.dtype())(
        out, weight.detach(), 0, flat);
    Shape out_shape = indices.sizes();
    out_shape.push_back(dim);
    if (ctx.grad) ctx.saved = {std::move(flat), rows, dim, n, padding_idx, weight.dtype(), weight.device()};
    return out.view(out_shape);
  }
  static TensorList backward(const Saved& s, const TensorList& g) {
    const Tensor src = g[0].reshape({s.n, s.dim});
    if (!autograd::needs_grad({&src}) && src.dtype() == s.dtype) {
      // The usual case (nothing records this backward): the index_add kernel adds into a fresh
      // zero table directly, with neither index_add's copy of its input nor a masking pass over
      // the whole (V, D) table; for a 30522-row vocabulary that copy was a third of this
      // backward's time.
      Tensor grad = zeros({s.rows, s.dim}, {.dtype = s.dtype, .device = s.device});
      kernel<kernels::IndexAddKernel>(OpId::index_add, s.device.type, s.dtype)(grad, 0, s.flat, src);
      if (s.padding_idx >= 0) grad.select(0, s.padding_idx).zero_();
      return {grad};
    }
    Tensor grad = index_add(zeros({s.rows, s.dim}, {.dtype = s.dtype, .device = s.device}), 0, s.flat, src);
    if (s.padding_idx >= 0) {
      const Tensor is_pad =
          eq(arange(static_cast<double>(s.rows), {.dtype = DType::i64, .device = s.device}), s.padding_idx);
      grad = masked_fill(grad, is_pad.unsqueeze(1), 0.0);
    }
    return {grad};
  }
};

}  // namespace

Tensor embedding(const Tensor& indices, const Tensor& weight, std::optional<int64_t> padding_row) {
  return detail::call<Embedding>({weight}, indices, padding_row);
}

}  // namespace precis
