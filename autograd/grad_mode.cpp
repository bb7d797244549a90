#include "autograd/grad_mode.h"

namespace precis::autograd {

namespace {
thread_local bool t_in_backward = false;
}

bool in_backward_pass() { return t_in_backward; }
BackwardPassGuard::BackwardPassGuard(bool in_backward) : prev_(t_in_backward) { t_in_backward = in_backward; }
BackwardPassGuard::~BackwardPassGuard() { t_in_backward = prev_; }

}  // namespace precis::autograd
