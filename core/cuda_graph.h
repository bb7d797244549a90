#pragma once
// CUDA graphs (torch.cuda.CUDAGraph): record the device work of a region once — a whole training
// step — and launch it again with one call, so that the host issues one launch per step instead
// of hundreds and the GPU never waits for it.
//
//   cuda::Graph graph;                 // device 0
//   step();                            // warm up outside the capture: caches, cuDNN plans, buffers
//   graph.capture_begin();             // or cuda::capture(graph, [&] { step(); });
//   step();                            // queued and recorded, not run
//   graph.capture_end();
//   for (...) { copy the next batch into the captured input tensors; graph.replay(); }
//
// What a replay repeats is exactly the captured work on the captured memory: the tensors the
// region read must be refilled in place (copy_), the tensors it made are overwritten in place,
// and every host-side value is frozen as it was at capture — a learning rate, a loop count, a
// random seed. Allocations during the capture come from a private pool of the device's caching
// allocator that nothing else receives while the graph lives (its replays write there).
//
// Random numbers (dropout) are graph-safe: the captured kernels add a device-side base to their
// Philox offsets, and each replay first sets that base to the generator's current offset and then
// advances the generator by what the captured work draws, so every replay draws new numbers — the
// ones an eager step would have drawn at that point (the capture itself, which does not run on a
// GPU, leaves the generators where they were). The default generator is always registered; others
// need register_generator() before the capture.
//
// A capture refuses, with GraphCaptureError, work a graph cannot hold, before it is issued: any
// host wait for the device (item(), a pageable copy, synchronize), a draw from a generator it does
// not know, and a draw made on the host (rand, randn: their numbers would be frozen). Work on the
// CPU inside the region runs once, during the capture, and is not replayed.
#include <cstdint>
#include <utility>
#include <vector>

namespace precis {
class Generator;
}  // namespace precis

namespace precis::cuda {

/// One captured graph of a CUDA device. Not copyable; movable.
class Graph {
 public:
  /// A graph of cuda:`device`, empty until a capture ends.
  explicit Graph(int device = 0);
  /// Frees the graph (waiting for its replays) and its memory pool. Abandons a capture left open.
  ~Graph();
  /// Takes other's graph or capture in progress; other is left empty.
  Graph(Graph&& other) noexcept;
  /// Frees this graph's (reset()), then takes other's; other is left empty.
  Graph& operator=(Graph&& other) noexcept;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  /// Starts capturing the calling thread's work on the device's current stream. DeviceError
  /// without a usable device or backend support; StateError when this graph already holds a
  /// capture (reset() first) or the thread is capturing another graph.
  void capture_begin();
  /// Ends the capture; the graph can then be replayed. StateError when not capturing. A capture
  /// that work inside it broke (a DeviceError from the runtime) leaves the graph empty.
  void capture_end();
  /// Launches the captured work on the device's current stream; returns without waiting for it.
  /// Before it, for each generator the work draws from: writes the generator's offset where the
  /// captured kernels read it and advances the generator past the work's draws. StateError when
  /// nothing was captured, or when manual_seed changed a generator's seed since the capture.
  void replay();
  /// Lets the next capture's work draw random numbers from `generator` (the default generator needs
  /// no registering). `generator` must outlive this graph. StateError while capturing.
  void register_generator(Generator& generator);
  /// Frees the captured graph and its pool; the graph can capture again.
  void reset();
  /// Whether a finished capture can be replayed.
  bool captured() const { return handle_ != nullptr && !capturing_; }
  /// The device the graph belongs to.
  int device() const { return device_; }

 private:
  friend class CaptureDraws;
  // A generator the captured work may draw from.
  struct RandomStream {
    Generator* generator = nullptr;
    uint64_t seed = 0;      // its seed at capture_begin (a replay refuses another)
    void* base = nullptr;   // 8 bytes of device memory: the offset the captured kernels add
    uint64_t drawn = 0;     // Philox blocks the captured work draws per replay
  };
  void abandon() noexcept;
  void free_random_streams() noexcept;
  int device_;
  void* handle_ = nullptr;  // the backend's capture or graph
  bool capturing_ = false;
  uint64_t pool_ = 0;
  std::vector<Generator*> registered_;
  std::vector<RandomStream> random_;
};

/// Whether the calling thread is capturing a graph now.
bool is_capturing();
/// The device whose work the calling thread is capturing now, or -1.
int capturing_device();

/// Captures fn() into `graph`: capture_begin(), fn(), capture_end(). When fn throws (a
/// GraphCaptureError among others), the capture is abandoned, the graph stays empty and the
/// exception goes on.
template <typename F>
void capture(Graph& graph, F&& fn) {
  graph.capture_begin();
  try {
    std::forward<F>(fn)();
  } catch (...) {
    graph.reset();
    throw;
  }
  graph.capture_end();
}

}  // namespace precis::cuda
