// The profiler on a GPU (ops/profiler.h): a few CUDA training steps of a small conv/linear model
// profiled on the device's clock. The per-op device times must add up to at least 90 % of the
// steps' device time, measured with the same kind of events around the steps as a whole (and to
// no more than it: on one stream the scopes never overlap), every entry must be on the device
// clock, and a step whose batch is on the device must copy nothing to or from the host. Tagged
// [cuda]: tests/gpu/run.sh runs it on the GPU machine.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "autograd/engine.h"
#include "core/rng.h"
#include "core/synchronize.h"
#include "ops/device_timer.h"
#include "ops/float32_precision.h"
#include "ops/functional.h"
#include "ops/profiler.h"
#include "optim/sgd.h"
#include "tensor/factory.h"
#include "tests/support/profiler_testing.h"
#include "tests/support/tensor_testing.h"

using namespace precis;
using precis::testing::find_entry;
using profiler::Clock;
using profiler::Direction;

namespace {

}  // namespace

TEST_CASE("profiler on CUDA: per-op device times add up to >= 90% of the training steps' device time",
          "[cuda][ops][profiler]") {
  PRECIS_REQUIRE_CUDA();
  const Device dev = Device::cuda(0);
  manual_seed(7);
  const Float32PrecisionGuard ieee(Float32Precision::ieee);  // FMA math, as measured below; TF32 is ~2x faster
  // Convolutions over a (64, 16, 128, 128) batch in f32 (~270 GFLOP a step, FMA math: ~10 ms on an
  // H200): every kernel takes longer than the host needs to launch the next, so the host runs
  // ahead and the device sets the pace, as in a real training step. (On a tiny model the device
  // would idle between kernels, waiting for the host: time no per-op clock can hold.)
  auto param = [&](const Shape& shape, double scale) { return mul(randn(shape), scale).to(dev).requires_grad_(); };
  const Tensor w1 = param({64, 16, 3, 3}, 0.1), b1 = param({64}, 0.1);
  const Tensor w2 = param({64, 64, 3, 3}, 0.05), b2 = param({64}, 0.1);
  const Tensor w3 = param({10, 64}, 0.1), b3 = param({10}, 0.1);
  const Tensor x = randn({64, 16, 128, 128}).to(dev);
  const Tensor y = randint(0, 10, {64}).to(dev);
  optim::SGD opt({w1, b1, w2, b2, w3, b3}, {.lr = 1e-3, .momentum = 0.9});
  auto step = [&] {
    opt.zero_grad();
    const Tensor h1 = relu(conv2d(x, w1, b1, {1, 1}, {1, 1}));
    const Tensor h2 = relu(conv2d(h1, w2, b2, {1, 1}, {1, 1}));
    cross_entropy(linear(mean(h2, {2, 3}), w3, b3), y).backward();
    opt.step();
  };
  for (int i = 0; i < 2; ++i) step();  // warm-up: cuDNN plans, the allocator's cache, momentum buffers
  cuda::synchronize(0);

  profiler::DeviceTimer* timer = profiler::device_timer(DeviceType::cuda);
  REQUIRE(timer != nullptr);  // registered by the CUDA backend at start-up
  const bool was_on = profiler::enabled();
  profiler::reset();
  profiler::set_enabled(true);
  const int steps = 4;
  const profiler::DeviceTimer::Mark start = timer->record(0);
  for (int i = 0; i < steps; ++i) step();  // back to back, as a training loop runs them
  const profiler::DeviceTimer::Mark stop = timer->record(0);
  profiler::set_enabled(false);  // waits for the device
  const double steps_ms = timer->elapsed_ms(start, stop);
  timer->release(start);
  timer->release(stop);
  const std::vector<profiler::Entry> all = profiler::entries();
  const std::string text = profiler::report(steps);
  const int64_t lost = profiler::lost_device_timings();
  profiler::reset();
  profiler::set_enabled(was_on);

  double device_ms = 0, wall_ms = 0;
  for (const profiler::Entry& e : all) (e.clock == Clock::device ? device_ms : wall_ms) += e.total_ms;
  INFO(text << "\nthe " << steps << " steps' device time (events around them): " << steps_ms
            << " ms; device entries: " << device_ms << " ms; wall-clock entries: " << wall_ms << " ms");
  REQUIRE(steps_ms > 0);
  CHECK(lost == 0);
  CHECK(device_ms >= 0.9 * steps_ms);
  CHECK(device_ms <= 1.01 * steps_ms + 0.05);
  // Every kernel and backward node of a CUDA step runs on the device, so none takes the wall clock.
  CHECK(wall_ms == 0);
  for (const Direction d : {Direction::forward, Direction::backward}) {
    const profiler::Entry* conv = find_entry(all, "conv2d", d);
    REQUIRE(conv != nullptr);
    CHECK(conv->clock == Clock::device);
    CHECK(conv->calls == 2 * steps);
  }
  // The batch is on the device: nothing is copied to or from the host (cross_entropy reads no
  // targets back, ops/loss.cpp), so nothing waits for the queue mid-step.
  CHECK(find_entry(all, "to_device", Direction::forward) == nullptr);
}
