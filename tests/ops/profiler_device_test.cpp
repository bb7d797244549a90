// The profiler's device clock (ops/profiler.h, ops/device_timer.h) with a fake device timer, so
// that the bookkeeping runs without a GPU: a scope on a device takes the device's time between its
// two marks; pending pairs are resolved in order, lazily, never with a wait at a scope's close;
// nested scopes record one pair; CPU scopes keep the wall clock; a device that cannot record falls
// back to the wall clock; reset drops pending marks; kernel calls dispatched to a device open a
// device scope on their operands' device.
#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "ops/device_timer.h"
#include "ops/functional.h"
#include "ops/contracts/kernels.h"
#include "ops/op_table.h"
#include "ops/profiler.h"
#include "tensor/factory.h"

using namespace precis;
using profiler::Clock;
using profiler::Direction;

namespace {

// A fake device: marks are numbered in the order they are recorded; each takes the device clock
// `now_ms` has when it is recorded, and the device has passed marks [0, passed).
class FakeTimer final : public profiler::DeviceTimer {
 public:
  double now_ms = 0;
  Mark passed = 0;
  bool fail_record = false;
  std::vector<double> at;            // each mark's time
  std::vector<int> devices;          // each mark's device
  std::vector<Mark> resolved_stops;  // the stop marks elapsed_ms was asked for, in order
  int waits = 0;                     // elapsed_ms calls on a mark not yet passed
  int released = 0;

  int current_index() override { return 3; }
  Mark record(int index) override {
    if (fail_record) throw DeviceError("fake device: cannot record a mark");
    at.push_back(now_ms);
    devices.push_back(index);
    return at.size() - 1;
  }
  bool done(Mark mark) noexcept override { return mark < passed; }
  double elapsed_ms(Mark start, Mark stop) noexcept override {
    if (stop >= passed) {
      ++waits;
      passed = stop + 1;
    }
    resolved_stops.push_back(stop);
    return at[stop] - at[start];
  }
  void release(Mark) noexcept override { ++released; }
};

// The fake as CUDA's clock, with the profiler on from a reset, while alive. init_backends() first:
// the CUDA backend registers its own clock there, which must not replace the fake mid-test.
struct FakeDevice {
  FakeTimer timer;
  profiler::DeviceTimer* previous;
  FakeDevice() {
    init_backends();
    previous = profiler::set_device_timer(DeviceType::cuda, &timer);
    profiler::reset();
    profiler::set_enabled(true);
  }
  ~FakeDevice() {
    profiler::set_enabled(false);
    profiler::reset();
    profiler::set_device_timer(DeviceType::cuda, previous);
  }
};

// Not on a temporary list: the pointer would outlive it.
const profiler::Entry* find(std::vector<profiler::Entry>&& all, const std::string& name, Clock clock) = delete;
const profiler::Entry* find(const std::vector<profiler::Entry>& all, const std::string& name, Clock clock) {
  for (const profiler::Entry& e : all)
    if (e.name == name && e.clock == clock && e.direction == Direction::forward) return &e;
  return nullptr;
}

// One device scope of `op` during which the fake device's clock advances by `ms`.
void device_call(FakeTimer& t, OpId op, double ms, int index = 0) {
  profiler::Scope scope(op, DeviceType::cuda, index);
  t.now_ms += ms;
}

void noop_unary(const Tensor&, const Tensor&, double) {}

}  // namespace

TEST_CASE("profiler device clock: an entry gets the device's time between its marks, resolved in order when read",
          "[ops][profiler]") {
  FakeDevice f;
  device_call(f.timer, OpId::matmul, 2.5);
  device_call(f.timer, OpId::add, 1.5);
  device_call(f.timer, OpId::matmul, 1.0);
  // Closing a scope waits for nothing and reads nothing back: the pairs stay pending.
  CHECK(f.timer.waits == 0);
  CHECK(f.timer.resolved_stops.empty());
  CHECK(f.timer.at.size() == 6);

  const std::vector<profiler::Entry> all = profiler::entries();
  CHECK(f.timer.resolved_stops == std::vector<profiler::DeviceTimer::Mark>{1, 3, 5});
  CHECK(f.timer.released == 6);
  const profiler::Entry* matmul = find(all, "matmul", Clock::device);
  const profiler::Entry* add = find(all, "add", Clock::device);
  REQUIRE(matmul != nullptr);
  REQUIRE(add != nullptr);
  CHECK(matmul->calls == 2);
  CHECK(matmul->total_ms == Approx(3.5));
  CHECK(add->calls == 1);
  CHECK(add->total_ms == Approx(1.5));
  CHECK(find(all, "matmul", Clock::wall) == nullptr);
  CHECK(profiler::lost_device_timings() == 0);

  // Reading again resolves nothing twice.
  CHECK(profiler::entries().size() == all.size());
  CHECK(f.timer.resolved_stops.size() == 3);

  const std::string text = profiler::report(1);
  INFO(text);
  CHECK(text.find("| matmul | forward | 2 | 3.500 | device |") != std::string::npos);
  CHECK(text.find("device clock 5.0 ms") != std::string::npos);
}

TEST_CASE("profiler device clock: once many pairs are pending, those the device passed are resolved without waiting",
          "[ops][profiler]") {
  FakeDevice f;
  // The device passes nothing: however many pairs pile up, a close never waits for one.
  const int n = 3000;
  for (int i = 0; i < n; ++i) device_call(f.timer, OpId::add, 0.25);
  CHECK(f.timer.waits == 0);
  CHECK(f.timer.resolved_stops.empty());
  // The device catches up; the next close resolves every passed pair, oldest first, and stops at
  // its own (not passed yet).
  f.timer.passed = f.timer.at.size();
  device_call(f.timer, OpId::add, 0.25);
  CHECK(f.timer.waits == 0);
  REQUIRE(f.timer.resolved_stops.size() == static_cast<size_t>(n));
  bool ordered = true;
  for (size_t i = 0; i < f.timer.resolved_stops.size(); ++i)
    ordered = ordered && f.timer.resolved_stops[i] == 2 * i + 1;
  CHECK(ordered);
  // Turning the profiler off waits for the last one, so the totals are complete.
  profiler::set_enabled(false);
  CHECK(f.timer.waits == 1);
  const std::vector<profiler::Entry> all = profiler::entries();
  const profiler::Entry* add = find(all, "add", Clock::device);
  REQUIRE(add != nullptr);
  CHECK(add->calls == n + 1);
  CHECK(add->total_ms == Approx(0.25 * (n + 1)));
}

TEST_CASE("profiler device clock: nested scopes record one pair, on the outermost scope's clock", "[ops][profiler]") {
  FakeDevice f;
  {
    profiler::Scope outer(OpId::conv2d, DeviceType::cuda, 1);
    f.timer.now_ms += 1.0;
    { profiler::Scope inner(OpId::copy, DeviceType::cuda, 1); }
    { profiler::Scope host(OpId::add); }
    f.timer.now_ms += 1.0;
  }
  CHECK(f.timer.at.size() == 2);
  CHECK(f.timer.devices == std::vector<int>{1, 1});
  {
    // A CPU scope outermost: its nested device scope records no marks.
    profiler::Scope outer(OpId::mul);
    { profiler::Scope inner(OpId::copy, DeviceType::cuda, 0); }
  }
  CHECK(f.timer.at.size() == 2);
  const std::vector<profiler::Entry> all = profiler::entries();
  const profiler::Entry* conv = find(all, "conv2d", Clock::device);
  REQUIRE(conv != nullptr);
  CHECK(conv->calls == 1);
  CHECK(conv->total_ms == Approx(2.0));
  CHECK(find(all, "copy", Clock::device) == nullptr);
  CHECK(find(all, "copy", Clock::wall) == nullptr);
  CHECK(find(all, "add", Clock::wall) == nullptr);
  const profiler::Entry* mul = find(all, "mul", Clock::wall);
  REQUIRE(mul != nullptr);
  CHECK(mul->calls == 1);
}

TEST_CASE("profiler device clock: CPU scopes and CPU ops keep the wall clock", "[ops][profiler]") {
  FakeDevice f;
  {
    profiler::Scope scope(OpId::exp);
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
  }
  (void)add(randn({64}), randn({64}));
  CHECK(f.timer.at.empty());
  const std::vector<profiler::Entry> all = profiler::entries();
  const profiler::Entry* e = find(all, "exp", Clock::wall);
  REQUIRE(e != nullptr);
  CHECK(e->total_ms >= 3.0);
  CHECK(find(all, "add", Clock::wall) != nullptr);
  CHECK(find(all, "add", Clock::device) == nullptr);
}

TEST_CASE("profiler device clock: no timer, or a device that cannot record, gives the wall clock", "[ops][profiler]") {
  FakeDevice f;
  f.timer.fail_record = true;
  device_call(f.timer, OpId::div, 1.0);
  f.timer.fail_record = false;
  profiler::set_device_timer(DeviceType::cuda, nullptr);
  device_call(f.timer, OpId::sub, 1.0);
  profiler::set_device_timer(DeviceType::cuda, &f.timer);
  CHECK(f.timer.at.empty());
  const std::vector<profiler::Entry> all = profiler::entries();
  CHECK(find(all, "div", Clock::wall) != nullptr);
  CHECK(find(all, "sub", Clock::wall) != nullptr);
  CHECK(find(all, "div", Clock::device) == nullptr);
}

TEST_CASE("profiler device clock: reset drops pending pairs and hands their marks back", "[ops][profiler]") {
  FakeDevice f;
  device_call(f.timer, OpId::add, 1.0);
  device_call(f.timer, OpId::mul, 1.0);
  profiler::reset();
  CHECK(f.timer.released == 4);
  CHECK(f.timer.resolved_stops.empty());
  CHECK(profiler::entries().empty());
}

TEST_CASE("profiler device clock: front-end FLOPs join the device entry of the op's kernel calls", "[ops][profiler]") {
  FakeDevice f;
  profiler::add_flops(OpId::matmul, 4e9);  // reported by the front-end, outside any scope
  device_call(f.timer, OpId::matmul, 2.0);
  const std::vector<profiler::Entry> all = profiler::entries();
  const profiler::Entry* e = find(all, "matmul", Clock::device);
  REQUIRE(e != nullptr);
  CHECK(e->flops == 4e9);
  CHECK(e->total_ms == Approx(2.0));
}

TEST_CASE("profiler device clock: a kernel dispatched to a device is timed on its first tensor operand's device",
          "[ops][profiler]") {
  FakeDevice f;
  // The hook in KernelRef, called with host tensors: the dispatch type decides the clock, the
  // operand's device index where the marks go (0 here); no operand with a device: the current one.
  const Tensor out = empty({2}), x = zeros({2});
  KernelRef<kernels::UnaryKernel>(&noop_unary, OpId::neg, DeviceType::cuda)(out, x, 0.0);
  KernelRef<kernels::UnaryKernel>(&noop_unary, OpId::abs, DeviceType::cuda)(Tensor(), Tensor(), 0.0);
  KernelRef<kernels::UnaryKernel>(&noop_unary, OpId::relu, DeviceType::cpu)(out, x, 0.0);
  CHECK(f.timer.devices == std::vector<int>{0, 0, 3, 3});
  const std::vector<profiler::Entry> all = profiler::entries();
  CHECK(find(all, "neg", Clock::device) != nullptr);
  CHECK(find(all, "abs", Clock::device) != nullptr);
  CHECK(find(all, "relu", Clock::wall) != nullptr);
}
