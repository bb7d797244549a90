#pragma once
// Typed errors. Library code reports every failure by throwing one of these; it never calls exit
// or abort. Messages name the op and each operand (shape, dtype, device) and suggest a fix when
// one is knowable. Build messages with PRECIS_CHECK*: the message is only formatted on failure.
#include <sstream>
#include <stdexcept>
#include <string>

namespace precis {

/// Base of every error precis throws.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};
/// Incompatible or invalid shapes.
class ShapeError : public Error { using Error::Error; };
/// A dtype the op does not accept.
class DTypeError : public Error { using Error::Error; };
/// Operands on different devices, or a device that is not available.
class DeviceError : public Error { using Error::Error; };
/// An argument value out of its domain (negative dim size, unknown name, ...).
class ValueError : public Error { using Error::Error; };
/// An index out of range.
class IndexError : public Error { using Error::Error; };
/// A combination the library does not implement (missing kernel for a dtype/device).
class NotImplementedError : public Error { using Error::Error; };
/// A malformed or unreadable file.
class IOError : public Error { using Error::Error; };
/// Misuse of a stateful API in the wrong order (autograd, scaler, optimizer).
class StateError : public Error { using Error::Error; };
/// A broken invariant inside precis: a bug to report.
class InternalError : public Error { using Error::Error; };

namespace detail {
template <typename... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  ((os << args), ...);
  return os.str();
}
[[noreturn]] void throw_internal(const char* file, int line, const char* cond, const std::string& msg);
}  // namespace detail

}  // namespace precis

/// Throws ErrorType(message) when cond is false; the message parts are streamed together.
#define PRECIS_CHECK_T(ErrorType, cond, ...)                          \
  do {                                                                \
    if (!(cond)) [[unlikely]]                                         \
      throw ErrorType(::precis::detail::str_cat(__VA_ARGS__));        \
  } while (0)

#define PRECIS_CHECK(cond, ...) PRECIS_CHECK_T(::precis::ValueError, cond, __VA_ARGS__)
#define PRECIS_CHECK_SHAPE(cond, ...) PRECIS_CHECK_T(::precis::ShapeError, cond, __VA_ARGS__)
#define PRECIS_CHECK_DTYPE(cond, ...) PRECIS_CHECK_T(::precis::DTypeError, cond, __VA_ARGS__)
#define PRECIS_CHECK_DEVICE(cond, ...) PRECIS_CHECK_T(::precis::DeviceError, cond, __VA_ARGS__)
#define PRECIS_CHECK_INDEX(cond, ...) PRECIS_CHECK_T(::precis::IndexError, cond, __VA_ARGS__)

/// For invariants: failure means a bug in precis, and the message says so.
#define PRECIS_INTERNAL_ASSERT(cond, ...)                                                    \
  do {                                                                                       \
    if (!(cond)) [[unlikely]]                                                                \
      ::precis::detail::throw_internal(__FILE__, __LINE__, #cond,                            \
                                       ::precis::detail::str_cat("" __VA_OPT__(, ) __VA_ARGS__)); \
  } while (0)
