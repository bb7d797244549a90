#include "ops/recompute.h"

#include <unordered_set>

namespace precis {

namespace {
thread_local bool t_recomputing = false;
// KeepCountsAs: calls of t_part are counted as calls of t_whole (equal: no renaming).
thread_local OpId t_part = OpId::linear, t_whole = OpId::linear;
OpId counted_as(OpId op) { return op == t_part ? t_whole : op; }
}  // namespace

bool is_recomputing() { return t_recomputing; }
RecomputingGuard::RecomputingGuard() : prev_(t_recomputing) { t_recomputing = true; }
RecomputingGuard::~RecomputingGuard() { t_recomputing = prev_; }

KeepCountsAs::KeepCountsAs(OpId part, OpId whole) : prev_part_(t_part), prev_whole_(t_whole) {
  t_part = part;
  t_whole = whole;
}
KeepCountsAs::~KeepCountsAs() {
  t_part = prev_part_;
  t_whole = prev_whole_;
}

KeptOutputs::KeptOutputs(KeepPolicy policy) : policy_(std::move(policy)) {}

bool KeptOutputs::keeps_next(OpId op) const {
  return policy_ && policy_({op, calls_per_op_[static_cast<size_t>(op)]});
}

int64_t KeptOutputs::nbytes() const {
  std::unordered_set<const void*> seen;
  int64_t total = 0;
  for (const Call& call : recorded_)
    for (const Tensor& t : call.outputs)
      if (t.defined() && seen.insert(t.storage().get()).second) total += static_cast<int64_t>(t.storage()->nbytes());
  return total;
}

KeptOutputs::Recording::Recording(KeptOutputs& store) : prev_(detail::t_kept_outputs) {
  store.mode_ = Mode::recording;
  store.parent_ = prev_;
  detail::t_kept_outputs = &store;
}
KeptOutputs::Recording::~Recording() {
  detail::t_kept_outputs->mode_ = Mode::idle;
  detail::t_kept_outputs->parent_ = nullptr;
  detail::t_kept_outputs = prev_;
}

// A recomputation runs from backward, where no enclosing region is active: the replaying store
// answers alone, so an enclosing store (were backward called inside a region) sees none of it.
KeptOutputs::Replaying::Replaying(KeptOutputs& store) : prev_(detail::t_kept_outputs), store_(store) {
  store.mode_ = Mode::replaying;
  store.next_ = 0;
  detail::t_kept_outputs = &store;
}
KeptOutputs::Replaying::~Replaying() {
  store_.mode_ = Mode::idle;
  detail::t_kept_outputs = prev_;
}
void KeptOutputs::Replaying::finish() const {
  PRECIS_CHECK_T(CheckpointError, store_.next_ == store_.recorded_.size(), "checkpoint (selective): the forward made ",
                 store_.recorded_.size(), " calls of ops whose outputs can be kept but the recomputation made only ",
                 store_.next_,
                 "; the checkpointed function must run the same ops each time it is called (no branching on "
                 "values that change between forward and backward)");
}

std::vector<Tensor> KeptOutputs::run(OpId op, const std::function<std::vector<Tensor>()>& compute) {
  op = counted_as(op);
  if (mode_ == Mode::replaying && policy_) {
    PRECIS_CHECK_T(CheckpointError, next_ < recorded_.size() && recorded_[next_].op == op,
                   "checkpoint (selective): the recomputation called ", op_name(op), " where the forward ",
                   next_ < recorded_.size() ? std::string("called ") + op_name(recorded_[next_].op)
                                           : std::string("made no further call of an op it can keep"),
                   " (call ", next_, " of the ops whose outputs can be kept); the checkpointed function must run the "
                   "same ops each time it is called (no branching on values that change between forward and "
                   "backward)");
    const Call& call = recorded_[next_++];
    if (!call.kept) return compute();
    // A kept output modified in place since the op made it (by the function itself, or by the
    // caller after the region returned it: `out += x`) no longer holds what the op made, and
    // replaying it would apply the modification twice. The op's inputs are the forward's, so
    // computing it again gives what it made: the kept copy was only a saving.
    for (size_t i = 0; i < call.outputs.size(); ++i)
      if (call.outputs[i].defined() && call.outputs[i].version() != call.versions[i]) return compute();
    // Fresh handles on the kept data: the recomputation records its graph on these, never on the
    // stored tensors, which a later recomputation (retain_graph) replays again.
    std::vector<Tensor> out;
    for (const Tensor& t : call.outputs) out.push_back(t.defined() ? t.detach() : t);
    return out;
  }
  const bool keep = mode_ == Mode::recording && keeps_next(op);
  std::vector<Tensor> out = parent_ != nullptr ? parent_->run(op, compute) : compute();
  if (mode_ == Mode::recording && policy_) {
    ++calls_per_op_[static_cast<size_t>(op)];
    std::vector<uint32_t> versions;
    if (keep)
      for (const Tensor& t : out) versions.push_back(t.defined() ? t.version() : 0);
    recorded_.push_back({op, keep, keep ? out : std::vector<Tensor>{}, std::move(versions)});
  }
  return out;
}

bool KeptOutputs::records(OpId op) const {
  for (const KeptOutputs* s = this; s != nullptr; s = s->parent_)
    if (s->mode_ == Mode::recording && s->keeps_next(op)) return true;
  return false;
}

bool keeps_for_recompute(OpId op) {
  return detail::t_kept_outputs != nullptr && detail::t_kept_outputs->records(counted_as(op));
}

}  // namespace precis
