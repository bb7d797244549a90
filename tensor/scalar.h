#pragma once
// A number passed to an op (fill value, scalar operand): kept as double, int64 or bool so that
// integer values survive exactly.
#include <cstdint>
#include <type_traits>

#include "core/dtype.h"

namespace precis {

class Scalar {
 public:
  enum class Kind : uint8_t { floating, integral, boolean };
  Scalar() : Scalar(0.0) {}
  Scalar(double v) : kind_(Kind::floating), d_(v) {}  // NOLINT: implicit from numbers
  Scalar(float v) : Scalar(static_cast<double>(v)) {}  // NOLINT
  Scalar(bool v) : kind_(Kind::boolean), i_(v) {}      // NOLINT
  template <typename I, std::enable_if_t<std::is_integral_v<I> && !std::is_same_v<I, bool>, int> = 0>
  Scalar(I v) : kind_(Kind::integral), i_(static_cast<int64_t>(v)) {}  // NOLINT

  Kind kind() const { return kind_; }
  bool is_floating() const { return kind_ == Kind::floating; }
  double to_double() const { return kind_ == Kind::floating ? d_ : static_cast<double>(i_); }
  int64_t to_int64() const { return kind_ == Kind::floating ? static_cast<int64_t>(d_) : i_; }
  bool to_bool() const { return kind_ == Kind::floating ? d_ != 0.0 : i_ != 0; }
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
