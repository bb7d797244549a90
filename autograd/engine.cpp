// The backward engine. Note [Engine]: a backward pass
//   1. walks the graph from the roots once (iteratively) to count, for every node, how many
//      edges point at it;
//   2. seeds the roots' input buffers with the root gradients;
//   3. repeatedly takes the ready node with the highest sequence number (created last), runs its
//      gradient pre-hooks, apply(), and adds each returned gradient into the buffer of the node
//      its edge points to; a node becomes ready when its count drops to zero;
//   4. runs the callbacks queued during the pass (queue_callback), in order.
// Gradients are checked against the recorded input metadata (shape must match; dtype is cast back,
// so e.g. a bf16 gradient reaching an f32 input arrives as f32).
#include "autograd/engine.h"

#include <optional>
#include <queue>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "autograd/autograd_meta.h"
#include "autograd/grad_mode.h"
#include "autograd/record.h"
#include "ops/functional.h"
#include "ops/profiler.h"
#include "tensor/factory.h"

namespace precis::autograd {

namespace {

struct ReadyOrder {
  bool operator()(const Node* a, const Node* b) const {
    // AccumulateGrad first (frees gradients early), then most recently created.
    const bool acc_a = dynamic_cast<const AccumulateGrad*>(a) != nullptr;
    const bool acc_b = dynamic_cast<const AccumulateGrad*>(b) != nullptr;
    if (acc_a != acc_b) return acc_b;
    return a->sequence_nr() < b->sequence_nr();
  }
};

Tensor accumulate(const Tensor& sum, const Tensor& g) {
  if (!sum.defined()) return g;
  if (!g.defined()) return sum;
  return add(sum, g);
}

// Checks one gradient returned by `node` for its input `i`; casts dtype and moves device when the
// input's differ.
Tensor validate(const Node& node, size_t i, Tensor g) {
  if (!g.defined() || i >= node.input_metadata().size()) return g;
  const InputMetadata& m = node.input_metadata()[i];
  PRECIS_CHECK_T(InternalError, g.sizes() == m.sizes, node.name(), " returned a gradient of shape ",
                 shape_str(g.sizes()), " for its input ", i, " of shape ", shape_str(m.sizes),
                 ". This is a bug in the op's backward; please report it.");
  if (g.device() != m.device) g = g.to(m.device);
  if (g.dtype() != m.dtype && is_floating(m.dtype)) g = g.to(m.dtype);
  return g;
}

// The callbacks of the pass running on this thread (null outside backward). A pass installs its
// own list and restores the enclosing pass's when it ends, however it ends.
thread_local std::vector<std::function<void()>>* t_callbacks = nullptr;

class CallbackScope {
 public:
  CallbackScope() : prev_(t_callbacks) { t_callbacks = &callbacks_; }
  ~CallbackScope() { t_callbacks = prev_; }
  CallbackScope(const CallbackScope&) = delete;
  CallbackScope& operator=(const CallbackScope&) = delete;

  // Runs the queued callbacks, including those queued while running (the list may grow, so each
  // is moved out by index before it is called).
  void run() {
    for (size_t i = 0; i < callbacks_.size(); ++i) {
      std::function<void()> fn = std::move(callbacks_[i]);
      fn();
    }
    callbacks_.clear();
  }

 private:
  std::vector<std::function<void()>> callbacks_;
  std::vector<std::function<void()>>* prev_;
};

// The device of a node's first defined incoming gradient (the CPU when none is defined).
Device gradients_device(const TensorList& grads) {
  for (const Tensor& g : grads)
    if (g.defined()) return g.device();
  return Device::cpu();
}

struct Capture {
  Node* node;
  uint32_t output_nr;
  size_t slot;
};

// autograd::grad captures a leaf input's gradient after the leaf's hooks, which its AccumulateGrad
// would run (`leaf_hooks`); a nested pass's boundary (a checkpointed region's inputs) must not:
// the enclosing pass runs the AccumulateGrad, hooks included, with what the region returns.
void capture(const std::vector<Capture>& captures, const Node* node, const TensorList& grads, TensorList& captured,
             bool leaf_hooks) {
  for (const Capture& c : captures) {
    if (c.node != node || c.output_nr >= grads.size() || !grads[c.output_nr].defined()) continue;
    const auto* acc = leaf_hooks ? dynamic_cast<const AccumulateGrad*>(node) : nullptr;
    const Tensor g = acc != nullptr ? acc->run_hooks(grads[c.output_nr]) : grads[c.output_nr];
    captured[c.slot] = accumulate(captured[c.slot], g);
  }
}

// autograd::grad's pruning (PyTorch's exec_info): of the graph below `roots`, the nodes with a
// captured node at or below them (`needed`), and those with one strictly below (`run`: only
// these are applied). Nothing else runs: no hooks, no retained gradients, no freed saved tensors.
struct Pruning {
  std::unordered_set<const Node*> needed, run;
};

Pruning prune(const std::vector<Edge>& roots, const std::vector<Capture>& captures) {
  std::unordered_set<const Node*> captured;
  for (const Capture& c : captures) captured.insert(c.node);
  Pruning p;
  std::unordered_set<const Node*> visited;
  std::vector<std::pair<Node*, size_t>> stack;  // (node, next edge to visit): a post-order walk
  for (const Edge& e : roots)
    if (visited.insert(e.fn.get()).second) stack.push_back({e.fn.get(), 0});
  while (!stack.empty()) {
    Node* n = stack.back().first;
    const auto& edges = n->next_edges();
    const size_t k = stack.back().second++;
    if (k < edges.size()) {
      if (edges[k].valid() && visited.insert(edges[k].fn.get()).second) stack.push_back({edges[k].fn.get(), 0});
      continue;
    }
    stack.pop_back();
    bool below = false;
    for (const Edge& e : edges) below = below || (e.valid() && p.needed.count(e.fn.get()) > 0);
    if (below) p.run.insert(n);
    if (below || captured.count(n) > 0) p.needed.insert(n);
  }
  return p;
}

// Runs the graph below `roots`. With `captures`, the buffers of the named (node, output) pairs are
// copied into `captured` and AccumulateGrad nodes are not run (autograd::grad semantics). With
// `stops` (a nested pass: detail::backward_to_boundary), those nodes are only captured: neither
// run nor walked below, and the pass's callbacks belong to the enclosing pass.
void run_engine(const std::vector<Edge>& roots, const TensorList& root_grads, bool retain_graph,
                const std::vector<Capture>* captures, TensorList* captured,
                const std::unordered_set<const Node*>* stops = nullptr) {
  GradModeGuard no_grad(false);
  BackwardPassGuard backward_pass;
  std::optional<CallbackScope> callbacks;
  if (stops == nullptr) callbacks.emplace();
  profiler::DirectionScope profile_as_backward(profiler::Direction::backward);  // kernels run by this pass
  auto is_stop = [stops](const Node* n) { return stops != nullptr && stops->count(n) > 0; };
  // autograd::grad runs only what leads to its inputs (a nested pass's region keeps its own
  // parameters' AccumulateGrad nodes, so it is not pruned).
  std::optional<Pruning> pruning;
  if (captures != nullptr && stops == nullptr) pruning = prune(roots, *captures);
  auto skipped = [&](const Node* n) { return pruning && pruning->needed.count(n) == 0; };

  // 1. Dependency counts (iterative DFS).
  std::unordered_map<Node*, int> deps;
  std::unordered_set<Node*> seen;
  std::vector<Node*> stack;
  for (const Edge& e : roots)
    if (!skipped(e.fn.get()) && seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    if (is_stop(n)) continue;
    for (const Edge& e : n->next_edges()) {
      if (!e.valid() || skipped(e.fn.get())) continue;
      ++deps[e.fn.get()];
      if (seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
    }
  }

  // 2. Seed the root buffers.
  std::unordered_map<Node*, TensorList> buffers;
  // Keep the nodes alive while they are queued (the graph may be owned only by the roots).
  std::unordered_map<Node*, std::shared_ptr<Node>> owners;
  auto buffer_of = [&](const Edge& e) -> TensorList& {
    TensorList& b = buffers[e.fn.get()];
    if (b.size() < e.fn->num_outputs()) b.resize(std::max<uint32_t>(e.fn->num_outputs(), 1));
    owners.emplace(e.fn.get(), e.fn);
    return b;
  };
  for (size_t i = 0; i < roots.size(); ++i) {
    if (skipped(roots[i].fn.get())) continue;
    TensorList& b = buffer_of(roots[i]);
    b[roots[i].input_nr] = accumulate(b[roots[i].input_nr], root_grads[i]);
  }

  std::priority_queue<Node*, std::vector<Node*>, ReadyOrder> ready;
  for (const Edge& e : roots) {
    if (skipped(e.fn.get())) continue;
    int& d = deps[e.fn.get()];
    if (d == 0) {
      ready.push(e.fn.get());
      d = -1;  // queued
    }
  }

  // 3. Run. A node whose gradients are all undefined is not applied, but its edges are still
  // released so that nodes below it that other paths reach become ready.
  while (!ready.empty()) {
    Node* node = ready.top();
    ready.pop();
    std::shared_ptr<Node> keep = owners[node];
    owners.erase(node);
    TensorList grads;
    if (auto it = buffers.find(node); it != buffers.end()) {
      grads = std::move(it->second);
      buffers.erase(it);
    }
    bool any = false;
    for (const Tensor& g : grads) any = any || g.defined();
    if (is_stop(node)) {
      capture(*captures, node, grads, *captured, /*leaf_hooks=*/false);
      continue;
    }

    TensorList input_grads;
    const bool is_acc = dynamic_cast<AccumulateGrad*>(node) != nullptr;
    if (any) {
      for (auto& hook : node->pre_hooks()) {
        if (hook.output_nr >= grads.size() || !grads[hook.output_nr].defined()) continue;
        Tensor& g = grads[hook.output_nr];
        g = checked_hook_result(g, hook.fn(g), [&] {
          return "a hook on output " + std::to_string(hook.output_nr) + " of " + node->name();
        });
      }
      for (auto& [output_nr, weak] : node->retained()) {
        auto impl = weak.lock();
        if (!impl || output_nr >= grads.size() || !grads[output_nr].defined()) continue;
        AutogradMeta& meta = impl->ensure_autograd_meta();
        meta.grad = meta.grad.defined() ? add(meta.grad, grads[output_nr]) : grads[output_nr].detach().clone();
      }
      if (captures != nullptr) capture(*captures, node, grads, *captured, /*leaf_hooks=*/stops == nullptr);
      if (!(is_acc && captures != nullptr) && !(pruning && pruning->run.count(node) == 0)) {
        // The profiler's backward hook: a node's time (the kernels it runs included) goes to the
        // op that recorded it, or to its name when no op did, on the clock of the device its
        // incoming gradients are on (where its kernels run); a node that profiles its own ops
        // (a checkpointed region) leaves them to be timed one by one.
        std::optional<profiler::Scope> profile;
        if (profiler::enabled() && !node->profiles_own_ops()) {
          const Device d = gradients_device(grads);
          node->has_op() ? profile.emplace(node->op(), d.type, static_cast<int>(d.index))
                         : profile.emplace(node->name(), d.type, static_cast<int>(d.index));
        }
        input_grads = node->apply(std::move(grads));
        profile.reset();
        if (!retain_graph) node->release_saved();
        PRECIS_CHECK_T(InternalError, is_acc || input_grads.size() == node->next_edges().size(), node->name(),
                       " returned ", input_grads.size(), " gradients for ", node->next_edges().size(),
                       " inputs. This is a bug; please report it.");
      }
    }
    const auto& edges = node->next_edges();
    for (size_t i = 0; i < edges.size(); ++i) {
      const Edge& e = edges[i];
      if (!e.valid() || skipped(e.fn.get())) continue;
      if (i < input_grads.size()) {
        Tensor g = validate(*node, i, std::move(input_grads[i]));
        if (g.defined()) {
          TensorList& b = buffer_of(e);
          b[e.input_nr] = accumulate(b[e.input_nr], g);
        }
      }
      owners.emplace(e.fn.get(), e.fn);
      int& d = deps[e.fn.get()];
      if (--d == 0) {
        ready.push(e.fn.get());
        d = -1;
      }
    }
  }

  // 4. The pass is complete: every gradient has been accumulated.
  if (callbacks) callbacks->run();
}

Edge root_edge(const Tensor& root, size_t i) {
  PRECIS_CHECK_T(StateError, root.defined(), "backward: root ", i, " is undefined");
  Edge e = gradient_edge(root);
  PRECIS_CHECK_T(StateError, e.valid(), "backward: root ", i, " (", root.describe(),
                 ") does not require grad and has no grad_fn; did you forget requires_grad_() on an input, "
                 "or compute it under NoGradGuard?");
  return e;
}

Tensor root_grad(const Tensor& root, const TensorList& grads, size_t i) {
  if (i < grads.size() && grads[i].defined()) {
    PRECIS_CHECK_SHAPE(grads[i].sizes() == root.sizes(), "backward: gradient ", grads[i].describe(),
                       " does not match the shape of root ", i, " ", root.describe());
    // An integer or bool gradient would reach the backward kernels, which have none for it.
    PRECIS_CHECK_DTYPE(grads[i].is_floating_point(), "backward: gradient ", grads[i].describe(), " for root ", i, " ",
                       root.describe(), " must be floating; convert it with .to(", dtype_name(root.dtype()), ")");
    PRECIS_CHECK_DEVICE(grads[i].device() == root.device(), "backward: gradient ", grads[i].describe(),
                        " is on another device than root ", i, " ", root.describe());
    // In the root's dtype, as every gradient the engine passes on (PyTorch casts it too): an f64
    // gradient for an f32 root would otherwise reach the leaves' .grad as f64.
    return grads[i].dtype() == root.dtype() || !root.is_floating_point() ? grads[i] : grads[i].to(root.dtype());
  }
  PRECIS_CHECK_T(StateError, root.numel() == 1, "backward: a gradient can be created implicitly only for a "
                 "one-element output, but root ", i, " is ", root.describe(), "; pass a gradient tensor");
  return ones_like(root);
}

}  // namespace

TensorList detail::backward_to_boundary(const std::vector<Edge>& roots, const TensorList& grad_roots,
                                        const std::vector<Edge>& boundary) {
  std::vector<Capture> captures;
  std::unordered_set<const Node*> stops;
  for (size_t i = 0; i < boundary.size(); ++i) {
    captures.push_back({boundary[i].fn.get(), boundary[i].input_nr, i});
    stops.insert(boundary[i].fn.get());
  }
  TensorList result(boundary.size());
  run_engine(roots, grad_roots, /*retain_graph=*/false, &captures, &result, &stops);
  return result;
}

void queue_callback(std::function<void()> callback) {
  PRECIS_CHECK_T(StateError, t_callbacks != nullptr, "queue_callback: no backward pass is running on this thread; "
                 "callbacks can only be queued during backward (from a hook, a post-accumulate hook, a custom "
                 "Function's backward or another callback)");
  PRECIS_CHECK(callback != nullptr, "queue_callback: the callback is empty");
  t_callbacks->push_back(std::move(callback));
}

void backward(const TensorList& roots, const TensorList& grad_roots, bool retain_graph) {
  std::vector<Edge> edges;
  TensorList grads;
  for (size_t i = 0; i < roots.size(); ++i) {
    edges.push_back(root_edge(roots[i], i));
    grads.push_back(root_grad(roots[i], grad_roots, i));
  }
  run_engine(edges, grads, retain_graph, nullptr, nullptr);
}

TensorList grad(const TensorList& outputs, const TensorList& inputs, const TensorList& grad_outputs,
                bool retain_graph, bool allow_unused) {
  std::vector<Edge> edges;
  TensorList grads;
  for (size_t i = 0; i < outputs.size(); ++i) {
    edges.push_back(root_edge(outputs[i], i));
    grads.push_back(root_grad(outputs[i], grad_outputs, i));
  }
  std::vector<Capture> captures;
  std::vector<std::shared_ptr<Node>> keep;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Edge e = gradient_edge(inputs[i]);
    PRECIS_CHECK_T(StateError, e.valid(), "grad: input ", i, " (", inputs[i].describe(), ") does not require grad");
    captures.push_back({e.fn.get(), e.input_nr, i});
    keep.push_back(e.fn);
  }
  TensorList result(inputs.size());
  run_engine(edges, grads, retain_graph, &captures, &result);
  for (size_t i = 0; i < result.size(); ++i) {
    PRECIS_CHECK_T(StateError, allow_unused || result[i].defined(), "grad: input ", i, " (", inputs[i].describe(),
                   ") was not used to compute the outputs; pass allow_unused=true if that is expected");
    if (result[i].defined() && result[i].dtype() != inputs[i].dtype()) result[i] = result[i].to(inputs[i].dtype());
  }
  return result;
}

}  // namespace precis::autograd
