#pragma once
// Grad mode (core/grad_mode.h) plus the engine's thread state: whether backward is running.
#include "core/grad_mode.h"

namespace precis::autograd {

/// True on a thread while the engine runs backward functions. Autocast is suspended there:
/// backward ops run in the dtypes the forward chose (as in PyTorch), not re-cast.
bool in_backward_pass();

/// Marks the current thread as running backward (or, with false, as not running it: a
/// checkpoint's recomputation is a forward run from inside backward) for its scope.
class BackwardPassGuard {
 public:
  /// Sets the thread's backward flag to `in_backward`; the destructor restores it.
  explicit BackwardPassGuard(bool in_backward = true);
  ~BackwardPassGuard();
  BackwardPassGuard(const BackwardPassGuard&) = delete;
  BackwardPassGuard& operator=(const BackwardPassGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace precis::autograd
