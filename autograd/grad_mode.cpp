#include "autograd/grad_mode.h"

namespace precis {

namespace {
thread_local bool t_grad_enabled = true;
thread_local bool t_in_backward = false;
}

namespace autograd {
bool in_backward_pass() { return t_in_backward; }
BackwardPassGuard::BackwardPassGuard() : prev_(t_in_backward) { t_in_backward = true; }
BackwardPassGuard::~BackwardPassGuard() { t_in_backward = prev_; }
}  // namespace autograd

bool is_grad_enabled() { return t_grad_enabled; }
void set_grad_enabled(bool enabled) { t_grad_enabled = enabled; }

}  // namespace precis
