// enqueue_on_side_stream (core/side_stream.h), the ordering the NCCL process group uses on the
// communication stream, on a simulated device: streams are queues of tasks, events are positions
// in a queue, and the simulator runs whichever stream can make progress, side streams first (the
// schedule a GPU may well pick). The device caching allocator runs over the same simulator, so the
// test also sees that a block freed while a collective is queued is not reused before it ran.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/device_caching_allocator.h"
#include "core/error.h"
#include "core/side_stream.h"

using namespace precis;

namespace {

StreamHandle stream(uintptr_t id) { return reinterpret_cast<StreamHandle>(id); }
const StreamHandle kCompute = stream(1), kComm = stream(3);

struct Sim {
  struct Task {
    std::function<void()> fn;
    StreamHandle dep_stream = nullptr;  // runs only when dep_stream has run dep_count tasks
    size_t dep_count = 0;
  };
  struct Ev {
    StreamHandle stream;
    size_t pos;
    bool released = false;
  };
  std::map<StreamHandle, std::vector<Task>> queues;
  std::map<StreamHandle, size_t> ran;
  std::vector<Ev> events;
  std::vector<std::string> log;

  void enqueue(StreamHandle s, std::function<void()> fn) { queues[s].push_back({std::move(fn)}); }
  EventHandle record(StreamHandle s) {
    events.push_back({s, queues[s].size()});
    return reinterpret_cast<EventHandle>(events.size());
  }
  Ev& ev(EventHandle e) { return events.at(reinterpret_cast<size_t>(e) - 1); }
  void wait(StreamHandle s, EventHandle e) { queues[s].push_back({[] {}, ev(e).stream, ev(e).pos}); }
  bool done(EventHandle e) { return ran[ev(e).stream] >= ev(e).pos; }
  // Runs one task of the first stream (in `order`) whose head can run; false when none can.
  bool step(const std::vector<StreamHandle>& order) {
    for (StreamHandle s : order) {
      auto& q = queues[s];
      size_t& r = ran[s];
      if (r == q.size()) continue;
      const Task& t = q[r];
      if (t.dep_stream != nullptr && ran[t.dep_stream] < t.dep_count) continue;
      t.fn();
      ++r;
      return true;
    }
    return false;
  }
  void run_all(const std::vector<StreamHandle>& order) {
    while (step(order)) {
    }
  }
};

// The allocator's view of the simulated device (memory is real, segments are never short).
class SimMemory final : public DeviceMemory {
 public:
  SimMemory(Sim& sim, StreamHandle& current) : sim_(sim), current_(current) {}
  Device device() const override { return Device::cuda(0); }
  void* malloc(size_t bytes) override { return std::malloc(bytes); }
  void free(void* ptr, size_t) override { std::free(ptr); }
  StreamHandle current_stream() override { return current_; }
  EventHandle record_event(StreamHandle s) override { return sim_.record(s); }
  bool query_event(EventHandle e) override { return sim_.done(e); }
  void synchronize_event(EventHandle e) override {
    while (!sim_.done(e) && sim_.step({kComm, kCompute})) {
    }
  }
  void destroy_event(EventHandle e) noexcept override { sim_.ev(e).released = true; }
  void synchronize_device() override { sim_.run_all({kComm, kCompute}); }
  void copy_to_host(void*, const void*, size_t) override {}

 private:
  Sim& sim_;
  StreamHandle& current_;
};

class SimOrdering final : public StreamOrdering {
 public:
  SimOrdering(Sim& sim, DeviceCachingAllocator* alloc) : sim_(sim), alloc_(alloc) {}
  EventHandle record(StreamHandle s) override {
    sim_.log.push_back("record");
    return sim_.record(s);
  }
  void wait(StreamHandle s, EventHandle e) override {
    sim_.log.push_back("wait");
    sim_.wait(s, e);
  }
  void release(EventHandle e) noexcept override { sim_.ev(e).released = true; }
  void record_stream(const void* data, int owner, StreamHandle s) override {
    sim_.log.push_back("record_stream " + std::to_string(owner));
    if (alloc_ != nullptr) alloc_->record_stream(data, s);
  }

 private:
  Sim& sim_;
  DeviceCachingAllocator* alloc_;
};

}  // namespace

TEST_CASE("side stream: the collective reads the producer's data and the consumer reads the collective's",
          "[core][streams]") {
  Sim sim;
  SimOrdering ordering(sim, nullptr);
  int buffer = 0, seen_by_collective = -1, seen_by_consumer = -1;
  sim.enqueue(kCompute, [&] { buffer = 21; });  // the producer (e.g. the backward pass)
  EventHandle done = enqueue_on_side_stream(ordering, kCompute, kComm, {{&buffer, 0}}, [&](StreamHandle s) {
    sim.enqueue(s, [&] {
      seen_by_collective = buffer;
      buffer *= 2;
    });
  });
  sim.wait(kCompute, done);  // Work::wait()
  sim.enqueue(kCompute, [&] { seen_by_consumer = buffer; });
  // The side stream first whenever it can run: without the producer's event it would read 0.
  sim.run_all({kComm, kCompute});
  CHECK(seen_by_collective == 21);
  CHECK(seen_by_consumer == 42);
  CHECK(sim.done(done));
  // Exactly one event is left to the caller (done); the producer's event was released.
  int unreleased = 0;
  for (const auto& e : sim.events) unreleased += e.released ? 0 : 1;
  CHECK(unreleased == 1);
  CHECK(sim.log == std::vector<std::string>{"record", "wait", "record_stream 0", "record"});
}

TEST_CASE("side stream: work on the producer's own stream needs no event before it", "[core][streams]") {
  Sim sim;
  SimOrdering ordering(sim, nullptr);
  int x = 0;
  EventHandle done = enqueue_on_side_stream(ordering, kCompute, kCompute, {{&x, 0}, {nullptr, 0}},
                                            [&](StreamHandle s) { sim.enqueue(s, [&] { x = 1; }); });
  CHECK(sim.log == std::vector<std::string>{"record_stream 0", "record"});
  CHECK_FALSE(sim.done(done));
  sim.run_all({kCompute});
  CHECK(x == 1);
  CHECK(sim.done(done));
}

TEST_CASE("side stream: a failing collective leaves no event behind", "[core][streams]") {
  Sim sim;
  SimOrdering ordering(sim, nullptr);
  int x = 0;
  CHECK_THROWS_AS(enqueue_on_side_stream(ordering, kCompute, kComm, {{&x, 0}},
                                         [](StreamHandle) { throw DeviceError("collective failed"); }),
                  DeviceError);
  REQUIRE(sim.events.size() == 1);  // the producer's event, released
  CHECK(sim.events[0].released);
}

TEST_CASE("side stream: a buffer freed while the collective is queued is not reused before it ran",
          "[core][streams][allocator]") {
  Sim sim;
  StreamHandle current = kCompute;
  DeviceCachingAllocator alloc(std::make_unique<SimMemory>(sim, current));
  SimOrdering ordering(sim, &alloc);
  auto* grads = static_cast<int*>(alloc.allocate(4096));
  sim.enqueue(kCompute, [&] { grads[0] = 5; });
  int reduced = -1;
  EventHandle done = enqueue_on_side_stream(ordering, kCompute, kComm, {{grads, 0}}, [&](StreamHandle s) {
    sim.enqueue(s, [&, grads] { reduced = grads[0] * 2; });
  });
  // The caller drops the bucket at once (a Work dropped unwaited; DDP's temporaries).
  alloc.deallocate(grads, 4096);
  CHECK(alloc.pending_event_count() == 1);
  // New work on the compute stream asks for the same size: it must get another block, or the
  // compute stream could overwrite the bucket before NCCL has read it.
  auto* other = static_cast<int*>(alloc.allocate(4096));
  CHECK(other != grads);
  sim.enqueue(kCompute, [&, other] { other[0] = 99; });
  sim.run_all({kCompute, kComm});  // compute first: the write must not land in the bucket
  CHECK(reduced == 10);
  CHECK(sim.done(done));
  // Once the collective has run the block comes back to the cache.
  auto* again = static_cast<int*>(alloc.allocate(4096));
  CHECK(alloc.pending_event_count() == 0);
  CHECK(again == grads);
  alloc.deallocate(again, 4096);
  alloc.deallocate(other, 4096);
  alloc.empty_cache();
}

TEST_CASE("side stream: without record_stream the freed bucket would be reused at once (the test's control)",
          "[core][streams][allocator]") {
  // Shows the previous case can fail: the same sequence with no record_stream hands the bucket's
  // block straight back to the compute stream.
  Sim sim;
  StreamHandle current = kCompute;
  DeviceCachingAllocator alloc(std::make_unique<SimMemory>(sim, current));
  SimOrdering ordering(sim, nullptr);  // does not tell the allocator
  auto* grads = static_cast<int*>(alloc.allocate(4096));
  EventHandle done = enqueue_on_side_stream(ordering, kCompute, kComm, {{grads, 0}}, [&](StreamHandle s) {
    sim.enqueue(s, [] {});
  });
  alloc.deallocate(grads, 4096);
  auto* other = static_cast<int*>(alloc.allocate(4096));
  CHECK(other == grads);
  sim.run_all({kComm, kCompute});
  CHECK(sim.done(done));
  alloc.deallocate(other, 4096);
  alloc.empty_cache();
}
