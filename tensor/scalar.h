#pragma once
// A number passed to an op (fill value, scalar operand): kept as double, int64 or bool so that
// integer values survive exactly.
#include <cstdint>
#include <type_traits>

#include "core/dtype.h"
#include "core/opmath.h"

namespace precis {

/// A number of one of three kinds (PyTorch's c10::Scalar without complex). Implicit from any
/// arithmetic type, so ops take plain numbers: add(x, 2), x.fill_(0.5).
class Scalar {
 public:
  /// How the value is held: a double, an int64 or a bool.
  enum class Kind : uint8_t { floating, integral, boolean };
  Scalar() : Scalar(0.0) {}
  /// A floating scalar.
  Scalar(double v) : kind_(Kind::floating), d_(v) {}  // NOLINT: implicit from numbers
  /// A floating scalar (widened exactly).
  Scalar(float v) : Scalar(static_cast<double>(v)) {}  // NOLINT
  /// A boolean scalar.
  Scalar(bool v) : kind_(Kind::boolean), i_(v) {}      // NOLINT
  /// An integral scalar (any integer type but bool), held as int64 (a uint64 above INT64_MAX wraps).
  template <typename I, std::enable_if_t<std::is_integral_v<I> && !std::is_same_v<I, bool>, int> = 0>
  Scalar(I v) : kind_(Kind::integral), i_(static_cast<int64_t>(v)) {}  // NOLINT

  Kind kind() const { return kind_; }  ///< how the value is held
  bool is_floating() const { return kind_ == Kind::floating; }  ///< kind() == floating
  /// The value as a double: integers above 2^53 round; true is 1.
  double to_double() const { return kind_ == Kind::floating ? d_ : static_cast<double>(i_); }
  /// Truncated toward zero; a floating value outside int64's range saturates and NaN gives 0, so
  /// that the conversion is defined for every value (a static_cast is not). Ops that write a
  /// Scalar into an integer tensor check fits() first and raise a typed error (as PyTorch does).
  int64_t to_int64() const { return kind_ == Kind::floating ? saturating_float_to_int<int64_t>(d_) : i_; }
  /// Nonzero is true (NaN too).
  bool to_bool() const { return kind_ == Kind::floating ? d_ != 0.0 : i_ != 0; }
  /// True when the value converts to `dtype` without overflow (PyTorch's "value cannot be
  /// converted to type ... without overflow"): for i32 and i64 a finite value whose truncation
  /// lies in the type's range; always for bool and the floating dtypes, where a value past the
  /// range rounds to +-inf (IEEE) and NaN stays NaN.
  bool fits(DType dtype) const {
    if (!is_integral(dtype) || kind_ == Kind::boolean) return true;
    const bool i32 = dtype == DType::i32;
    if (kind_ == Kind::integral) return !i32 || (i_ >= INT32_MIN && i_ <= INT32_MAX);
    // The bounds are exact in double; NaN fails every comparison.
    if (i32) return d_ > -0x1p31 - 1.0 && d_ < 0x1p31;
    return d_ >= -0x1p63 && d_ < 0x1p63;
  }
  /// The dtype a tensor made from this scalar alone gets: f32, i64 or bool (as in PyTorch).
  DType default_dtype() const {
    return kind_ == Kind::floating ? DType::f32 : kind_ == Kind::integral ? DType::i64 : DType::boolean;
  }

 private:
  Kind kind_;
  double d_ = 0.0;
  int64_t i_ = 0;
};

}  // namespace precis
