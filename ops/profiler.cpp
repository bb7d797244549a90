#include "ops/profiler.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <sstream>

#include "ops/op_table.h"

namespace precis::profiler {

namespace detail {
std::atomic<bool> g_timing{false};
std::atomic<bool> g_counting{false};
}  // namespace detail

namespace {

struct Stat {
  int64_t calls = 0;
  double ms = 0;
  double flops = 0;
};
// One op or name: a Stat per direction and clock, and the FLOPs its front-end reported outside
// any scope (they join the entry its kernel calls' time went to; see entries()).
struct Row {
  std::array<std::array<Stat, 2>, kNumDirections> stat;  // [Direction][Clock]
  std::array<double, kNumDirections> front_flops{};      // [Direction]
};

// A scope timed on a device, waiting for the device to pass its marks: its time goes to *ms.
struct PendingPair {
  double* ms;
  DeviceTimer* timer;
  DeviceTimer::Mark start, stop;
};
// Pending pairs beyond this many are resolved as the device passes them, at each scope's close
// (one non-blocking query of the oldest), so the marks (pooled events) are reused during a long
// profile instead of piling up; the rest wait for entries(), report() or set_enabled(false).
constexpr size_t kResolveAt = 1024;

// Everything below is guarded by g_mutex. Recording takes it once per outermost scope: only while
// the profiler is on, where one uncontended lock per kernel call is noise beside the kernel.
std::mutex g_mutex;
Row g_ops[kNumOps];
std::map<std::string, Row> g_named;  // node-based: a PendingPair's pointer into it stays valid
std::deque<PendingPair> g_pending;   // in the order the scopes closed
int64_t g_lost = 0;                  // pairs whose time the device could not give
double g_flop_total = 0;  // every FLOP reported while counting, for the FlopCounters
int g_counters = 0;       // live FlopCounters
int64_t g_wall_start_ns = 0, g_wall_stop_ns = 0;

// The scopes open on this thread: depth, direction, and the FLOPs reported inside the outermost.
struct ThreadState {
  int depth = 0;
  Direction direction = Direction::forward;
  double flops = 0;
};
thread_local ThreadState t_state;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void update_counting_locked() {
  detail::g_counting.store(detail::g_timing.load(std::memory_order_relaxed) || g_counters > 0,
                           std::memory_order_relaxed);
}

Row& row_locked(OpId op, const std::string& name) { return name.empty() ? g_ops[static_cast<int>(op)] : g_named[name]; }

Stat& stat_locked(OpId op, const std::string& name, Direction d, Clock c) {
  return row_locked(op, name).stat[static_cast<int>(d)][static_cast<int>(c)];
}

// Adds the oldest pending pair's device time to its entry (waiting for the device when it has not
// passed the pair yet) and hands its marks back.
void resolve_oldest_locked() {
  const PendingPair p = g_pending.front();
  g_pending.pop_front();
  const double ms = p.timer->elapsed_ms(p.start, p.stop);
  if (ms >= 0)
    *p.ms += ms;
  else
    ++g_lost;
  p.timer->release(p.start);
  p.timer->release(p.stop);
}

// Resolves the pairs the devices have passed, oldest first, stopping at the first one not yet
// passed: no host wait.
void resolve_passed_locked() {
  while (!g_pending.empty() && g_pending.front().timer->done(g_pending.front().stop)) resolve_oldest_locked();
}

// Resolves every pending pair, waiting for the devices to pass them.
void resolve_all_locked() {
  while (!g_pending.empty()) resolve_oldest_locked();
}

// Drops the pending pairs unresolved (reset): their marks go back to the pools.
void drop_pending_locked() {
  for (const PendingPair& p : g_pending) {
    p.timer->release(p.start);
    p.timer->release(p.stop);
  }
  g_pending.clear();
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// PRECIS_PROFILE=1 (any value but empty and "0"): record from start-up and print the profile to
// stderr when the process exits.
bool env_requests_profile() {
  const char* v = std::getenv("PRECIS_PROFILE");
  return v != nullptr && v[0] != '\0' && std::strcmp(v, "0") != 0;
}

void print_at_exit() {
  if (entries().empty()) return;  // e.g. a parent whose work ran in child processes
  std::fprintf(stderr, "\nprecis profile (PRECIS_PROFILE=1)\n\n%s", report().c_str());
  std::fflush(stderr);
}

// Resolves the pending device pairs at exit while the device runtime is still up. Registered
// after the first device mark was recorded, so after the runtime's first call registered its own
// teardown: exit handlers run in reverse order, so this one runs first (and print_at_exit, which
// registered earlier, later, finding nothing pending).
void resolve_at_exit() {
  std::lock_guard<std::mutex> lock(g_mutex);
  resolve_all_locked();
}

void resolve_at_exit_once() {
  static std::once_flag once;
  std::call_once(once, [] { std::atexit(resolve_at_exit); });
}

// Defined after every global above, so they are initialised before it runs and destroyed after
// the exit handler it registers.
[[maybe_unused]] const bool g_from_env = [] {
  if (!env_requests_profile()) return false;
  set_enabled(true);
  std::atexit(print_at_exit);
  return true;
}();

}  // namespace

const char* direction_name(Direction d) {
  return d == Direction::forward ? "forward" : d == Direction::backward ? "backward" : "recompute";
}

const char* clock_name(Clock c) { return c == Clock::wall ? "wall" : "device"; }

void set_enabled(bool on) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const bool was = detail::g_timing.load(std::memory_order_relaxed);
  if (on && !was) {
    // Restarting after a stop continues the clock: the wall time is the time spent on.
    const int64_t t = now_ns();
    g_wall_start_ns = g_wall_stop_ns == 0 ? t : t - (g_wall_stop_ns - g_wall_start_ns);
    g_wall_stop_ns = 0;
  } else if (!on && was) {
    // The device work timed so far is part of the profile: wait for it, so that the wall time
    // covers it (one wait per profile, not per op).
    resolve_all_locked();
    g_wall_stop_ns = now_ns();
  }
  detail::g_timing.store(on, std::memory_order_relaxed);
  update_counting_locked();
}

void reset() {
  std::lock_guard<std::mutex> lock(g_mutex);
  drop_pending_locked();  // before the rows their pointers lead into
  for (Row& r : g_ops) r = Row{};
  g_named.clear();
  g_lost = 0;
  const int64_t t = now_ns();
  g_wall_start_ns = t;
  g_wall_stop_ns = detail::g_timing.load(std::memory_order_relaxed) ? 0 : t;
}

int64_t lost_device_timings() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_lost;
}

double wall_ms() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_wall_start_ns == 0) return 0;
  return static_cast<double>((g_wall_stop_ns != 0 ? g_wall_stop_ns : now_ns()) - g_wall_start_ns) * 1e-6;
}

std::vector<Entry> entries() {
  std::vector<Entry> out;
  std::lock_guard<std::mutex> lock(g_mutex);
  resolve_all_locked();
  auto add = [&](const std::string& name, const Row& r) {
    for (int d = 0; d < kNumDirections; ++d) {
      const std::array<Stat, 2>& s = r.stat[d];
      // Front-end FLOPs go with the kernel calls: to the device entry when the op ran there (an op
      // timed on both clocks in one profile is rare: a CUDA program's data pipeline, say).
      const int front = s[static_cast<int>(Clock::device)].calls > 0 ? 1 : 0;
      for (int c = 0; c < 2; ++c)
        if (s[c].calls > 0)
          out.push_back({name, static_cast<Direction>(d), static_cast<Clock>(c), s[c].calls, s[c].ms,
                         s[c].flops + (c == front ? r.front_flops[d] : 0.0)});
    }
  };
  for (int i = 0; i < kNumOps; ++i) add(op_name(static_cast<OpId>(i)), g_ops[i]);
  for (const auto& [name, p] : g_named) add(name, p);
  std::stable_sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.total_ms > b.total_ms; });
  return out;
}

std::string report(int steps) {
  const std::vector<Entry> all = entries();
  const double wall = wall_ms();
  const int64_t lost = lost_device_timings();
  double sum = 0, device_sum = 0;
  for (const Entry& e : all) {
    sum += e.total_ms;
    if (e.clock == Clock::device) device_sum += e.total_ms;
  }
  std::ostringstream s;
  s << "| op | direction | calls | total ms | clock |" << (steps > 0 ? " ms/step |" : "")
    << " share | GFLOP | GFLOP/s |\n"
    << "|---|---|---:|---:|---|" << (steps > 0 ? "---:|" : "") << "---:|---:|---:|\n";
  for (const Entry& e : all) {
    s << "| " << e.name << " | " << direction_name(e.direction) << " | " << e.calls << " | " << fixed(e.total_ms, 3)
      << " | " << clock_name(e.clock) << " |";
    if (steps > 0) s << " " << fixed(e.total_ms / steps, 3) << " |";
    s << " " << (wall > 0 ? fixed(100.0 * e.total_ms / wall, 1) + "%" : std::string("—")) << " |";
    if (e.flops > 0)
      s << " " << fixed(e.flops * 1e-9, 3) << " | " << (e.total_ms > 0 ? fixed(e.flops / (e.total_ms * 1e6), 1) : "—")
        << " |";
    else
      s << " | |";
    s << "\n";
  }
  s << "\nops: " << fixed(sum, 1) << " ms of " << fixed(wall, 1) << " ms wall ("
    << (wall > 0 ? fixed(100.0 * sum / wall, 1) : std::string("—")) << "%";
  if (device_sum > 0)
    s << "; device clock " << fixed(device_sum, 1) << " ms, wall clock " << fixed(sum - device_sum, 1) << " ms";
  s << "); the rest ran outside the kernels and backward nodes (op front-ends: checks, output allocation, "
       "autograd recording; the caller's own code)";
  if (steps > 0) s << "; " << steps << " steps";
  s << ".\n";
  if (device_sum > 0)
    s << "Device rows: the time the device spent on the work the calls queued (events on its stream). The wall "
         "time includes the wait for the device when the profile stopped, so what the device rows leave of it is "
         "where the device waited for the host.\n";
  if (lost > 0) s << lost << " device timings could not be read (a device error): those calls lack their time.\n";
  return s.str();
}

Scope::Scope(OpId op, DeviceType device, int index) noexcept : op_(op) { open(device, index); }

Scope::Scope(std::string name, DeviceType device, int index) : op_(OpId{}), name_(std::move(name)) {
  open(device, index);
}

void Scope::open(DeviceType device, int index) noexcept {
  outermost_ = t_state.depth++ == 0;
  if (!outermost_) return;
  t_state.flops = 0;
  if (device != DeviceType::cpu) {
    if (DeviceTimer* timer = device_timer(device)) {
      try {
        index_ = index >= 0 ? index : timer->current_index();
        start_mark_ = timer->record(index_);
        timer_ = timer;
        resolve_at_exit_once();
      } catch (...) {
        // The device cannot record a mark (not visible, a sticky error): the wall clock, as on the
        // CPU. The op itself reports the error when it runs.
      }
    }
  }
  start_ns_ = now_ns();  // the wall clock's start, also the fallback if the closing mark fails
}

Scope::~Scope() {
  --t_state.depth;
  if (!outermost_) return;
  const int64_t end_ns = now_ns();
  bool on_device = timer_ != nullptr;
  DeviceTimer::Mark stop = 0;
  if (on_device) {
    try {
      stop = timer_->record(index_);
    } catch (...) {
      timer_->release(start_mark_);
      on_device = false;
    }
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  Stat& s = stat_locked(op_, name_, t_state.direction, on_device ? Clock::device : Clock::wall);
  ++s.calls;
  s.flops += t_state.flops;
  t_state.flops = 0;
  if (!on_device) {
    s.ms += static_cast<double>(end_ns - start_ns_) * 1e-6;
    return;
  }
  g_pending.push_back({&s.ms, timer_, start_mark_, stop});
  if (g_pending.size() > kResolveAt) resolve_passed_locked();
}

DirectionScope::DirectionScope(Direction direction) noexcept : previous_(t_state.direction) {
  t_state.direction = direction;
}

DirectionScope::~DirectionScope() { t_state.direction = previous_; }

void add_flops(OpId op, double flops) {
  // Inside a scope the FLOPs go with its time; outside (an op's front-end, before its kernel call)
  // straight to the op's entry, which that kernel call's time joins.
  const bool in_scope = t_state.depth > 0;
  if (in_scope && enabled()) t_state.flops += flops;
  std::lock_guard<std::mutex> lock(g_mutex);
  g_flop_total += flops;
  if (!in_scope && enabled()) row_locked(op, std::string()).front_flops[static_cast<int>(t_state.direction)] += flops;
}

FlopCounter::FlopCounter() {
  std::lock_guard<std::mutex> lock(g_mutex);
  ++g_counters;
  update_counting_locked();
  start_ = g_flop_total;
}

FlopCounter::~FlopCounter() {
  std::lock_guard<std::mutex> lock(g_mutex);
  --g_counters;
  update_counting_locked();
}

double FlopCounter::flops() const {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_flop_total - start_;
}

}  // namespace precis::profiler
