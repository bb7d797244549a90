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
// A capture refuses, with GraphCaptureError, work a graph cannot hold, before it is issued: any
// host wait for the device (item(), a pageable copy, synchronize) and any random draw (dropout's
// masks would repeat on every replay). Work on the CPU inside the region runs once, during the
// capture, and is not replayed.
#include <cstdint>
#include <utility>

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
  /// StateError when nothing was captured.
  void replay();
  /// Frees the captured graph and its pool; the graph can capture again.
  void reset();
  /// Whether a finished capture can be replayed.
  bool captured() const { return handle_ != nullptr && !capturing_; }
  /// The device the graph belongs to.
  int device() const { return device_; }

 private:
  void abandon() noexcept;
  int device_;
  void* handle_ = nullptr;  // the backend's capture or graph
  bool capturing_ = false;
  uint64_t pool_ = 0;
};

/// Whether the calling thread is capturing a graph now.
bool is_capturing();

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
