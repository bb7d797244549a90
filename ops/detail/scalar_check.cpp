#include "ops/detail/scalar_check.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"

namespace precis {

std::string scalar_str(Scalar value) {
  switch (value.kind()) {
    case Scalar::Kind::boolean: return value.to_bool() ? "true" : "false";
    case Scalar::Kind::integral: return std::to_string(value.to_int64());
    case Scalar::Kind::floating: break;
  }
  const double d = value.to_double();
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  // The shortest form that reads back as the same double (1.4e+308, not 1.3999999999999999e+308).
  char buf[32];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  return buf;
}

void check_scalar_fits(const char* op, const char* role, Scalar value, DType dtype, const std::string& target) {
  if (value.fits(dtype)) return;
  const char* range = dtype == DType::i32 ? "[-2147483648, 2147483647]" : "[-9223372036854775808, 9223372036854775807]";
  throw ValueError(detail::str_cat(op, ": the ", role, " ", scalar_str(value), " cannot be converted to ",
                                   dtype_name(dtype), " without overflow (", target, "); ", dtype_name(dtype),
                                   " holds the integers in ", range, " (fractions truncate toward zero) and no nan or "
                                   "inf: pass a value in that range, or use a floating dtype such as DType::f64"));
}

void throw_undefined(const char* op, const char* name) {
  throw ValueError(detail::str_cat(op, ": the ", name, " tensor is undefined (a default-constructed Tensor holds no "
                                   "data); pass a tensor made by a factory (empty, zeros, ...) or returned by an op"));
}

}  // namespace precis
