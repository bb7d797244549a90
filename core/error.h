#pragma once
// Typed errors. Library code reports every failure by throwing one of these; it never calls exit
// or abort. Messages name the op and each operand (shape, dtype, device) and suggest a fix when
// one is knowable. Build messages with PRECIS_CHECK*: the message is only formatted on failure.
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace precis {

/// Base of every error precis throws.
class Error : public std::runtime_error {
 public:
  /// `msg` is what what() returns.
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
/// An activation-checkpointed region whose recomputation cannot repeat its forward: its inputs or
/// parameters changed in place, or it ran different ops or random draws (autograd/checkpoint.h).
class CheckpointError : public StateError { using StateError::StateError; };
/// Memory could not be had. Raised by the allocators when the system (or the device) refuses a
/// block, and by factories asked for more bytes than a 64-bit size can express. The message names
/// the request; requested_bytes() and device() give it to code that wants to react (retry with a
/// smaller batch, say). requested_bytes() is UINT64_MAX when the request does not fit in 64 bits.
class OutOfMemoryError : public Error {
 public:
  /// `device` as Device::str() writes it; requested_bytes UINT64_MAX when it overflowed 64 bits.
  OutOfMemoryError(const std::string& msg, uint64_t requested_bytes, std::string device)
      : Error(msg), requested_bytes_(requested_bytes), device_(std::move(device)) {}
  /// The size of the request that failed, in bytes.
  uint64_t requested_bytes() const { return requested_bytes_; }
  /// The device asked, as Device::str() writes it ("cpu", "cuda:0").
  const std::string& device() const { return device_; }

 private:
  uint64_t requested_bytes_;
  std::string device_;
};
/// A host synchronisation with a CUDA device while cuda::set_sync_debug_mode(SyncDebugMode::error)
/// is on (core/sync_debug.h); the message names the site and how to avoid the wait.
class HostSyncError : public StateError { using StateError::StateError; };
/// Work a CUDA graph cannot hold was issued while the thread captures one (cuda::Graph): a host
/// wait, a random draw whose value a replay would repeat. The capture is abandoned.
class GraphCaptureError : public StateError { using StateError::StateError; };
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
