#pragma once
// Thread-local grad mode: with it off, ops record nothing (inference, optimizer updates). It lives
// in core because layers below autograd (tensor's readers) turn it off too; autograd/grad_mode.h
// adds the engine's own thread state.

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
  /// Sets grad mode on this thread; the destructor restores the mode found here.
  explicit GradModeGuard(bool enabled) : prev_(is_grad_enabled()) { set_grad_enabled(enabled); }
  ~GradModeGuard() { set_grad_enabled(prev_); }
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace precis
