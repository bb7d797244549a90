// The profiler's device clock on CUDA (ops/device_timer.h): a mark is a CUDA event with timing
// on, recorded on the device's current stream (where the timed call queued its kernels), and an
// entry's time is cudaEventElapsedTime between the two events around the call once the device
// has passed them. Events come from per-device pools: creating one per call would cost more than
// many of the kernels it times.
#include <cuda_runtime_api.h>

#include <memory>
#include <mutex>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "core/sync_debug.h"
#include "ops/cuda/cuda_backend.h"
#include "ops/device_timer.h"

namespace precis::cuda {

namespace {

// A pooled event and its device; a Mark is its address.
struct TimedEvent {
  cudaEvent_t event = nullptr;
  int device = 0;
};

TimedEvent* as_event(profiler::DeviceTimer::Mark mark) { return reinterpret_cast<TimedEvent*>(mark); }

// A failed query leaves a non-sticky error behind; clear it, or the next checked CUDA call (an
// op's launch check) would report the profiler's error as its own.
void clear_error() { (void)cudaGetLastError(); }

class CudaTimer final : public profiler::DeviceTimer {
 public:
  int current_index() override { return current_device(); }

  Mark record(int index) override {
    cudaStream_t stream = current_stream(index);  // checks the index
    TimedEvent* e = take(index);
    const cudaError_t err = cudaEventRecord(e->event, stream);
    if (err != cudaSuccess) {
      release(reinterpret_cast<Mark>(e));
      clear_error();  // the scope falls back to the wall clock; the op must not inherit the error
      PRECIS_CUDA_CHECK(err, "recording the profiler's timing event on cuda:", index);
    }
    return reinterpret_cast<Mark>(e);
  }

  bool done(Mark mark) noexcept override {
    const cudaError_t err = cudaEventQuery(as_event(mark)->event);
    if (err == cudaSuccess) return true;
    clear_error();
    return err != cudaErrorNotReady;  // an error: nothing to wait for
  }

  double elapsed_ms(Mark start, Mark stop) noexcept override {
    float ms = 0;
    precis::detail::note_host_sync("the profiler reading a device timing", false);
    if (cudaEventSynchronize(as_event(stop)->event) != cudaSuccess ||
        cudaEventElapsedTime(&ms, as_event(start)->event, as_event(stop)->event) != cudaSuccess) {
      clear_error();
      return -1;
    }
    return static_cast<double>(ms);
  }

  void release(Mark mark) noexcept override {
    TimedEvent* e = as_event(mark);
    std::lock_guard<std::mutex> lock(mutex_);
    free_[static_cast<size_t>(e->device)].push_back(e);  // reserved when the event was made
  }

 private:
  // A free event of device `index`, or a new one.
  TimedEvent* take(int index) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<TimedEvent*>& free = free_[static_cast<size_t>(index)];
    if (!free.empty()) {
      TimedEvent* e = free.back();
      free.pop_back();
      return e;
    }
    auto e = std::make_unique<TimedEvent>();
    e->device = index;
    {
      DeviceGuard guard(index);
      const cudaError_t err = cudaEventCreateWithFlags(&e->event, cudaEventDefault);
      if (err != cudaSuccess) clear_error();  // as in record()
      PRECIS_CUDA_CHECK(err, "creating a timing event on cuda:", index, " for the profiler");
    }
    all_.push_back(std::move(e));
    // release() must not allocate: room for every event of the device in its free list.
    if (free.capacity() < all_.size()) free.reserve(2 * all_.size());
    return all_.back().get();
  }

  std::mutex mutex_;
  std::vector<TimedEvent*> free_[kMaxDevices];
  std::vector<std::unique_ptr<TimedEvent>> all_;  // owns every event made (never destroyed: below)
};

}  // namespace

void register_device_timer() {
  // Never destroyed: the profiler may hold marks until the process exits, when the CUDA runtime
  // may already be torn down (destroying an event then would fail or crash).
  static CudaTimer* const timer = new CudaTimer();
  profiler::set_device_timer(DeviceType::cuda, timer);
}

}  // namespace precis::cuda
