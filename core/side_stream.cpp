#include "core/side_stream.h"

namespace precis {

namespace {

// Releases an event when the scope ends, unless it was handed on.
struct EventOwner {
  StreamOrdering& device;
  EventHandle event = nullptr;
  ~EventOwner() {
    if (event != nullptr) device.release(event);
  }
  EventHandle take() {
    EventHandle e = event;
    event = nullptr;
    return e;
  }
};

}  // namespace

EventHandle enqueue_on_side_stream(StreamOrdering& device, StreamHandle producer, StreamHandle side,
                                   const std::vector<SideBuffer>& buffers,
                                   const std::function<void(StreamHandle)>& work) {
  if (producer != side) {
    // The wait is queued before the event goes: a released event's recorded work still orders it.
    EventOwner ready{device, device.record(producer)};
    device.wait(side, ready.event);
  }
  // Announced before the work is queued: if a buffer's tensor dies right after this call, its
  // block already waits for the side stream.
  for (const SideBuffer& b : buffers)
    if (b.data != nullptr) device.record_stream(b.data, b.owner, side);
  work(side);
  EventOwner done{device, device.record(side)};
  return done.take();
}

}  // namespace precis
