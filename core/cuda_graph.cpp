#include "core/cuda_graph.h"

#include <algorithm>
#include <atomic>
#include <string>

#include "core/allocator.h"
#include "core/cuda_backend.h"
#include "core/error.h"
#include "core/rng.h"

namespace precis::cuda {

namespace {

std::atomic<uint64_t> g_next_pool{1};  // private pool ids, one per capture (0 is the shared cache)
thread_local Graph* t_capturing = nullptr;

// Refuses draws that bypass Generator::draw on the capturing thread — numbers made on the host
// (rand, randn): the capture would freeze them, so every replay would repeat them.
class RefuseDraws final : public DrawObserver {
 public:
  void on_draw(Generator& g) override {
    throw GraphCaptureError(detail::str_cat(
        "cuda::Graph: random numbers made on the host (rand, randn, ...; generator seed ", g.seed(),
        ") while capturing a CUDA graph: the capture would freeze them, so every replay would repeat them. Draw them "
        "before the capture into a tensor the region reads, and refill it between replays"));
  }
  DrawObserver* previous = nullptr;
};
thread_local RefuseDraws t_refuse_draws;

const detail::CudaCoreHooks& graph_hooks(int device) {
  const detail::CudaCoreHooks* cuda = detail::cuda_core_hooks();
  PRECIS_CHECK_DEVICE(cuda != nullptr, "cuda::Graph: cuda:", device, " is not available: ",
                      cuda_backend_unavailable_reason());
  PRECIS_CHECK_DEVICE(device >= 0 && device < cuda->device_count(), "cuda::Graph: cuda:", device,
                      " is not a visible device (", cuda->device_count(), " visible)");
  PRECIS_CHECK_DEVICE(cuda->graph_begin != nullptr, "cuda::Graph: the loaded CUDA backend cannot capture graphs");
  return *cuda;
}

}  // namespace

// Answers Generator::draw on the capturing thread: offsets relative to the graph's device-side base.
class CaptureDraws final : public CapturedDraws {
 public:
  PhiloxDraw draw(Generator& g, uint64_t n_blocks) override {
    Graph* graph = t_capturing;
    PRECIS_INTERNAL_ASSERT(graph != nullptr, "cuda::Graph: a captured draw without a capture");
    auto it = std::find_if(graph->random_.begin(), graph->random_.end(),
                           [&](const Graph::RandomStream& r) { return r.generator == &g; });
    if (it == graph->random_.end())
      throw GraphCaptureError(detail::str_cat(
          "cuda::Graph: a random draw from a generator (seed ", g.seed(), ") that this capture does not know: its "
          "kernels would hold this draw's numbers and every replay would repeat them. Call register_generator() "
          "with it before capture_begin() (the default generator needs none)"));
    // Activation checkpointing watches draws to replay them in its recomputation (a DrawObserver
    // above this capture's); relative offsets would escape it.
    if (detail::t_draw_observer != &t_refuse_draws)
      throw GraphCaptureError("cuda::Graph: a random draw inside an activation-checkpointed region while "
                              "capturing a CUDA graph: the recomputation cannot replay graph-relative draws; "
                              "capture the region without checkpointing, or without dropout");
    if (g.seed() != it->seed)
      throw GraphCaptureError(detail::str_cat("cuda::Graph: the generator's seed changed (", it->seed, " -> ",
                                              g.seed(), ") during the capture; reseed before capture_begin()"));
    const PhiloxDraw d{it->seed, it->drawn, static_cast<const uint64_t*>(it->base)};
    it->drawn += n_blocks;
    return d;
  }
  CapturedDraws* previous = nullptr;
};

namespace {
thread_local CaptureDraws t_capture_draws;
}  // namespace

bool is_capturing() { return t_capturing != nullptr; }
int capturing_device() { return t_capturing != nullptr ? t_capturing->device() : -1; }

Graph::Graph(int device) : device_(device) {}

Graph::~Graph() { reset(); }

Graph::Graph(Graph&& other) noexcept
    : device_(other.device_),
      handle_(other.handle_),
      capturing_(other.capturing_),
      pool_(other.pool_),
      registered_(std::move(other.registered_)),
      random_(std::move(other.random_)) {
  other.random_.clear();
  other.handle_ = nullptr;
  other.capturing_ = false;
  if (t_capturing == &other) t_capturing = this;
}

Graph& Graph::operator=(Graph&& other) noexcept {
  if (this == &other) return *this;
  reset();
  device_ = other.device_;
  handle_ = other.handle_;
  capturing_ = other.capturing_;
  pool_ = other.pool_;
  registered_ = std::move(other.registered_);
  random_ = std::move(other.random_);
  other.random_.clear();
  other.handle_ = nullptr;
  other.capturing_ = false;
  if (t_capturing == &other) t_capturing = this;
  return *this;
}

void Graph::capture_begin() {
  PRECIS_CHECK_T(StateError, handle_ == nullptr, "cuda::Graph::capture_begin: this graph already holds ",
                 capturing_ ? "a capture in progress" : "a captured graph", "; call reset() first");
  PRECIS_CHECK_T(StateError, t_capturing == nullptr, "cuda::Graph::capture_begin: this thread is already capturing "
                 "another graph; end that capture first (captures do not nest)");
  const detail::CudaCoreHooks& cuda = graph_hooks(device_);
  PRECIS_CHECK_DEVICE(cuda.write_u64_async != nullptr, "cuda::Graph: the loaded CUDA backend cannot capture "
                      "random draws (no write_u64_async)");
  // Each generator's base, written with its current offset before the capture (in stream order):
  // where kernels run as they are issued (the fake device), the capture's own run draws what an
  // eager step would.
  std::vector<Generator*> generators = registered_;
  if (std::find(generators.begin(), generators.end(), &default_generator()) == generators.end())
    generators.push_back(&default_generator());
  Allocator& memory = allocator_for(Device::cuda(device_));
  try {
    for (Generator* g : generators) {
      random_.push_back({g, g->seed(), memory.allocate(sizeof(uint64_t)), 0});
      cuda.write_u64_async(device_, random_.back().base, g->offset());
    }
  } catch (...) {
    free_random_streams();
    throw;
  }
  const uint64_t pool = g_next_pool.fetch_add(1, std::memory_order_relaxed);
  try {
    handle_ = cuda.graph_begin(device_, pool);
  } catch (...) {
    free_random_streams();
    throw;
  }
  pool_ = pool;
  capturing_ = true;
  t_capturing = this;
  t_refuse_draws.previous = set_draw_observer(&t_refuse_draws);
  t_capture_draws.previous = std::exchange(detail::t_captured_draws, &t_capture_draws);
}

void Graph::register_generator(Generator& generator) {
  PRECIS_CHECK_T(StateError, !capturing_, "cuda::Graph::register_generator: called while capturing; register "
                 "generators before capture_begin()");
  if (std::find(registered_.begin(), registered_.end(), &generator) == registered_.end())
    registered_.push_back(&generator);
}

void Graph::free_random_streams() noexcept {
  if (random_.empty()) return;
  try {
    Allocator& memory = allocator_for(Device::cuda(device_));
    for (const RandomStream& r : random_) memory.deallocate(r.base, sizeof(uint64_t));
  } catch (...) {  // a leak of a few bytes, never a reuse of memory a replay may read
  }
  random_.clear();
}

void Graph::capture_end() {
  PRECIS_CHECK_T(StateError, capturing_, "cuda::Graph::capture_end: this graph is not capturing; call "
                 "capture_begin() first");
  set_draw_observer(t_refuse_draws.previous);
  detail::t_captured_draws = t_capture_draws.previous;
  t_capturing = nullptr;
  capturing_ = false;
  void* h = handle_;
  handle_ = nullptr;
  try {
    detail::cuda_core_hooks()->graph_end(h);  // on a failure it has freed the capture and throws
  } catch (...) {
    free_random_streams();
    throw;
  }
  handle_ = h;
  // The generators stay where they were: on a GPU the captured work has not run (replays draw).
}

void Graph::replay() {
  PRECIS_CHECK_T(StateError, captured(), "cuda::Graph::replay: ",
                 capturing_ ? "the capture has not ended; call capture_end() first"
                            : "nothing was captured; capture_begin(), the work, capture_end() first");
  const detail::CudaCoreHooks* cuda = detail::cuda_core_hooks();
  for (const RandomStream& r : random_) {
    Generator& g = *r.generator;
    PRECIS_CHECK_T(StateError, r.drawn == 0 || g.seed() == r.seed, "cuda::Graph::replay: a generator the graph draws from was "
                   "reseeded since the capture (seed ", r.seed, " -> ", g.seed(), "); the captured kernels hold the "
                   "old seed: capture again after manual_seed");
  }
  for (const RandomStream& r : random_)
    if (r.drawn > 0) cuda->write_u64_async(device_, r.base, r.generator->offset());
  cuda->graph_replay(handle_);
  // Only the generators the graph draws from move; one it never drew from may have been reseeded
  // since the capture, and must keep its new seed.
  for (const RandomStream& r : random_)
    if (r.drawn > 0) r.generator->set_state(r.seed, r.generator->offset() + r.drawn);
}

void Graph::abandon() noexcept {
  if (t_capturing == this) {
    set_draw_observer(t_refuse_draws.previous);
    detail::t_captured_draws = t_capture_draws.previous;
    t_capturing = nullptr;
  }
  capturing_ = false;
  void* h = handle_;
  handle_ = nullptr;
  if (h != nullptr) detail::cuda_core_hooks()->graph_abandon(h);
  free_random_streams();
}

void Graph::reset() {
  if (capturing_) {
    abandon();
    return;
  }
  void* h = handle_;
  handle_ = nullptr;
  if (h != nullptr) detail::cuda_core_hooks()->graph_destroy(h);  // after the replays that read the bases
  free_random_streams();
}

}  // namespace precis::cuda
