// Memory formats (ops/memory_format.h): layout queries and the differentiable re-layout copy.
#include "ops/memory_format.h"

#include <ostream>

#include "core/error.h"
#include "ops/math/conv_plan.h"

namespace precis {

const char* memory_format_name(MemoryFormat format) {
  switch (format) {
    case MemoryFormat::Contiguous: return "contiguous";
    case MemoryFormat::ChannelsLast: return "channels_last";
    case MemoryFormat::Preserve: return "preserve";
  }
  return "?";
}

std::string to_string(MemoryFormat format) { return memory_format_name(format); }

std::ostream& operator<<(std::ostream& os, MemoryFormat format) { return os << memory_format_name(format); }

namespace {
bool dense_channels_last(const Tensor& t) {
  return t.dim() == 4 && kernels::conv_is_dense(t.sizes(), t.strides(), kernels::ConvLayout::nhwc);
}
}  // namespace

bool is_contiguous(const Tensor& t, MemoryFormat format) {
  PRECIS_CHECK(t.defined(), "is_contiguous: the tensor is undefined");
  switch (format) {
    case MemoryFormat::Contiguous: return t.is_contiguous();
    case MemoryFormat::ChannelsLast: return dense_channels_last(t);
    case MemoryFormat::Preserve: return t.is_contiguous() || dense_channels_last(t);
  }
  return false;
}

Tensor contiguous(const Tensor& t, MemoryFormat format) {
  PRECIS_CHECK(t.defined(), "contiguous(", memory_format_name(format), "): the tensor is undefined");
  switch (format) {
    case MemoryFormat::Contiguous: return t.contiguous();
    case MemoryFormat::Preserve: return dense_channels_last(t) ? t : t.contiguous();
    case MemoryFormat::ChannelsLast:
      PRECIS_CHECK_SHAPE(t.dim() == 4, "contiguous(channels_last): needs a 4-D (N, C, H, W) tensor, got ",
                         t.describe(), "; add a batch dim with unsqueeze(0) for a single image");
      if (dense_channels_last(t)) return t;
      return t.permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2});
  }
  return t;
}

MemoryFormat suggest_memory_format(const Tensor& t) {
  PRECIS_CHECK(t.defined(), "suggest_memory_format: the tensor is undefined");
  if (t.is_contiguous()) return MemoryFormat::Contiguous;
  return dense_channels_last(t) ? MemoryFormat::ChannelsLast : MemoryFormat::Preserve;
}

}  // namespace precis
