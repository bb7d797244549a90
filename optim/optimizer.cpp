#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "autograd/grad_mode.h"
#include "core/cuda_graph.h"
#include "core/warning.h"
#include "optim/clip_grad.h"
#include "tensor/factory.h"

namespace precis::optim {

namespace detail {

void check_params(const std::string& optimizer, const std::vector<std::vector<Tensor>>& groups) {
  PRECIS_CHECK(!groups.empty() && !(groups.size() == 1 && groups[0].empty()), optimizer, ": got an empty parameter list; pass the model's parameters");
  std::set<const TensorImpl*> seen;
  for (size_t g = 0; g < groups.size(); ++g) {
    PRECIS_CHECK(!groups[g].empty(), optimizer, ": parameter group ", g, " is empty");
    for (size_t i = 0; i < groups[g].size(); ++i) {
      const Tensor& p = groups[g][i];
      PRECIS_CHECK(p.defined(), optimizer, ": parameter ", i, " of group ", g, " is an undefined tensor");
      PRECIS_CHECK_DTYPE(p.is_floating_point(), optimizer, ": parameter ", i, " of group ", g, " is ", p.describe(),
                         "; only floating tensors (f32, f64, f16, bf16) can be optimized");
      // One that does not require grad (a frozen layer of model.parameters()) is accepted, as in
      // PyTorch: it has no gradient, so steps skip it until it is unfrozen.
      PRECIS_CHECK(p.is_leaf(), optimizer, ": parameter ", i, " of group ", g, " (", p.describe(),
                   ") is not a leaf tensor (it was computed by an op); optimize the leaf it came from, or "
                   "detach() it and call requires_grad_()");
      PRECIS_CHECK_T(NotImplementedError, p.is_contiguous(), optimizer, ": parameter ", i, " of group ", g, " (",
                     p.describe(), ") is not contiguous; the fused updates need contiguous parameters");
      PRECIS_CHECK(seen.insert(p.impl()).second, optimizer, ": parameter ", i, " of group ", g, " (", p.describe(),
                   ") appears more than once; each parameter may be in one group only");
    }
  }
}

void check_non_negative(const std::string& optimizer, const char* option, double value) {
  PRECIS_CHECK(value >= 0.0, optimizer, ": invalid ", option, " ", value, " (must be >= 0)");
}

}  // namespace detail

Optimizer::Optimizer(std::string name, std::vector<std::vector<Tensor>> groups)
    : name_(std::move(name)), groups_(std::move(groups)) {
  detail::check_params(name_, groups_);
  size_t n = 0;
  for (const auto& g : groups_) n += g.size();
  state_.resize(n);
}

void Optimizer::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (const auto& group : groups_) {
    for (const Tensor& p : group) {
      if (set_to_none) {
        p.set_grad(Tensor());
      } else if (Tensor g = p.grad(); g.defined()) {
        g.zero_();
      }
    }
  }
}

const std::vector<Tensor>& Optimizer::group_params(size_t group) const {
  PRECIS_CHECK_INDEX(group < groups_.size(), name_, ": parameter group ", group, " does not exist (there are ",
                     groups_.size(), ")");
  return groups_[group];
}

std::vector<Tensor> Optimizer::parameters() const {
  std::vector<Tensor> out;
  for (const auto& g : groups_) out.insert(out.end(), g.begin(), g.end());
  return out;
}

Tensor Optimizer::clip_grad_norm_(double max_norm, double norm_type) {
  return optim::clip_grad_norm_(parameters(), max_norm, norm_type);
}

void Optimizer::set_lr(double lr) {
  for (size_t g = 0; g < groups_.size(); ++g) set_group_lr(g, lr);
}

double Optimizer::group_momentum(size_t) const {
  throw ValueError(precis::detail::str_cat(name_, " has no momentum to read"));
}

void Optimizer::set_group_momentum(size_t, double) {
  throw ValueError(precis::detail::str_cat(name_, " has no momentum to set"));
}

Tensor Optimizer::state(const Tensor& param, const std::string& key) const {
  size_t index = 0;
  for (const auto& g : groups_) {
    for (const Tensor& p : g) {
      if (p.is_same(param)) {
        auto it = state_[index].find(key);
        return it == state_[index].end() ? Tensor() : it->second;
      }
      ++index;
    }
  }
  throw ValueError(precis::detail::str_cat(name_, ".state: ", param.describe(), " is not one of its parameters"));
}

DType Optimizer::state_dtype(const Tensor& param) {
  return param.dtype() == DType::f64 ? DType::f64 : DType::f32;
}

Tensor Optimizer::master_for(size_t index, const Tensor& param) {
  if (!is_low_precision(param.dtype())) return Tensor();
  return state_entry(index, "master", [&] { return param.detach().to(DType::f32).contiguous().clone(); });
}

void Optimizer::follow_param(size_t index, const Tensor& p) {
  auto& st = state_[index];
  for (auto it = st.begin(); it != st.end();) {
    Tensor& t = it->second;
    if (!t.defined()) { ++it; continue; }
    if (it->first == "master") {
      // A master belongs to an f16/bf16 parameter: an fp32 one is updated directly, so its old
      // master would be stale if it became low-precision again.
      if (!is_low_precision(p.dtype())) { it = st.erase(it); continue; }
      if (t.device() != p.device()) t = t.to(p.device());
    } else if (it->first == "step") {
      if (t.device() != p.device()) t = t.to(p.device());
    } else if (t.dtype() != state_dtype(p) || t.device() != p.device()) {
      t = t.to(state_dtype(p)).to(p.device()).contiguous();
    }
    ++it;
  }
}

void Optimizer::set_capturable(bool capturable) {
  PRECIS_CHECK_T(StateError, !cuda::is_capturing(), name_,
                 ".set_capturable: called while a CUDA graph capture is in progress; set the mode before capturing");
  if (capturable) {
    for (size_t g = 0; g < groups_.size(); ++g)
      for (const Tensor& p : groups_[g])
        PRECIS_CHECK(p.device() == groups_[g].front().device(), name_,
                     ".set_capturable: the parameters of group ", g, " are on different devices (",
                     groups_[g].front().describe(), " and ", p.describe(),
                     "); a capturable optimizer keeps one device copy of each group's lr. Move the model to one "
                     "device first, or put each device's parameters in their own group.");
  }
  // Turned on again, the device copies stay the tensors they are: a step captured since reads them.
  const bool keep = capturable && capturable_;
  capturable_ = capturable;
  if (!keep) scheduled_.assign(capturable ? groups_.size() : 0, Tensor());
  for (size_t g = 0; g < scheduled_.size(); ++g) {
    if (!scheduled_[g].defined() || scheduled_[g].device() != groups_[g].front().device())
      scheduled_[g] = empty({2}, {.dtype = DType::f64, .device = groups_[g].front().device()});
    write_scheduled(g);
  }
}

Tensor Optimizer::scheduled(size_t group) const {
  (void)group_params(group);  // range check
  return capturable_ ? scheduled_[group] : Tensor();
}

void Optimizer::write_scheduled(size_t group) {
  if (!capturable_) return;
  PRECIS_CHECK_T(StateError, !cuda::is_capturing(), name_, ": the learning rate or momentum of group ", group,
                 " was set while a CUDA graph capture is in progress; the write would be recorded and repeated by "
                 "every replay. Set it between replays (outside the captured region); a schedule that advances "
                 "inside the captured step is LRScheduler::step_on_device.");
  NoGradGuard no_grad;
  Tensor& t = scheduled_[group];
  t.narrow(0, 0, 1).fill_(group_lr(group));
  t.narrow(0, 1, 1).fill_(has_momentum() ? group_momentum(group) : 0.0);
}

Tensor Optimizer::scheduled_for_step(size_t group, Device device) {
  if (!capturable_) return Tensor();
  if (scheduled_[group].device() != device) {
    PRECIS_CHECK_T(StateError, !cuda::is_capturing(), name_, ": the parameters of group ", group, " moved to ",
                   device.str(), " since the optimizer became capturable (its lr is on ",
                   scheduled_[group].device().str(), "); take one step outside the capture first");
    scheduled_[group] = empty({2}, {.dtype = DType::f64, .device = device});
    write_scheduled(group);
  }
  return scheduled_[group];
}

void Optimizer::warn_no_gradients() {
  if (warned_no_gradients_) return;
  warned_no_gradients_ = true;
  size_t n = 0;
  for (const auto& g : groups_) n += g.size();
  warn(precis::detail::str_cat(
      name_, ".step: none of its parameters (", n, ") has a gradient, so nothing was updated. Call "
      "loss.backward() before step() (and zero_grad() after it); the optimizer must hold the very tensors the "
      "loss was computed from: model.parameters(), not a clone() or detach() of them. (Warned once.)"));
}

Tensor Optimizer::checked_grad(const Tensor& p, size_t index) const {
  Tensor grad = p.grad();
  if (!grad.defined()) return grad;
  PRECIS_CHECK_SHAPE(grad.sizes() == p.sizes(), name_, ".step: the gradient of parameter ", index, " is ",
                     grad.describe(), " but the parameter is ", p.describe());
  PRECIS_CHECK_DEVICE(grad.device() == p.device(), name_, ".step: the gradient of parameter ", index, " is ",
                      grad.describe(), " but the parameter is ", p.describe());
  const bool ok = grad.dtype() == p.dtype() || (is_low_precision(p.dtype()) && grad.dtype() == DType::f32);
  PRECIS_CHECK_DTYPE(ok, name_, ".step: the gradient of parameter ", index, " is ", grad.describe(),
                     " but the parameter is ", p.describe(),
                     "; a gradient must have its parameter's dtype (or f32 for an f16/bf16 parameter)");
  return grad.is_contiguous() ? grad : grad.contiguous();
}

void Optimizer::check_step_options(const StepOptions& options, const Tensor& p) const {
  for (const auto& [what, t] : {std::pair<const char*, const Tensor&>{"grad_scale", options.grad_scale},
                                std::pair<const char*, const Tensor&>{"found_inf", options.found_inf}}) {
    if (!t.defined()) continue;
    PRECIS_CHECK_SHAPE(t.numel() == 1, name_, ".step: ", what, " must hold one value, got ", t.describe());
    PRECIS_CHECK_DTYPE(t.dtype() == DType::f32, name_, ".step: ", what, " must be f32, got ", t.describe());
    PRECIS_CHECK_DEVICE(t.device() == p.device(), name_, ".step: ", what, " ", t.describe(),
                        " is on another device than the parameter ", p.describe());
  }
}

StateDict Optimizer::state_dict() const {
  StateDict out;
  size_t index = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::string prefix = "param_groups." + std::to_string(g) + ".";
    std::vector<int64_t> ids(groups_[g].size());
    for (auto& id : ids) id = static_cast<int64_t>(index++);
    out[prefix + "params"] = from_vector<int64_t>(ids);
    for (const auto& [key, value] : group_options_as_reals(g)) out[prefix + key] = state_real(value);
    if (capturable_) {  // the live values: a schedule on the device sets only these
      const std::vector<double> live = scheduled_[g].to(Device::cpu()).to_vector<double>();
      out[prefix + "lr"] = state_real(live[0]);
      if (has_momentum()) out[prefix + momentum_option_name()] = state_real(live[1]);
    }
  }
  for (size_t i = 0; i < state_.size(); ++i) {
    for (const auto& [key, t] : state_[i]) {
      if (t.defined()) out["state." + std::to_string(i) + "." + key] = t.detach().clone();
    }
  }
  return out;
}

void Optimizer::check_group_count(const StateDict& dict, const std::string& owner) const {
  size_t saved_groups = 0;
  while (dict.count("param_groups." + std::to_string(saved_groups) + ".params")) ++saved_groups;
  PRECIS_CHECK(saved_groups == groups_.size(), owner, ": the state dict has ", saved_groups,
               " parameter groups but this optimizer has ", groups_.size(),
               saved_groups == 0 ? " (is it an optimizer state dict?)" : "");
}

void Optimizer::load_state_dict(const StateDict& dict) {
  const std::string owner = name_ + ".load_state_dict";
  // Structure first: the same number of groups, of the same sizes.
  check_group_count(dict, owner);
  for (size_t g = 0; g < groups_.size(); ++g) {
    const Tensor ids = state_tensor(dict, "param_groups." + std::to_string(g) + ".params", owner.c_str());
    PRECIS_CHECK(ids.numel() == static_cast<int64_t>(groups_[g].size()), owner, ": parameter group ", g,
                 " of the state dict has ", ids.numel(), " parameters but this optimizer's has ", groups_[g].size());
  }
  const std::vector<Tensor> params = parameters();
  const std::vector<std::string> keys = state_keys();
  std::vector<std::map<std::string, Tensor>> new_state(params.size());
  // Every state entry must belong to a parameter and a known key, with the parameter's shape.
  for (auto it = dict.lower_bound("state."); it != dict.end() && it->first.rfind("state.", 0) == 0; ++it) {
    const std::string rest = it->first.substr(6);
    const size_t dot = rest.find('.');
    size_t index = 0;
    bool parsed = dot != std::string::npos && dot > 0;
    for (size_t c = 0; parsed && c < dot; ++c) {
      parsed = rest[c] >= '0' && rest[c] <= '9';
      index = index * 10 + static_cast<size_t>(rest[c] - '0');
    }
    PRECIS_CHECK(parsed, owner, ": malformed state entry '", it->first, "' (expected state.<index>.<key>)");
    PRECIS_CHECK(index < params.size(), owner, ": state entry '", it->first, "' is for parameter ", index,
                 " but this optimizer has ", params.size(), " parameters");
    const std::string key = rest.substr(dot + 1);
    PRECIS_CHECK(std::find(keys.begin(), keys.end(), key) != keys.end(), owner, ": unknown state entry '",
                 it->first, "' (was it saved by a different optimizer?)");
    const Tensor& p = params[index];
    const Tensor& v = it->second;
    PRECIS_CHECK(v.defined(), owner, ": state entry '", it->first, "' is an undefined tensor");
    if (key == "step") {
      PRECIS_CHECK_SHAPE(v.numel() == 1, owner, ": state entry '", it->first, "' should hold one value, got ",
                         v.describe());
      new_state[index][key] = v.detach().to(DType::f32).to(p.device()).reshape({}).clone();
      continue;
    }
    PRECIS_CHECK_SHAPE(v.sizes() == p.sizes(), owner, ": state entry '", it->first, "' is ", v.describe(),
                       " but parameter ", index, " is ", p.describe());
    if (key == "master" && !is_low_precision(p.dtype())) {
      warn(precis::detail::str_cat(owner, ": ignoring the fp32 master weights saved for parameter ", index,
                           ", which is now ", p.describe(), " (masters are kept for f16/bf16 parameters only)"));
      continue;
    }
    const DType dtype = key == "master" ? DType::f32 : state_dtype(p);
    new_state[index][key] = v.detach().to(dtype).to(p.device()).contiguous().clone();
  }
  // Moments without their step count: the kernels would take the next step for the first one
  // (SGD overwrote the loaded momentum buffer with the gradient, Adam restarted its bias
  // correction), silently. SGD's buffer implies a step; the others need it.
  for (size_t i = 0; i < new_state.size(); ++i) {
    auto& s = new_state[i];
    const bool moments =
        std::any_of(s.begin(), s.end(), [](const auto& e) { return e.first != "step" && e.first != "master"; });
    if (!moments || s.count("step") != 0) continue;
    PRECIS_CHECK(step_implied_by_state(), owner, ": state entry 'state.", i, ".step' is missing, but parameter ", i,
                 " has saved moments; ", name_, " needs the step count they were made with (bias correction). "
                 "Add it (a 0-d tensor: the number of steps taken)");
    s["step"] = ones({}, {.device = params[i].device()});
  }
  // Options last, so that a failure above leaves the optimizer as it was.
  for (size_t g = 0; g < groups_.size(); ++g)
    load_group_options(g, state_subset(dict, "param_groups." + std::to_string(g) + "."));
  // A state tensor that stays (same key, dtype, device and shape) takes the loaded values in place:
  // a step captured in a CUDA graph reads and writes the tensors it had at the capture.
  NoGradGuard no_grad;
  for (size_t i = 0; i < new_state.size(); ++i)
    for (auto& [key, t] : new_state[i]) {
      const auto old = state_[i].find(key);
      if (old == state_[i].end() || !old->second.defined()) continue;
      const Tensor& live = old->second;
      if (live.dtype() == t.dtype() && live.device() == t.device() && live.sizes() == t.sizes() &&
          live.is_contiguous()) {
        Tensor(live).copy_(t);
        t = live;
      }
    }
  state_ = std::move(new_state);
}

}  // namespace precis::optim
