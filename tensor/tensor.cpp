#include "tensor/tensor.h"

#include <cmath>
#include <cstdio>
#include <ostream>
#include <sstream>

#include "autograd/grad_mode.h"
#include "autograd/node.h"

namespace precis {

namespace detail {
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op, const Tensor& t) {
  const int64_t n = std::max<int64_t>(ndim, 1);  // a 0-d tensor accepts dim 0 and -1, as in PyTorch
  PRECIS_CHECK_INDEX(dim >= -n && dim < n, op, ": dimension ", dim, " out of range for a tensor ", t.describe(),
                     " (valid: ", -n, " to ", n - 1, ")");
  return dim < 0 ? dim + n : dim;
}

Tensor make_alias(const Tensor& base, Shape sizes, Shape strides, int64_t offset) {
  TensorImpl* b = base.impl();
  return Tensor(std::make_shared<TensorImpl>(b->storage(), std::move(sizes), std::move(strides), offset, b->dtype(),
                                             b->version_counter()));
}
}  // namespace detail

// wrap_dim accepts dim 0 / -1 on a 0-d tensor (for ops like sum), but a 0-d tensor has no size to
// read: check first, as PyTorch does.
int64_t Tensor::size(int64_t dim) const {
  PRECIS_CHECK_INDEX(this->dim() > 0, "size: dimension ", dim, " requested from a 0-d tensor ", describe());
  return sizes()[detail::wrap_dim(dim, this->dim(), "size", *this)];
}
int64_t Tensor::stride(int64_t dim) const {
  PRECIS_CHECK_INDEX(this->dim() > 0, "stride: dimension ", dim, " requested from a 0-d tensor ", describe());
  return strides()[detail::wrap_dim(dim, this->dim(), "stride", *this)];
}

Tensor Tensor::detach() const {
  return detail::make_alias(*this, sizes(), strides(), storage_offset());
}

std::string Tensor::describe() const {
  if (!defined()) return "(undefined)";
  return shape_str(sizes()) + " " + std::string(dtype_name(dtype())) + " " + device().str();
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  Tensor c = detach().to(Device::cpu()).to(dtype_of<T>()).contiguous();
  const T* p = c.data_ptr<T>();
  return std::vector<T>(p, p + c.numel());
}

template <>
std::vector<bool> Tensor::to_vector<bool>() const {
  Tensor c = detach().to(Device::cpu()).to(DType::boolean).contiguous();
  const bool* p = c.data_ptr<bool>();
  return std::vector<bool>(p, p + c.numel());
}

template <typename T>
T Tensor::item() const {
  PRECIS_CHECK(numel() == 1, "item() needs a tensor with exactly one element, got ", describe());
  return to_vector<T>()[0];
}

template float Tensor::item<float>() const;
template double Tensor::item<double>() const;
template int64_t Tensor::item<int64_t>() const;
template int32_t Tensor::item<int32_t>() const;
template bool Tensor::item<bool>() const;
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;
template std::vector<int32_t> Tensor::to_vector<int32_t>() const;

// ---- printing -----------------------------------------------------------------------------------
namespace {

constexpr int64_t kSummariseAbove = 1000;  // like PyTorch's print threshold
constexpr int64_t kEdgeItems = 3;

struct Printer {
  const std::vector<double>& values;
  const Shape& sizes;
  Shape strides;  // contiguous strides of the value array
  bool floating;
  bool summarise;
  int width = 0;

  std::string format(double v) const {
    char buf[64];
    if (!floating) {
      std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
    } else if (std::isnan(v)) {
      std::snprintf(buf, sizeof buf, "nan");
    } else if (std::isinf(v)) {
      std::snprintf(buf, sizeof buf, v > 0 ? "inf" : "-inf");
    } else if (v != 0 && (std::fabs(v) >= 1e5 || std::fabs(v) < 1e-4)) {
      std::snprintf(buf, sizeof buf, "%.4e", v);
    } else {
      std::snprintf(buf, sizeof buf, "%.4f", v);
    }
    return buf;
  }

  void print(std::ostream& os, size_t dim, int64_t offset, int indent) const {
    if (dim == sizes.size()) {
      std::string s = format(values[offset]);
      os << std::string(std::max<int>(0, width - static_cast<int>(s.size())), ' ') << s;
      return;
    }
    os << '[';
    const int64_t n = sizes[dim];
    for (int64_t i = 0; i < n; ++i) {
      if (summarise && n > 2 * kEdgeItems && i == kEdgeItems) {
        os << (dim + 1 == sizes.size() ? "..., " : "...,\n" + std::string(indent + 1, ' '));
        i = n - kEdgeItems;
      }
      print(os, dim + 1, offset + i * strides[dim], indent + 1);
      if (i + 1 < n) {
        if (dim + 1 == sizes.size()) {
          os << ", ";
        } else {
          os << ',' << std::string(sizes.size() - dim - 1, '\n') << std::string(indent + 1, ' ');
        }
      }
    }
    os << ']';
  }
};

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  std::ostringstream os;
  std::vector<double> values;
  if (dtype() == DType::boolean) {
    for (bool b : to_vector<bool>()) values.push_back(b ? 1.0 : 0.0);
  } else if (dtype() == DType::i64) {
    for (int64_t v : to_vector<int64_t>()) values.push_back(static_cast<double>(v));
  } else {
    values = to_vector<double>();
  }
  Printer p{values, sizes(), contiguous_strides(sizes()), is_floating(dtype()), numel() > kSummariseAbove};
  for (double v : values) p.width = std::max(p.width, static_cast<int>(p.format(v).size()));
  os << "tensor(";
  if (numel() == 0) {
    os << "[]";
  } else {
    p.print(os, 0, 0, 7);
  }
  os << ", shape=" << shape_str(sizes()) << ", dtype=" << dtype_name(dtype());
  if (!device().is_cpu()) os << ", device=" << device().str();
  if (auto fn = grad_fn()) {
    os << ", grad_fn=<" << fn->name() << ">";
  } else if (requires_grad()) {
    os << ", requires_grad=true";
  }
  os << ')';
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace precis
