#include "amp/grad_scaler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "autograd/grad_mode.h"
#include "core/cuda_graph.h"
#include "ops/functional.h"
#include "ops/contracts/kernels_amp.h"
#include "ops/op_table.h"
#include "optim/clip_grad.h"
#include "tensor/factory.h"

namespace precis::amp {

struct StepResult::Record {
  int64_t step = 0;
  Tensor scale_before;    // 0-d f32
  Tensor scale_after;     // 0-d f32, set by update()
  Tensor found_inf;       // 0-d f32: non-finite gradients
  Tensor skip;            // 0-d f32: the optimizer's found_inf (non-finite gradients or loss)
  Tensor loss_nonfinite;  // 0-d f32: a non-finite loss since the last update
  Tensor sq_norm;         // 0-d f64: total squared norm of the unscaled gradients
};

namespace {

constexpr const char* kOrder =
    "The order for each optimizer step is: scaler.scale(loss).backward() for every micro-batch, then "
    "optionally scaler.unscale_(opt) (once, after the last micro-batch) and clipping, then scaler.step(opt) "
    "for each optimizer, then scaler.update() once.";

double read(const Tensor& t) { return t.defined() ? t.item<double>() : 0.0; }

}  // namespace

// ---- StepResult -------------------------------------------------------------------------------
bool StepResult::applied() const { return reason() == SkipReason::none; }

SkipReason StepResult::reason() const {
  if (!record_) return SkipReason::none;
  // Both 0/1 flags in one read (one wait on a GPU): 2 · loss flag + gradient flag.
  double code = 0.0;
  if (record_->loss_nonfinite.defined() && record_->found_inf.defined()) {
    NoGradGuard no_grad;
    code = read(add(mul(ne(record_->loss_nonfinite, 0.0).to(DType::f32), 2.0),
                    ne(record_->found_inf, 0.0).to(DType::f32)));
  } else {
    code = 2.0 * (read(record_->loss_nonfinite) != 0.0) + (read(record_->found_inf) != 0.0);
  }
  if (code >= 2.0) return SkipReason::non_finite_loss;
  if (code > 0.0) return SkipReason::overflow;
  return SkipReason::none;
}

Tensor StepResult::skip_flag() const { return record_ ? record_->skip : Tensor(); }

StepResult StepResult::snapshot() const {
  if (!record_) return StepResult();
  NoGradGuard no_grad;
  auto copy = std::make_shared<Record>(*record_);
  for (Tensor* t : {&copy->scale_before, &copy->scale_after, &copy->found_inf, &copy->skip, &copy->loss_nonfinite,
                    &copy->sq_norm})
    if (t->defined()) *t = t->clone();
  return StepResult(std::move(copy));
}

double StepResult::scale_before() const { return record_ ? read(record_->scale_before) : 1.0; }

double StepResult::scale_after() const {
  if (!record_) return 1.0;
  return record_->scale_after.defined() ? read(record_->scale_after) : scale_before();
}

std::optional<double> StepResult::grad_norm() const {
  if (!record_ || !record_->sq_norm.defined()) return std::nullopt;
  return std::sqrt(read(record_->sq_norm));
}

const char* skip_reason_name(SkipReason r) {
  switch (r) {
    case SkipReason::none: return "none";
    case SkipReason::overflow: return "overflow";
    case SkipReason::non_finite_loss: return "non_finite_loss";
  }
  return "?";
}

// ---- GradScaler -------------------------------------------------------------------------------
namespace {

// The option rules, for the constructor and for options read back from a state dict (a corrupt or
// hand-made dict must not install, say, a growth_factor <= 1).
void check_options(const GradScalerOptions& o, const char* who) {
  PRECIS_CHECK(o.init_scale > 0 && std::isfinite(o.init_scale), who, ": init_scale must be positive and finite, got ",
               o.init_scale);
  PRECIS_CHECK(o.growth_factor > 1.0, who, ": growth_factor must be > 1, got ", o.growth_factor);
  PRECIS_CHECK(o.backoff_factor > 0.0 && o.backoff_factor < 1.0, who, ": backoff_factor must be in (0, 1), got ",
               o.backoff_factor);
  // The trackers are f32 on the device: they count exactly up to 2^24.
  PRECIS_CHECK(o.growth_interval >= 1 && o.growth_interval <= (int64_t{1} << 24), who,
               ": growth_interval must be in [1, 2^24 = 16777216], got ", o.growth_interval);
  PRECIS_CHECK(o.hysteresis >= 1 && o.hysteresis <= (int64_t{1} << 24), who,
               ": hysteresis must be in [1, 2^24 = 16777216], got ", o.hysteresis);
  PRECIS_CHECK(o.min_scale > 0 && o.min_scale <= o.init_scale && o.init_scale <= o.max_scale &&
                   std::isfinite(o.max_scale) && o.max_scale <= 3.0e38,
               who, ": init_scale must lie within [min_scale, max_scale], with 0 < min_scale and max_scale <= 3e38; "
               "got min_scale ", o.min_scale,
               ", init_scale ", o.init_scale, ", max_scale ", o.max_scale);
  PRECIS_CHECK(o.history_size >= 0 && o.max_skips_at_floor >= 0,
               who, ": history_size and max_skips_at_floor must be >= 0");
}

}  // namespace

GradScaler::GradScaler(GradScalerOptions options) : options_(options) { check_options(options_, "GradScaler"); }

void GradScaler::ensure_state(const Tensor& like) {
  const char* first_in_capture = "GradScaler: first used inside a CUDA graph capture: the state it makes there (the "
                                 "scale, its trackers) would be made again by every replay, the scale reset to "
                                 "init_scale each time; run one step eagerly before capturing (precis-train's "
                                 "warm-up steps do)";
  if (initialised_ && placement_pending_ && like.device() != device_) {
    // A state loaded before the first scale() (PyTorch's resume order): it goes where the loss is.
    PRECIS_CHECK_T(GraphCaptureError, !cuda::is_capturing(), first_in_capture);
    for (Tensor* t : {&scale_, &growth_tracker_, &hysteresis_tracker_, &floor_skips_, &floor_run_, &loss_nonfinite_})
      *t = t->to(like.device());
    device_ = like.device();
  }
  placement_pending_ = false;
  if (initialised_) {
    PRECIS_CHECK_DEVICE(like.device() == device_, "GradScaler: ", like.describe(), " is on another device than the "
                        "scaler's state (", device_.str(), "); one scaler serves one device (give its device with "
                        "GradScalerOptions::device)");
    return;
  }
  PRECIS_CHECK_T(GraphCaptureError, !cuda::is_capturing(), first_in_capture);
  PRECIS_CHECK_DEVICE(!options_.device || like.device() == *options_.device, "GradScaler: ", like.describe(),
                      " is not on the scaler's device ", options_.device ? options_.device->str() : "");
  device_ = like.device();
  const TensorOptions f32{.dtype = DType::f32, .device = device_};
  scale_ = full({}, options_.init_scale, f32);
  growth_tracker_ = zeros({}, f32);
  hysteresis_tracker_ = full({}, static_cast<double>(options_.hysteresis), f32);
  floor_skips_ = zeros({}, f32);
  floor_run_ = zeros({}, f32);
  loss_nonfinite_ = zeros({}, f32);
  initialised_ = true;
}

namespace {
thread_local GradScaler* t_last_scaling = nullptr;
}  // namespace

GradScaler::~GradScaler() {
  if (t_last_scaling == this) t_last_scaling = nullptr;
}

GradScaler* GradScaler::last_scaling() { return t_last_scaling; }

Tensor GradScaler::scale(const Tensor& loss) {
  if (!options_.enabled) return loss;
  PRECIS_CHECK_DTYPE(loss.is_floating_point(), "GradScaler::scale: the loss must be floating, got ", loss.describe());
  ensure_state(loss);
  for (const auto& [opt, s] : per_optimizer_)
    PRECIS_CHECK_T(StateError, s.stage != Stage::unscaled, "GradScaler::scale was called after unscale_(opt) in the "
                   "same optimizer step: this micro-batch's gradients would be added, still scaled, to gradients "
                   "that were already unscaled. Call unscale_ only after the last micro-batch's backward. ",
                   kOrder);
  {
    NoGradGuard no_grad;
    Tensor l = loss.detach().to(DType::f32);
    // Non-finite iff not |l| < inf (NaN fails every comparison).
    Tensor bad = max(1.0 - lt(abs(l), std::numeric_limits<double>::infinity()).to(DType::f32));
    loss_nonfinite_.copy_(maximum(loss_nonfinite_, bad));  // in place: see update()
    if (l.numel() == 1) {
      recent_loss_tensors_.push_back(l.reshape({}).clone());
      if (recent_loss_tensors_.size() > 16) recent_loss_tensors_.pop_front();
    }
  }
  t_last_scaling = this;
  return mul(loss.to(DType::f32), scale_);
}

void GradScaler::set_loss_nonfinite(const Tensor& flag) {
  if (!options_.enabled) return;
  PRECIS_CHECK_T(StateError, initialised_, "GradScaler::set_loss_nonfinite before the first scale(): there is no "
                 "flag to replace yet; call it after the backward of a scaled loss");
  PRECIS_CHECK_SHAPE(flag.numel() == 1, "GradScaler::set_loss_nonfinite: the flag must have one element, got ",
                     flag.describe());
  NoGradGuard no_grad;
  loss_nonfinite_.copy_(ne(flag.detach().reshape({}).to(DType::f32).to(device_), 0.0).to(DType::f32));
}

GradScaler::OptimizerState& GradScaler::state_of(optim::Optimizer& opt) { return per_optimizer_[&opt]; }

void GradScaler::check_grads(optim::Optimizer& opt, OptimizerState& s, bool write) {
  s.params.clear();
  std::vector<Tensor> grads;
  for (const Tensor& p : opt.parameters()) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    ensure_state(g);
    PRECIS_CHECK_DEVICE(g.device() == device_, "GradScaler: the gradient of ", p.describe(), " is on ",
                        g.device().str(), " but the scaler's state is on ", device_.str());
    PRECIS_CHECK(g.is_contiguous(), "GradScaler: the gradient of ", p.describe(), " is not contiguous");
    s.params.push_back(p);
    grads.push_back(g);
  }
  if (!initialised_) ensure_state(zeros({}));  // no gradients at all: state on the CPU
  // Unscaled f16 gradients would be rounded back to f16, flushing every value below its smallest
  // subnormal (6e-8) to zero: the very underflow the scale protects against. Those stay scaled in
  // storage and the optimizer divides by the scale in its fp32 update (Note in grad_scaler.h).
  // bf16 has fp32's exponent range, so its gradients are unscaled in place like fp32's.
  const bool any_f16 = std::any_of(grads.begin(), grads.end(), [](const Tensor& g) { return g.dtype() == DType::f16; });
  s.deferred = write && any_f16;
  write = write && !any_f16;
  const TensorOptions f32{.dtype = DType::f32, .device = device_};
  NoGradGuard no_grad;
  s.found_inf = zeros({}, f32);
  s.counts = zeros({static_cast<int64_t>(grads.size())}, f32);
  s.sq_norms = zeros({static_cast<int64_t>(grads.size())}, {.dtype = DType::f64, .device = device_});
  // 1/scale computed in f64 and rounded once, as the optimizers' grad_scale path does.
  Tensor inv = (1.0 / scale_.to(DType::f64)).to(DType::f32);
  if (!grads.empty()) {
    kernel<kernels::UnscaleKernel>(OpId::unscale_grads, device_.type, DType::f32)(grads, inv, write, s.found_inf,
                                                                                  s.counts, s.sq_norms);
    if (write)
      for (const Tensor& g : grads) g.bump_version();
  }
  // A sharded optimizer's gradients are this process's shard: found_inf and the norm become the
  // whole model's, so that every process skips, backs off and clips alike.
  opt.reduce_gradient_stats(s.found_inf, s.sq_norms);
  s.grad_norm = Tensor();
  s.versions.clear();
  for (const Tensor& g : grads) s.versions.push_back(g.version());
}

void GradScaler::unscale_(optim::Optimizer& opt) {
  if (!options_.enabled) return;
  OptimizerState& s = state_of(opt);
  if (s.stage == Stage::unscaled) return;  // idempotent within one optimizer step
  PRECIS_CHECK_T(StateError, s.stage != Stage::stepped, "GradScaler::unscale_ was called after step() for this ",
                 opt.name(), " optimizer and before update(): its gradients were already used. ", kOrder);
  check_grads(opt, s, /*write=*/true);
  s.stage = Stage::unscaled;
}

Tensor GradScaler::clip_grad_norm_(optim::Optimizer& opt, double max_norm) {
  if (!options_.enabled) return opt.clip_grad_norm_(max_norm);
  unscale_(opt);
  OptimizerState& s = state_of(opt);
  // unscale_'s norms serve while the gradients are as it left them; changed in place since (a
  // clip already applied, clip_grad_value_), they are taken again from the gradients as they are.
  bool changed = false;
  for (size_t i = 0; i < s.params.size(); ++i) changed = changed || s.params[i].grad().version() != s.versions[i];
  if (changed) {
    if (!s.deferred) {
      s.grad_norm = optim::clip_grad_norm_(s.params, max_norm);
      return s.grad_norm;
    }
    check_grads(opt, s, /*write=*/false);  // f16 gradients still scaled in storage: read, unscaled
    s.deferred = true;
  }
  Tensor norm = optim::clip_grad_norm_(s.params, max_norm, s.sq_norms);  // stays on the device
  s.grad_norm = norm;
  return norm;
}

StepResult GradScaler::step(optim::Optimizer& opt) {
  if (!options_.enabled) {
    opt.step();
    return StepResult();
  }
  OptimizerState& s = state_of(opt);
  PRECIS_CHECK_T(StateError, s.stage != Stage::stepped, "GradScaler::step was called twice for this ", opt.name(),
                 " optimizer without update() in between. ", kOrder);
  optim::StepOptions step_options;
  if (s.stage == Stage::ready) {
    // Read-only check; the optimizer divides by the scale inside its update.
    check_grads(opt, s, /*write=*/false);
    step_options.grad_scale = scale_;
  } else if (s.deferred) {
    step_options.grad_scale = scale_;  // unscale_ left f16 gradients scaled
  }
  Tensor skip;
  {
    NoGradGuard no_grad;
    skip = maximum(s.found_inf, loss_nonfinite_);
  }
  step_options.found_inf = skip;
  opt.step(step_options);

  auto record = std::make_shared<StepResult::Record>();
  record->step = steps_;
  record->scale_before = scale_.clone();
  record->found_inf = s.found_inf;
  record->skip = skip;
  record->loss_nonfinite = loss_nonfinite_.clone();
  {
    NoGradGuard no_grad;
    record->sq_norm = s.sq_norms.numel() > 0 ? sum(s.sq_norms) : zeros({}, {.dtype = DType::f64, .device = device_});
  }
  pending_.push_back(record);
  s.stage = Stage::stepped;
  round_records_.push_back({s.params, s.counts, s.found_inf});
  return StepResult(record);
}

void GradScaler::update() {
  if (!options_.enabled) return;
  PRECIS_CHECK_T(StateError, !pending_.empty(), "GradScaler::update was called without a step() since the last "
                 "update(). ", kOrder);
  const auto& o = options_;
  {
    NoGradGuard no_grad;
    Tensor found = pending_.front()->found_inf;
    for (size_t i = 1; i < pending_.size(); ++i) found = maximum(found, pending_[i]->found_inf);
    // The state machine, in tensor ops on the state's device (no host read):
    //   non-finite loss: nothing changes (a model bug, reported, not an overflow);
    //   overflow:        hysteresis - 1; when it reaches 0: scale · backoff (>= floor), trackers reset;
    //   clean step:      growth + 1; at growth_interval: scale · growth (<= cap), trackers reset.
    Tensor loss_bad = loss_nonfinite_;
    Tensor overflow = found * (1.0 - loss_bad);
    Tensor clean = (1.0 - found) * (1.0 - loss_bad);
    Tensor hyst = hysteresis_tracker_ - overflow;
    Tensor backoff = overflow * le(hyst, 0.0).to(DType::f32);
    // The products in f64, rounded once to the f32 scale, as PyTorch's update (float · double):
    // a factor that is not a power of two would otherwise be rounded to f32 first (1 ulp a step).
    const auto times = [](const Tensor& s, double factor) { return (s.to(DType::f64) * factor).to(DType::f32); };
    Tensor scale = where(backoff.to(DType::boolean), maximum(times(scale_, o.backoff_factor), o.min_scale), scale_);
    hyst = where(backoff.to(DType::boolean), full({}, static_cast<double>(o.hysteresis), {.device = device_}), hyst);
    Tensor growth = (growth_tracker_ + 1.0) * clean + growth_tracker_ * loss_bad;  // overflow resets it to 0
    Tensor grow = clean * ge(growth, static_cast<double>(o.growth_interval)).to(DType::f32);
    scale = where(grow.to(DType::boolean), minimum(times(scale, o.growth_factor), o.max_scale), scale);
    growth = growth * (1.0 - grow);
    hyst = where(grow.to(DType::boolean), full({}, static_cast<double>(o.hysteresis), {.device = device_}), hyst);
    Tensor skipped = maximum(found, loss_bad);
    Tensor at_floor = le(scale, o.min_scale).to(DType::f32);
    // The state is written in place, never replaced: a step captured in a CUDA graph reads and
    // writes these very tensors at every replay, so each replay starts from the previous one's state.
    floor_skips_.copy_((floor_skips_ + 1.0) * skipped * at_floor);
    floor_run_.copy_(maximum(floor_run_, floor_skips_));
    scale_.copy_(scale);
    growth_tracker_.copy_(growth);
    hysteresis_tracker_.copy_(hyst);
    loss_nonfinite_.zero_();
  }
  const Tensor scale_after = scale_.clone();
  for (auto& r : pending_) {
    r->scale_after = scale_after;
    history_.push_back(r);
  }
  while (static_cast<int64_t>(history_.size()) > o.history_size) history_.pop_front();
  pending_.clear();
  for (auto& [opt, s] : per_optimizer_) s.stage = Stage::ready;
  ++steps_;
  unresolved_rounds_.push_back(std::move(round_records_));
  round_records_.clear();
  // Bounded memory without a host read: the backlog is folded on the device now and then.
  constexpr size_t kMaxUnresolved = 64;
  if (unresolved_rounds_.size() >= kMaxUnresolved) fold_unresolved();

  // The floor check reads the device, so it runs every few updates. On the CPU that read is free
  // and the check runs here; on a device update() does not wait for it, and the check runs at the
  // scaler's next host read (check_floor_if_due: get_scale, history, skipped_steps, last_overflow,
  // state_dict), as PyTorch's device-side asserts surface at the next synchronisation.
  if (o.max_skips_at_floor > 0 && ++updates_since_check_ >= std::min<int64_t>(o.max_skips_at_floor, 8)) {
    updates_since_check_ = 0;
    floor_check_due_ = true;
    if (device_.is_cpu()) check_floor_if_due();
  }
}

void GradScaler::check_floor_if_due() const {
  if (!floor_check_due_) return;
  floor_check_due_ = false;
  const auto& o = options_;
  const double skips = floor_run_.item<double>();
  floor_run_.copy_(floor_skips_);  // the next check sees runs from here on (a run going on counts on)
  if (skips < static_cast<double>(o.max_skips_at_floor)) return;
  std::ostringstream msg;
  msg << "GradScaler: " << static_cast<int64_t>(skips) << " consecutive steps were skipped with the loss scale at "
      << "its floor (" << o.min_scale << "). ";
  auto offenders = last_overflow();
  if (!offenders.empty()) {
    msg << "Parameters with the most non-finite gradients in the last skipped step:";
    for (size_t i = 0; i < offenders.size() && i < 5; ++i)
      msg << (i ? "," : "") << " " << offenders[i].first << " (" << offenders[i].second << ")";
    msg << ". ";
  }
  msg << "Recent losses:";
  for (const Tensor& l : recent_loss_tensors_) msg << " " << l.item<double>();
  msg << ". The gradients are non-finite even without scaling, so this is not an fp16 range problem: look "
         "for a bug producing inf/NaN (log of 0, division by 0, exploding activations), lower the learning "
         "rate, or clip gradients.";
  throw StateError(msg.str());
}

void GradScaler::check_floor() const {
  if (!options_.enabled || !initialised_ || options_.max_skips_at_floor <= 0) return;
  floor_check_due_ = true;
  check_floor_if_due();
}

double GradScaler::get_scale() const {
  if (!options_.enabled) return 1.0;
  check_floor_if_due();
  return initialised_ ? scale_.item<double>() : options_.init_scale;
}

void GradScaler::set_parameter_names(const std::vector<std::pair<std::string, Tensor>>& named) {
  names_.clear();
  for (const auto& [name, t] : named) names_[t.impl()] = name;
}

std::string GradScaler::name_of(const Tensor& p, size_t fallback_index) const {
  auto it = names_.find(p.impl());
  return it != names_.end() ? it->second : "parameter " + std::to_string(fallback_index) + " " + p.describe();
}

bool GradScaler::overflowed(const OverflowRound& round) {
  for (const OverflowRecord& r : round)
    if (r.found_inf.defined() && r.found_inf.item<float>() != 0.0f) return true;
  return false;
}

// Two rounds of one structure (the same parameters with gradients, optimizer by optimizer) fold
// into one on the device: overflowed when either did, with the newer one's counts when it did.
// Rounds of different structures are resolved on the host instead (a read, rare).
void GradScaler::fold_unresolved() {
  auto same_structure = [](const OverflowRound& a, const OverflowRound& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (a[i].params.size() != b[i].params.size()) return false;
      for (size_t k = 0; k < a[i].params.size(); ++k)
        if (!a[i].params[k].is_same(b[i].params[k])) return false;
    }
    return true;
  };
  OverflowRound folded = unresolved_rounds_.front();
  for (size_t r = 1; r < unresolved_rounds_.size(); ++r) {
    const OverflowRound& newer = unresolved_rounds_[r];
    if (!same_structure(folded, newer)) {
      resolve_overflow();
      return;
    }
    NoGradGuard no_grad;
    for (size_t i = 0; i < folded.size(); ++i) {
      const Tensor newer_overflowed = gt(newer[i].found_inf, 0.0);
      folded[i].counts = where(newer_overflowed, newer[i].counts, folded[i].counts);
      folded[i].found_inf = maximum(folded[i].found_inf, newer[i].found_inf);
    }
  }
  unresolved_rounds_.clear();
  unresolved_rounds_.push_back(std::move(folded));
}

void GradScaler::resolve_overflow() const {
  for (auto it = unresolved_rounds_.rbegin(); it != unresolved_rounds_.rend(); ++it) {
    if (overflowed(*it)) {
      last_overflow_round_ = std::move(*it);
      break;
    }
  }
  unresolved_rounds_.clear();
}

std::vector<std::pair<std::string, int64_t>> GradScaler::last_overflow() const {
  resolve_overflow();  // (not check_floor_if_due: the floor check's message calls this)
  const OverflowRound& round = overflowed(round_records_) ? round_records_ : last_overflow_round_;
  std::vector<std::pair<std::string, int64_t>> out;
  for (const OverflowRecord& r : round) {
    const std::vector<float> counts = r.counts.to_vector<float>();
    for (size_t i = 0; i < counts.size(); ++i)
      if (counts[i] > 0) out.emplace_back(name_of(r.params[i], i), static_cast<int64_t>(counts[i]));
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  return out;
}

std::vector<HistoryEntry> GradScaler::history() const {
  check_floor_if_due();
  std::vector<HistoryEntry> out;
  for (const auto& r : history_) {
    StepResult res(r);
    out.push_back({r->step, res.scale_before(), res.applied(), res.reason(),
                   res.grad_norm().value_or(std::numeric_limits<double>::quiet_NaN())});
  }
  return out;
}

int64_t GradScaler::skipped_steps() const {
  int64_t n = 0;
  for (const auto& e : history()) n += !e.applied;
  return n;
}

StateDict GradScaler::state_dict() const {
  StateDict d;
  if (!options_.enabled) return d;
  PRECIS_CHECK_T(StateError, pending_.empty(), "GradScaler::state_dict: save between optimizer steps (after "
                 "update()), not between step() and update()");
  check_floor_if_due();
  auto cpu = [](const Tensor& t) { return t.to(Device::cpu()).clone(); };
  const double init = options_.init_scale;
  d["scale"] = initialised_ ? cpu(scale_) : full({}, init);
  d["growth_tracker"] = initialised_ ? cpu(growth_tracker_) : zeros({});
  d["hysteresis_tracker"] = initialised_ ? cpu(hysteresis_tracker_) : full({}, static_cast<double>(options_.hysteresis));
  d["floor_skips"] = initialised_ ? cpu(floor_skips_) : zeros({});
  d["floor_run"] = initialised_ ? cpu(floor_run_) : zeros({});
  d["steps"] = state_int(steps_);
  d["updates_since_check"] = state_int(updates_since_check_);
  d["options.init_scale"] = state_real(options_.init_scale);
  d["options.growth_factor"] = state_real(options_.growth_factor);
  d["options.backoff_factor"] = state_real(options_.backoff_factor);
  d["options.growth_interval"] = state_int(options_.growth_interval);
  d["options.hysteresis"] = state_int(options_.hysteresis);
  d["options.min_scale"] = state_real(options_.min_scale);
  d["options.max_scale"] = state_real(options_.max_scale);
  d["options.max_skips_at_floor"] = state_int(options_.max_skips_at_floor);
  d["options.history_size"] = state_int(options_.history_size);
  // The history as parallel 1-D columns.
  std::vector<int64_t> step, reason;
  std::vector<double> scale, norm;
  for (const HistoryEntry& e : history()) {
    step.push_back(e.step);
    reason.push_back(static_cast<int64_t>(e.reason));
    scale.push_back(e.scale);
    norm.push_back(e.grad_norm);
  }
  const int64_t n = static_cast<int64_t>(step.size());
  d["history.step"] = from_vector<int64_t>(step, {n});
  d["history.reason"] = from_vector<int64_t>(reason, {n});
  d["history.scale"] = from_vector<double>(scale, {n});
  d["history.grad_norm"] = from_vector<double>(norm, {n});
  return d;
}

void GradScaler::load_state_dict(const StateDict& d) {
  PRECIS_CHECK_T(StateError, options_.enabled, "GradScaler::load_state_dict: this scaler is disabled");
  PRECIS_CHECK_T(StateError, !d.empty(), "GradScaler::load_state_dict: the state dict is empty (saved by a disabled "
                 "scaler?)");
  PRECIS_CHECK_T(StateError, pending_.empty(), "GradScaler::load_state_dict: load between optimizer steps");
  // After unscale_(opt) the gradients are unscaled in place: dropping that stage would make the
  // step unscale them a second time.
  PRECIS_CHECK_T(StateError,
                 std::all_of(per_optimizer_.begin(), per_optimizer_.end(),
                             [](const auto& entry) { return entry.second.stage == Stage::ready; }),
                 "GradScaler::load_state_dict: an optimizer's gradients were unscaled (unscale_) for a step that "
                 "has not run; load between optimizer steps (after update(), before the next backward)");
  const char* owner = "GradScaler";
  GradScalerOptions loaded = options_;
  loaded.init_scale = state_get_real(d, "options.init_scale", owner);
  loaded.growth_factor = state_get_real(d, "options.growth_factor", owner);
  loaded.backoff_factor = state_get_real(d, "options.backoff_factor", owner);
  loaded.growth_interval = state_get_int(d, "options.growth_interval", owner);
  loaded.hysteresis = state_get_int(d, "options.hysteresis", owner);
  loaded.min_scale = state_get_real(d, "options.min_scale", owner);
  loaded.max_scale = state_get_real(d, "options.max_scale", owner);
  loaded.max_skips_at_floor = state_get_int(d, "options.max_skips_at_floor", owner);
  loaded.history_size = state_get_int(d, "options.history_size", owner);
  check_options(loaded, "GradScaler::load_state_dict (the saved options)");
  const Tensor saved_scale = state_tensor(d, "scale", owner);
  PRECIS_CHECK_SHAPE(saved_scale.numel() == 1, owner, ": state entry 'scale' should hold one value, got ",
                     saved_scale.describe());
  const double scale_value = saved_scale.to(Device::cpu()).to(DType::f64).reshape({}).item<double>();
  PRECIS_CHECK(std::isfinite(scale_value) && scale_value > 0, "GradScaler::load_state_dict: the saved scale is ",
               scale_value, "; a loss scale must be positive and finite (a corrupt checkpoint?)");
  options_ = loaded;
  const Device dev = initialised_ ? device_ : options_.device.value_or(Device::cpu());
  if (!initialised_) placement_pending_ = !options_.device.has_value();
  auto load = [&](const char* key) {
    Tensor t = state_tensor(d, key, owner);
    PRECIS_CHECK_SHAPE(t.numel() == 1, owner, ": state entry '", key, "' should hold one value, got ", t.describe());
    return t.reshape({}).to(DType::f32).to(dev).clone();
  };
  device_ = dev;
  // Into the existing state tensors when there are some (a captured step keeps reading them).
  auto set = [&](Tensor& state, const char* key) {
    Tensor t = load(key);
    if (state.defined()) {
      state.copy_(t);
    } else {
      state = t;
    }
  };
  set(scale_, "scale");
  set(growth_tracker_, "growth_tracker");
  set(hysteresis_tracker_, "hysteresis_tracker");
  set(floor_skips_, "floor_skips");
  if (d.count("floor_run") != 0) {
    set(floor_run_, "floor_run");
  } else {  // a state saved before the run was kept: the run in progress
    if (floor_run_.defined()) floor_run_.copy_(floor_skips_);
    else floor_run_ = floor_skips_.clone();
  }
  if (loss_nonfinite_.defined()) {
    loss_nonfinite_.zero_();
  } else {
    loss_nonfinite_ = zeros({}, {.dtype = DType::f32, .device = dev});
  }
  initialised_ = true;
  steps_ = state_get_int(d, "steps", owner);
  updates_since_check_ = state_get_int(d, "updates_since_check", owner);
  history_.clear();
  const auto step = state_tensor(d, "history.step", owner).to_vector<int64_t>();
  const auto reason = state_tensor(d, "history.reason", owner).to_vector<int64_t>();
  const auto scale = state_tensor(d, "history.scale", owner).to_vector<double>();
  const auto norm = state_tensor(d, "history.grad_norm", owner).to_vector<double>();
  PRECIS_CHECK_SHAPE(reason.size() == step.size() && scale.size() == step.size() && norm.size() == step.size(),
                     owner, ": the history columns have different lengths");
  for (size_t i = 0; i < step.size(); ++i) {
    auto r = std::make_shared<StepResult::Record>();
    r->step = step[i];
    r->scale_before = full({}, scale[i]);
    r->scale_after = r->scale_before;
    r->found_inf = full({}, reason[i] == static_cast<int64_t>(SkipReason::overflow) ? 1.0 : 0.0);
    r->loss_nonfinite = full({}, reason[i] == static_cast<int64_t>(SkipReason::non_finite_loss) ? 1.0 : 0.0);
    // A NaN norm (a step with NaN gradients) is kept as it was, sign and payload included (NaN · NaN
    // propagates its operand), so a resumed run's history() equals the uninterrupted run's bits.
    r->sq_norm = full({}, norm[i] * norm[i], {.dtype = DType::f64});
    history_.push_back(r);
  }
  per_optimizer_.clear();
  round_records_.clear();
  unresolved_rounds_.clear();
  last_overflow_round_.clear();
  floor_check_due_ = false;
}

}  // namespace precis::amp
