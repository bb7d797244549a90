// Activation checkpointing.
//
// Note [Exact recomputation]: the forward runs the function under NoGradGuard and remembers what
// the function's result depended on besides its arguments' values, so that the recomputation can
// put it back:
//  - precision: the policy's settings on the thread and the parameter casts it served
//    (PrecisionRegion, ops/precision.h; amp's Note [Autocast in checkpointed regions]). The
//    backward engine suspends autocast, and the backward may run outside the forward's region or
//    inside another one: the recomputation runs under the forward's settings whatever they are.
//  - random numbers: which generators the function drew from and where each stood (a
//    DrawObserver, core/rng.h). The recomputation rewinds them there, checks that it drew exactly
//    as much from each (a different amount means different dropout masks), and leaves each
//    generator where it was before the recomputation, so the backward does not move the stream
//    the next forward draws from.
//  - where its graph joins the graph outside: every tensor requiring grad that an op read
//    (a GradientUseObserver; ops ask needs_grad before recording, and with grad mode off that is
//    where they report what they would have recorded an edge to). These edges are the node's
//    next edges, so the engine counts the node among the producers of each parameter's gradient
//    and accumulates it once, in its usual order, with the gradients from outside the region.
//  - side effects: the recomputation runs with is_recomputing() (ops/recompute.h) so batch norm
//    does not update its running statistics a second time.
// The backward then runs the recomputed graph down to those edges only (the engine's
// detail::backward_to_boundary) and returns the gradients that reached them. A recomputed graph
// that reaches a node created before the recomputation and not on the recorded boundary cannot be
// run without running part of the outer graph twice: CheckpointError.
#include "autograd/checkpoint.h"

#include <algorithm>
#include <bitset>
#include <map>
#include <optional>
#include <unordered_set>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/record.h"
#include "core/rng.h"
#include "ops/precision.h"
#include "ops/profiler.h"
#include "ops/recompute.h"

namespace precis::autograd {

const char* checkpoint_mode_name(CheckpointMode mode) {
  switch (mode) {
    case CheckpointMode::none: return "none";
    case CheckpointMode::full: return "full";
    case CheckpointMode::selective: return "selective";
  }
  return "?";
}

CheckpointMode parse_checkpoint_mode(std::string_view name) {
  for (CheckpointMode m : {CheckpointMode::none, CheckpointMode::full, CheckpointMode::selective})
    if (name == checkpoint_mode_name(m)) return m;
  throw ValueError(precis::detail::str_cat("unknown activation checkpointing mode '", name,
                                           "'; expected none, full or selective"));
}

std::vector<OpId> default_selective_kept_ops() {
  return {OpId::linear, OpId::linear_gelu, OpId::conv2d, OpId::attention_softmax};
}

namespace {

// kept_ops as a policy: every call of those ops.
KeepPolicy keep_ops(const std::vector<OpId>& ops) {
  std::bitset<kNumOps> set;
  for (OpId op : ops) set.set(static_cast<size_t>(op));
  return [set](const KeepCandidate& c) { return set.test(static_cast<size_t>(c.op)); };
}

// A tensor the recomputation reads again, and its version when the forward read it.
struct Tracked {
  std::shared_ptr<VersionCounter> counter;
  uint32_t version = 0;
  std::string what;  // for messages
  uint32_t now() const { return counter->value.load(std::memory_order_relaxed); }
};

Tracked track(const Tensor& t, std::string what) {
  const auto& counter = t.impl()->version_counter();
  return {counter, counter->value.load(std::memory_order_relaxed), std::move(what) + " (" + t.describe() + ")"};
}

// Installs itself as the thread's GradientUseObserver and collects the boundary (see the Note).
class BoundaryRecorder final : public GradientUseObserver {
 public:
  BoundaryRecorder() : prev_(set_gradient_use_observer(this)) {}
  ~BoundaryRecorder() override { set_gradient_use_observer(prev_); }
  BoundaryRecorder(const BoundaryRecorder&) = delete;
  BoundaryRecorder& operator=(const BoundaryRecorder&) = delete;

  void on_use(const Tensor& t) override {
    Edge e = gradient_edge(t);
    if (index_.emplace(std::pair{e.fn.get(), e.input_nr}, edges.size()).second) {
      edges.push_back(std::move(e));
      metadata.push_back({t.sizes(), t.dtype(), t.device()});
      tracked.push_back(track(t, "a tensor requiring grad that the function read"));
    }
    if (prev_ != nullptr) prev_->on_use(t);  // an enclosing region's forward reads it too
  }

  std::vector<Edge> edges;
  std::vector<InputMetadata> metadata;
  std::vector<Tracked> tracked;

 private:
  std::map<std::pair<const Node*, uint32_t>, size_t> index_;
  GradientUseObserver* prev_;
};

// Where a generator stood when the region first drew from it, and after the region's forward.
struct Draw {
  Generator* generator;
  uint64_t seed, start, end;
};

// Records, in the forward, the generators the region draws from (see the Note).
class DrawRecorder final : public DrawObserver {
 public:
  DrawRecorder() : prev_(set_draw_observer(this)) {}
  ~DrawRecorder() override { set_draw_observer(prev_); }
  DrawRecorder(const DrawRecorder&) = delete;
  DrawRecorder& operator=(const DrawRecorder&) = delete;

  void on_draw(Generator& g) override {
    if (std::none_of(draws.begin(), draws.end(), [&](const Draw& d) { return d.generator == &g; }))
      draws.push_back({&g, g.seed(), g.offset(), 0});
    if (prev_ != nullptr) prev_->on_draw(g);
  }
  std::vector<Draw> finish() {
    for (Draw& d : draws) d.end = d.generator->offset();
    return std::move(draws);
  }

 private:
  std::vector<Draw> draws;
  DrawObserver* prev_;
};

// Rewinds the recorded generators for a recomputation and puts them back afterwards; refuses a
// draw from any other generator, and check() refuses a different amount drawn.
class DrawReplay final : public DrawObserver {
 public:
  explicit DrawReplay(const std::vector<Draw>& draws) : draws_(draws), prev_(set_draw_observer(this)) {
    for (const Draw& d : draws_) {
      before_.push_back({d.generator->seed(), d.generator->offset()});
      d.generator->set_state(d.seed, d.start);
    }
  }
  ~DrawReplay() override {
    set_draw_observer(prev_);
    for (size_t i = 0; i < draws_.size(); ++i) draws_[i].generator->set_state(before_[i].first, before_[i].second);
  }
  DrawReplay(const DrawReplay&) = delete;
  DrawReplay& operator=(const DrawReplay&) = delete;

  void on_draw(Generator& g) override {
    PRECIS_CHECK_T(CheckpointError,
                   std::any_of(draws_.begin(), draws_.end(), [&](const Draw& d) { return d.generator == &g; }),
                   "checkpoint: the recomputation drew random numbers from a generator (seed ", g.seed(),
                   ") that the forward did not draw from, so its dropout masks cannot be the forward's; the "
                   "checkpointed function must draw from the same generators each time it runs");
    if (prev_ != nullptr) prev_->on_draw(g);
  }
  void check() const {
    for (const Draw& d : draws_)
      PRECIS_CHECK_T(CheckpointError, d.generator->offset() == d.end, "checkpoint: the forward drew ",
                     d.end - d.start, " Philox blocks from a generator (seed ", d.seed, ") but the recomputation drew ",
                     d.generator->offset() - d.start, ", so its random numbers (dropout masks) differ; the "
                     "checkpointed function must make the same random draws each time it runs");
  }

 private:
  const std::vector<Draw>& draws_;
  std::vector<std::pair<uint64_t, uint64_t>> before_;
  DrawObserver* prev_;
};

struct OutputMeta {
  bool defined = false;
  Shape sizes;
  DType dtype = DType::f32;
};

// The region's node: its next edges are the boundary; apply() recomputes and back-propagates.
class CheckpointNode final : public Node {
 public:
  struct State {
    std::function<TensorList()> fn;
    CheckpointMode mode = CheckpointMode::full;
    std::vector<Tracked> tracked;
    std::vector<Draw> draws;
    std::unique_ptr<PrecisionRegion> precision;
    std::unique_ptr<KeptOutputs> kept;
    std::vector<OutputMeta> outputs;
  };
  explicit CheckpointNode(std::unique_ptr<State> state) : state_(std::move(state)) {}

  std::string name() const override {
    return state_ && state_->mode == CheckpointMode::selective ? "CheckpointBackward(selective)"
                                                               : "CheckpointBackward";
  }
  void release_saved() override { state_.reset(); }
  // Profiled op by op: the recomputed forward under "recompute", its backward under "backward".
  bool profiles_own_ops() const override { return true; }
  TensorList apply(TensorList&& grads) override;

 private:
  TensorList recompute();
  void check_graph(const std::vector<Edge>& roots, uint64_t first_seq) const;
  std::unique_ptr<State> state_;
};

void check_versions(const std::vector<Tracked>& tracked, const char* when) {
  for (const Tracked& t : tracked)
    PRECIS_CHECK_T(CheckpointError, t.now() == t.version, "checkpoint: ", t.what, " was modified in place ", when,
                   " (version ", t.version, ", now ", t.now(), "), so recomputing the checkpointed function in "
                   "backward would not repeat its forward. Use an out-of-place op, or clone() the tensor before "
                   "modifying it");
}

// Brackets a PrecisionRegion's forward or recomputation (a null region: amp is not linked).
class PrecisionScope {
 public:
  PrecisionScope(PrecisionRegion* region, bool recompute) : region_(region), recompute_(recompute) {
    if (region_ == nullptr) return;
    recompute_ ? region_->begin_recompute() : region_->begin_forward();
  }
  ~PrecisionScope() {
    if (region_ == nullptr) return;
    recompute_ ? region_->end_recompute() : region_->end_forward();
  }
  PrecisionScope(const PrecisionScope&) = delete;
  PrecisionScope& operator=(const PrecisionScope&) = delete;

 private:
  PrecisionRegion* region_;
  bool recompute_;
};

TensorList CheckpointNode::recompute() {
  State& s = *state_;
  GradModeGuard grad_mode(true);
  BackwardPassGuard forward_again(/*in_backward=*/false);
  RecomputingGuard recomputing;
  GradientUseObserver* observer = set_gradient_use_observer(nullptr);
  struct RestoreObserver {
    GradientUseObserver* o;
    ~RestoreObserver() { set_gradient_use_observer(o); }
  } restore{observer};
  DrawReplay draws(s.draws);
  PrecisionScope precision(s.precision.get(), /*recompute=*/true);
  KeptOutputs::Replaying kept(*s.kept);
  profiler::DirectionScope profile_as_recompute(profiler::Direction::recompute);
  TensorList out = s.fn();
  kept.finish();
  draws.check();
  return out;
}

void CheckpointNode::check_graph(const std::vector<Edge>& roots, uint64_t first_seq) const {
  std::unordered_set<const Node*> boundary, seen;
  for (const Edge& e : next_edges())
    if (e.valid()) boundary.insert(e.fn.get());
  std::vector<const Node*> stack;
  for (const Edge& e : roots) stack.push_back(e.fn.get());
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    if (boundary.count(n) > 0 || !seen.insert(n).second) continue;
    PRECIS_CHECK_T(CheckpointError, n->sequence_nr() >= first_seq && dynamic_cast<const AccumulateGrad*>(n) == nullptr,
                   "checkpoint: the recomputation's graph reaches ", n->name(), ", which lies outside the "
                   "checkpointed function, through a tensor requiring grad that the forward did not read. The "
                   "function must read the same tensors each time it runs, must not turn grad mode on itself, "
                   "and must not create tensors requiring grad (create parameters outside it)");
    for (const Edge& e : n->next_edges())
      if (e.valid()) stack.push_back(e.fn.get());
  }
}

TensorList CheckpointNode::apply(TensorList&& grads) {
  PRECIS_CHECK_T(StateError, state_ != nullptr, "CheckpointBackward: backward through this checkpointed region a "
                 "second time, after its inputs were freed; pass retain_graph=true to the first backward()");
  check_versions(state_->tracked, "after the checkpointed forward, before its backward");
  const uint64_t first_seq = next_sequence_nr();
  const TensorList out = recompute();
  const std::vector<OutputMeta>& metas = state_->outputs;
  PRECIS_CHECK_T(CheckpointError, out.size() == metas.size(), "checkpoint: the forward returned ", metas.size(),
                 " tensors but the recomputation returned ", out.size(), "; the function must be deterministic");
  std::vector<Edge> roots;
  TensorList root_grads;
  for (size_t i = 0; i < out.size(); ++i) {
    const OutputMeta& m = metas[i];
    PRECIS_CHECK_T(CheckpointError, out[i].defined() == m.defined && (!m.defined || (out[i].sizes() == m.sizes &&
                                                                                    out[i].dtype() == m.dtype)),
                   "checkpoint: output ", i, " of the recomputation is ",
                   out[i].defined() ? out[i].describe() : std::string("undefined"), " but the forward's was ",
                   m.defined ? precis::detail::str_cat(dtype_name(m.dtype), " ", shape_str(m.sizes)) : std::string("undefined"),
                   "; the function must be deterministic");
    if (i >= grads.size() || !grads[i].defined()) continue;
    Edge e = gradient_edge(out[i]);
    if (!e.valid()) continue;  // the output does not depend on anything requiring grad
    roots.push_back(std::move(e));
    root_grads.push_back(grads[i]);
  }
  check_graph(roots, first_seq);
  return detail::backward_to_boundary(roots, root_grads, next_edges());
}

}  // namespace

TensorList checkpoint_list(std::function<TensorList()> fn, const TensorList& inputs, const CheckpointOptions& options) {
  if (options.mode == CheckpointMode::none || !is_grad_enabled()) return fn();
  auto state = std::make_unique<CheckpointNode::State>();
  state->mode = options.mode;
  state->precision = make_precision_region();
  state->kept = std::make_unique<KeptOutputs>(options.mode != CheckpointMode::selective ? KeepPolicy()
                                              : options.keep                               ? options.keep
                                                                                           : keep_ops(options.kept_ops));
  std::vector<Tracked> input_versions;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].defined()) input_versions.push_back(track(inputs[i], "input " + std::to_string(i)));

  TensorList out;
  std::optional<BoundaryRecorder> boundary;
  {
    NoGradGuard no_grad;
    boundary.emplace();
    DrawRecorder draws;
    PrecisionScope precision(state->precision.get(), /*recompute=*/false);
    KeptOutputs::Recording kept(*state->kept);
    out = fn();
    // Under NoGradGuard an output can require grad only by being a tensor from outside returned
    // as it is (an input passed through): no op read it, so it joins the boundary here, or the
    // recomputed graph would reach its AccumulateGrad from outside the boundary.
    for (const Tensor& t : out)
      if (t.defined() && t.requires_grad()) boundary->on_use(t);
    state->draws = draws.finish();
  }
  std::vector<Edge> edges = std::move(boundary->edges);
  std::vector<InputMetadata> metadata = std::move(boundary->metadata);
  std::vector<Tracked> used = std::move(boundary->tracked);
  boundary.reset();  // uninstalls the observer
  check_versions(input_versions, "by the checkpointed function");
  check_versions(used, "by the checkpointed function");
  if (edges.empty()) return out;  // nothing requires grad: nothing to recompute

  state->tracked = std::move(input_versions);
  state->tracked.insert(state->tracked.end(), std::make_move_iterator(used.begin()), std::make_move_iterator(used.end()));
  state->fn = std::move(fn);
  for (Tensor& t : out) {
    state->outputs.push_back(t.defined() ? OutputMeta{true, t.sizes(), t.dtype()} : OutputMeta{});
    // A tensor of its own to carry the grad_fn (the function may return an input or a view of one).
    if (t.defined() && is_floating(t.dtype())) t = t.detach();
  }
  auto node = std::make_shared<CheckpointNode>(std::move(state));
  node->next_edges() = std::move(edges);
  node->input_metadata() = std::move(metadata);
  attach(node, {}, out);
  return out;
}

}  // namespace precis::autograd
