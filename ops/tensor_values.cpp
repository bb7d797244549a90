// The Tensor methods that read values, declared in tensor/tensor.h: to_vector, item and the
// printed form. They live in ops, not tensor, because reading a value may take a device copy and a
// dtype conversion (kernels), and printing names the autograd node (the layer rule in
// docs/design/architecture.md: the tensor layer runs no kernel).
#include <cmath>
#include <cstdio>
#include <ostream>
#include <sstream>

#include "autograd/node.h"
#include "core/error.h"
#include "core/sync_debug.h"
#include "tensor/tensor.h"

namespace precis {

namespace {
// x's values as a contiguous CPU tensor of `dtype`; `label` names the public call in a host
// synchronisation's warning or error (core/sync_debug.h).
Tensor host_values(const Tensor& x, DType dtype, const char* label) {
  detail::HostReadLabel read(label);
  return x.detach().to(Device::cpu()).to(dtype).contiguous();
}
}  // namespace

template <typename T>
std::vector<T> Tensor::to_vector() const {
  Tensor c = host_values(*this, dtype_of<T>(), "Tensor::to_vector()");
  const T* p = c.data_ptr<T>();
  return std::vector<T>(p, p + c.numel());
}

template <>
std::vector<bool> Tensor::to_vector<bool>() const {
  Tensor c = host_values(*this, DType::boolean, "Tensor::to_vector()");
  const bool* p = c.data_ptr<bool>();
  return std::vector<bool>(p, p + c.numel());
}

template <typename T>
T Tensor::item() const {
  PRECIS_CHECK(numel() == 1, "item() needs a tensor with exactly one element, got ", describe());
  Tensor c = host_values(*this, dtype_of<T>(), "Tensor::item()");
  return *c.data_ptr<T>();
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

// Prints nested brackets like PyTorch, eliding the middle of long dims when summarising. The same
// walk runs twice: once to collect the elements shown (to choose one number format and width for
// all of them), then to print.
struct Printer {
  const Shape& sizes;
  Shape strides;  // contiguous strides of the value array
  bool summarise;
  std::vector<std::string> cells;  // formatted elements in print order (second pass)
  size_t next_cell = 0;
  int width = 0;

  template <typename Visit>
  void walk(std::ostream* os, size_t dim, int64_t offset, int indent, Visit& visit) {
    if (dim == sizes.size()) {
      if (os == nullptr) {
        visit(offset);
      } else {
        const std::string& c = cells[next_cell++];
        *os << std::string(std::max<int>(0, width - static_cast<int>(c.size())), ' ') << c;
      }
      return;
    }
    if (os) *os << '[';
    const int64_t n = sizes[dim];
    for (int64_t i = 0; i < n; ++i) {
      if (summarise && n > 2 * kEdgeItems && i == kEdgeItems) {
        if (os) {
          *os << "...,";
          *os << (dim + 1 == sizes.size() ? std::string(" ")
                                          : std::string(sizes.size() - dim - 1, '\n') + std::string(indent + 1, ' '));
        }
        i = n - kEdgeItems;
      }
      walk(os, dim + 1, offset + i * strides[dim], indent + 1, visit);
      if (os && i + 1 < n) {
        if (dim + 1 == sizes.size()) {
          *os << ", ";
        } else {
          *os << ',' << std::string(sizes.size() - dim - 1, '\n') << std::string(indent + 1, ' ');
        }
      }
    }
    if (os) *os << ']';
  }
};

// One format for every shown float: scientific when any magnitude is very large or very small
// (mixing "%.4f" and "%.4e" in one tensor is hard to read), else fixed with 4 decimals.
std::vector<std::string> format_floats(const std::vector<double>& v) {
  bool sci = false;
  for (double x : v)
    if (std::isfinite(x) && x != 0 && (std::fabs(x) >= 1e5 || std::fabs(x) < 1e-4)) sci = true;
  std::vector<std::string> out;
  char buf[64];
  for (double x : v) {
    if (std::isnan(x)) {
      out.emplace_back("nan");
    } else if (std::isinf(x)) {
      out.emplace_back(x > 0 ? "inf" : "-inf");
    } else {
      std::snprintf(buf, sizeof buf, sci ? "%.4e" : "%.4f", x);
      out.emplace_back(buf);
    }
  }
  return out;
}

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  detail::HostReadLabel read("Tensor::str() (printing a tensor)");
  std::ostringstream os;
  Printer p{sizes(), contiguous_strides(sizes()), numel() > kSummariseAbove, {}};
  // Integers print from int64 (exact beyond 2^53), bools as True/False, floats through f64.
  std::vector<int64_t> shown;
  auto collect = [&](int64_t i) { shown.push_back(i); };
  if (numel() > 0) p.walk(nullptr, 0, 0, 7, collect);
  if (dtype() == DType::boolean) {
    const std::vector<bool> v = to_vector<bool>();
    for (int64_t i : shown) p.cells.emplace_back(v[i] ? "True" : "False");
  } else if (is_integral(dtype())) {
    const std::vector<int64_t> v = to_vector<int64_t>();
    for (int64_t i : shown) p.cells.push_back(std::to_string(v[i]));
  } else {
    const std::vector<double> v = to_vector<double>();
    std::vector<double> picked;
    for (int64_t i : shown) picked.push_back(v[i]);
    p.cells = format_floats(picked);
  }
  for (const std::string& c : p.cells) p.width = std::max(p.width, static_cast<int>(c.size()));
  os << "tensor(";
  if (numel() == 0) {
    os << "[]";
  } else {
    auto none = [](int64_t) {};
    p.walk(&os, 0, 0, 7, none);
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
