#pragma once
// The op profiler and the FLOP counter: where a training step's time and arithmetic go, per op and
// per direction (benchmarks/README.md, "Profiling a step").
//
// Two hooks feed it, so that no op has to be instrumented by hand: every op-table kernel call
// (KernelRef::operator(), ops/op_table.h) and every backward node the autograd engine runs
// (autograd/engine.cpp). Both cost one relaxed atomic load when the profiler is off. A checkpointed
// region's node is the exception to the second: its recomputed forward's kernel calls are timed
// one by one as "recompute", and its inner backward's nodes as "backward" (autograd/checkpoint.h).
//
// Time is inclusive and counted once: a scope opened inside another on the same thread
// (a kernel that calls another through the table, the kernels a backward node runs) adds its time
// to the outermost scope, on the outermost scope's clock. So a forward entry is the time of that
// op's kernel calls, and a backward entry the time of the backward nodes recorded by that op (the
// kernels they run included); on one clock and one thread (one stream) the entries never overlap.
// Time outside every scope (op front-ends: checks, output allocation, autograd recording) is in
// no entry.
//
// Two clocks. A scope on the CPU takes the wall clock. A scope that runs work on a device whose
// backend registered a DeviceTimer (ops/device_timer.h; CUDA does) takes the device's clock: a
// mark (a CUDA event) is recorded on the device's current stream when the outermost scope opens
// and another when it closes, and the entry gets the time the device took between them, i.e. the
// time it spent on the work the scope queued. A host clock there would time the launches, and
// whatever waits for the device (a device-to-host copy, a synchronisation) would absorb the time
// of everything queued before it. The marks are resolved lazily, in the order they were recorded:
// those the device has passed once a thousand pairs are pending, and all of them (waiting for the
// device once) when entries() or report() is read, the profiler is turned off or the process
// exits (before the device runtime's teardown); never with a host wait per op. The device entries
// then add up to the time the device was busy with the profiled work; what they leave of a step's
// device time is where the device waited for the host.
//
// Why the shares in report() are of the wall time, for both clocks: turning the profiler off first
// waits for the device work it timed, so the wall time covers the queued work, and a GPU step that
// ends with a wait for its stream (precis-bench's do) lasts about as long on the wall clock as on the
// device's. The device rows' share of it is then the share of the step the device was busy, the
// rest the time it idled waiting for the host. A separate device span would need marks at every
// set_enabled and reset on devices the profile has not used yet, and would say the same.
//
// FLOPs are nominal: 2·M·N·K per matrix product (matmul, linear, conv2d forward and each of
// conv2d's input and weight gradients), counted by those ops' front-ends; the other ops count none.
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "core/device.h"
#include "ops/device_timer.h"

namespace precis {
enum class OpId : uint16_t;
}  // namespace precis

namespace precis::profiler {

/// Whether an entry's time was spent in the forward computation, in the autograd engine's
/// backward pass, or in a checkpointed region's forward run again inside backward
/// (autograd/checkpoint.h). "forward" is everything outside backward, the optimizer's step
/// kernels included.
enum class Direction : uint8_t {
  forward,    ///< outside the engine's backward pass
  backward,   ///< inside it
  recompute,  ///< a checkpointed region's recomputed forward (its backward nodes are "backward")
};
inline constexpr int kNumDirections = static_cast<int>(Direction::recompute) + 1;  ///< recompute is the last
/// "forward", "backward" or "recompute".
const char* direction_name(Direction d);

/// Which clock an entry's time was read from (see the file comment).
enum class Clock : uint8_t {
  wall,    ///< the host's steady clock around the calls (CPU work, or a device with no timer)
  device,  ///< the device's own clock between marks recorded in its queue (CUDA events)
};
/// "wall" or "device".
const char* clock_name(Clock c);

namespace detail {
extern std::atomic<bool> g_timing;    // the profiler records
extern std::atomic<bool> g_counting;  // FLOPs are counted: a FlopCounter is alive or the profiler records
}  // namespace detail

/// Whether the profiler records (turned on by PRECIS_PROFILE=1 in the environment at start-up,
/// or by set_enabled(true)). One relaxed load: cheap enough for every kernel call.
inline bool enabled() noexcept { return detail::g_timing.load(std::memory_order_relaxed); }

/// Whether matmul, linear and conv2d should report their FLOPs (add_flops).
inline bool counting_flops() noexcept { return detail::g_counting.load(std::memory_order_relaxed); }

/// Turns recording on or off. Turning it on starts the wall clock the shares refer to (when it was
/// off); turning it off stops it. Entries recorded so far are kept (reset() drops them).
void set_enabled(bool on);

/// Drops every entry and restarts the wall clock (stopped when the profiler is off).
void reset();

/// One row of the profile.
struct Entry {
  /// The op-table row, or for a backward node without one (AccumulateGrad, a custom
  /// autograd::Function) the node's name.
  std::string name;
  Direction direction = Direction::forward;  ///< where the time was spent
  Clock clock = Clock::wall;  ///< what total_ms was read from; an op timed on both clocks has two entries
  int64_t calls = 0;     ///< kernel calls (forward) or backward nodes run (backward)
  double total_ms = 0;   ///< time inside those calls on `clock`, counted once (see the file comment)
  double flops = 0;      ///< nominal FLOPs of the calls (0 for the ops that count none)
};

/// The entries recorded since the last reset, longest total time first. Resolves the pending
/// device marks first (waiting for the device to pass them).
std::vector<Entry> entries();

/// Device timings that could not be read since the last reset (the device reported an error for
/// the marks, e.g. after a fault or while the process exits): those calls are counted, their time
/// is missing.
int64_t lost_device_timings();

/// Wall-clock milliseconds the profiler has been on since the last reset (or since it was turned on).
double wall_ms();

/// The profile as a markdown table, longest first: op, direction, clock, calls, total ms, share of
/// the wall time, GFLOP and GFLOP/s, then a line with the sum (per clock when both appear) and the
/// wall time. `steps` > 0 adds a column of milliseconds per step (total / steps).
std::string report(int steps = 0);

/// Times one call under an op-table row, or under a name (a backward node with no row). Open it
/// only when enabled(); op-table kernel calls and the engine's backward nodes open one themselves.
/// `device` and `index` say where the call runs its work: a device type with a registered
/// DeviceTimer takes the device clock, on device `index` (-1: the thread's current device of that
/// type); the CPU, or a device that cannot record a mark, the wall clock.
class Scope {
 public:
  /// Starts timing a call of `op`.
  explicit Scope(OpId op, DeviceType device = DeviceType::cpu, int index = -1) noexcept;
  /// Starts timing a call recorded under `name`.
  explicit Scope(std::string name, DeviceType device = DeviceType::cpu, int index = -1);
  /// Stops timing and records the call (when it is the thread's outermost scope).
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  void open(DeviceType device, int index) noexcept;
  OpId op_;
  std::string name_;  // empty: op_ names the entry
  bool outermost_ = false;
  int64_t start_ns_ = 0;
  DeviceTimer* timer_ = nullptr;  // the device clock when it records the scope; nullptr: the wall clock
  DeviceTimer::Mark start_mark_ = 0;
  int index_ = -1;  // the device the marks are recorded on
};

/// Marks this thread's scopes with `direction` while alive: the autograd engine opens a backward
/// one per pass, a checkpointed region a recompute one around its recomputed forward.
class DirectionScope {
 public:
  /// Marks the thread's scopes with `direction`.
  explicit DirectionScope(Direction direction) noexcept;
  /// Restores the direction before it.
  ~DirectionScope();
  DirectionScope(const DirectionScope&) = delete;
  DirectionScope& operator=(const DirectionScope&) = delete;

 private:
  Direction previous_;
};

/// Reports `flops` nominal FLOPs done by `op`'s call that follows (call it only when
/// counting_flops()): they go to every live FlopCounter and, when the profiler records, to the
/// entry the call's time goes to (the enclosing backward node's, in backward).
void add_flops(OpId op, double flops);

/// Counts the nominal FLOPs of the matmul, linear and conv2d calls (forward and backward) made on
/// any thread while it is alive, e.g. around one training step:
///
///   profiler::FlopCounter counter;
///   step();
///   double per_step = counter.flops();
class FlopCounter {
 public:
  /// Starts counting (counters nest: each sees every FLOP reported while it is alive).
  FlopCounter();
  /// Stops counting when it was the last live counter and the profiler is off.
  ~FlopCounter();
  FlopCounter(const FlopCounter&) = delete;
  FlopCounter& operator=(const FlopCounter&) = delete;
  /// FLOPs counted since this counter was created.
  double flops() const;

 private:
  double start_;
};

}  // namespace precis::profiler
