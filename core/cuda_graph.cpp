#include "core/cuda_graph.h"

#include <atomic>
#include <string>

#include "core/cuda_backend.h"
#include "core/error.h"
#include "core/rng.h"

namespace precis::cuda {

namespace {

std::atomic<uint64_t> g_next_pool{1};  // private pool ids, one per capture (0 is the shared cache)
thread_local Graph* t_capturing = nullptr;

// Refuses random draws on the capturing thread: the generator's offset advances on the host, so
// the captured kernels hold this step's seed and offset and every replay would draw the same
// numbers.
class RefuseDraws final : public DrawObserver {
 public:
  void on_draw(Generator& g) override {
    throw GraphCaptureError(detail::str_cat(
        "cuda::Graph: a random draw (generator seed ", g.seed(), ") while capturing a CUDA graph: the captured "
        "kernels would hold this draw's numbers, so every replay would repeat them (the same dropout mask each step). "
        "Capture a region without random draws (dropout p = 0, or the module in eval mode); graph-safe random "
        "numbers are not built yet"));
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

bool is_capturing() { return t_capturing != nullptr; }

Graph::Graph(int device) : device_(device) {}

Graph::~Graph() { reset(); }

Graph::Graph(Graph&& other) noexcept
    : device_(other.device_), handle_(other.handle_), capturing_(other.capturing_), pool_(other.pool_) {
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
  const uint64_t pool = g_next_pool.fetch_add(1, std::memory_order_relaxed);
  handle_ = cuda.graph_begin(device_, pool);
  pool_ = pool;
  capturing_ = true;
  t_capturing = this;
  t_refuse_draws.previous = set_draw_observer(&t_refuse_draws);
}

void Graph::capture_end() {
  PRECIS_CHECK_T(StateError, capturing_, "cuda::Graph::capture_end: this graph is not capturing; call "
                 "capture_begin() first");
  set_draw_observer(t_refuse_draws.previous);
  t_capturing = nullptr;
  capturing_ = false;
  void* h = handle_;
  handle_ = nullptr;
  detail::cuda_core_hooks()->graph_end(h);  // on a failure it has freed the capture and throws
  handle_ = h;
}

void Graph::replay() {
  PRECIS_CHECK_T(StateError, captured(), "cuda::Graph::replay: ",
                 capturing_ ? "the capture has not ended; call capture_end() first"
                            : "nothing was captured; capture_begin(), the work, capture_end() first");
  detail::cuda_core_hooks()->graph_replay(handle_);
}

void Graph::abandon() noexcept {
  if (t_capturing == this) {
    set_draw_observer(t_refuse_draws.previous);
    t_capturing = nullptr;
  }
  capturing_ = false;
  void* h = handle_;
  handle_ = nullptr;
  if (h != nullptr) detail::cuda_core_hooks()->graph_abandon(h);
}

void Graph::reset() {
  if (capturing_) {
    abandon();
    return;
  }
  void* h = handle_;
  handle_ = nullptr;
  if (h != nullptr) detail::cuda_core_hooks()->graph_destroy(h);
}

}  // namespace precis::cuda
