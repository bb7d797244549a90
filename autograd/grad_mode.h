#pragma once
// Thread-local grad mode: with it off, ops record nothing (inference, optimizer updates).

namespace precis {

/// Whether ops record backward nodes on this thread (default true).
bool is_grad_enabled();
void set_grad_enabled(bool enabled);

/// Turns gradient recording off for its scope (torch.no_grad).
class NoGradGuard {
 public:
  NoGradGuard() : prev_(is_grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

/// Sets grad mode to `enabled` for its scope (torch.set_grad_enabled as a guard).
class GradModeGuard {
 public:
  explicit GradModeGuard(bool enabled) : prev_(is_grad_enabled()) { set_grad_enabled(enabled); }
  ~GradModeGuard() { set_grad_enabled(prev_); }
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

 private:
  bool prev_;
};


namespace autograd {
/// True on a thread while the engine runs backward functions. Autocast is suspended there:
/// backward ops run in the dtypes the forward chose (as in PyTorch), not re-cast.
bool in_backward_pass();

/// Marks the current thread as running backward for its scope (used by the engine).
class BackwardPassGuard {
 public:
  BackwardPassGuard();
  ~BackwardPassGuard();
  BackwardPassGuard(const BackwardPassGuard&) = delete;
  BackwardPassGuard& operator=(const BackwardPassGuard&) = delete;

 private:
  bool prev_;
};
}  // namespace autograd

}  // namespace precis
