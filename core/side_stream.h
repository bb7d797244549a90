#pragma once
// Ordering of work queued on a side stream (a device's communication or copy stream) against the
// stream that produced its operands, written against an abstract device so that the CPU tests
// check it with a simulated one (tests/core/side_stream_test.cpp). The NCCL process group
// (dist/cuda/nccl_process_group.cpp) runs every collective through it on the device's
// communication stream.
//
// The protocol, as PyTorch's process groups follow it:
//   1. an event recorded on the producer stream, and the side stream waits for it: the side work
//      reads what every kernel queued so far wrote (no host wait);
//   2. every buffer the side work touches is announced to its caching allocator as used on the
//      side stream (record_stream), so a block freed while the side work is queued is not handed
//      to new work before the side stream has passed that point;
//   3. the side work is queued, and an event recorded on the side stream after it ("done") is
//      returned: a consumer stream waits for it before it reads the result (Work::wait()).
#include <functional>
#include <vector>

#include "core/device_caching_allocator.h"

namespace precis {

/// What enqueue_on_side_stream needs from a device: events and the allocators' record_stream.
class StreamOrdering {
 public:
  virtual ~StreamOrdering() = default;
  /// A new event capturing the work queued on `stream` so far.
  virtual EventHandle record(StreamHandle stream) = 0;
  /// Makes work queued later on `waiter` wait until `event` has completed (no host wait).
  virtual void wait(StreamHandle waiter, EventHandle event) = 0;
  /// Destroys an event (its recorded work may still be queued). Never throws.
  virtual void release(EventHandle event) noexcept = 0;
  /// Tells the allocator that owns `data` (`owner` names it: a device index, or -1 for pinned
  /// host memory) that its block is used by work queued on `stream` from now on.
  virtual void record_stream(const void* data, int owner, StreamHandle stream) = 0;
};

/// A buffer that side work reads or writes: its address and the allocator that owns it (see
/// StreamOrdering::record_stream).
struct SideBuffer {
  const void* data = nullptr;  ///< any address inside the block; null buffers are skipped
  int owner = 0;               ///< the allocator that owns it
};

/// Queues `work(side)` on `side` so that it runs after everything queued on `producer` so far,
/// announcing each of `buffers` as used on `side` first; returns an event recorded on `side`
/// after the work, which the caller owns (release it) and which consumers wait for. When
/// `producer` is `side` no event is needed before the work. Throws what the device or `work`
/// throws; no event is left behind then.
EventHandle enqueue_on_side_stream(StreamOrdering& device, StreamHandle producer, StreamHandle side,
                                   const std::vector<SideBuffer>& buffers,
                                   const std::function<void(StreamHandle)>& work);

}  // namespace precis
