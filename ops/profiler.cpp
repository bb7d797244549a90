#include "ops/profiler.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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
  int64_t ns = 0;
  double flops = 0;
};
using Pair = std::array<Stat, 2>;  // by Direction

// Everything below is guarded by g_mutex. Recording takes it once per outermost scope: only while
// the profiler is on, where one uncontended lock per kernel call is noise beside the kernel.
std::mutex g_mutex;
Pair g_ops[kNumOps];
std::map<std::string, Pair> g_named;
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

Stat& stat_locked(OpId op, const std::string& name, Direction d) {
  Pair& p = name.empty() ? g_ops[static_cast<int>(op)] : g_named[name];
  return p[static_cast<int>(d)];
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

// Defined after every global above, so they are initialised before it runs and destroyed after
// the exit handler it registers.
[[maybe_unused]] const bool g_from_env = [] {
  if (!env_requests_profile()) return false;
  set_enabled(true);
  std::atexit(print_at_exit);
  return true;
}();

}  // namespace

const char* direction_name(Direction d) { return d == Direction::forward ? "forward" : "backward"; }

void set_enabled(bool on) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const bool was = detail::g_timing.load(std::memory_order_relaxed);
  if (on && !was) {
    // Restarting after a stop continues the clock: the wall time is the time spent on.
    const int64_t t = now_ns();
    g_wall_start_ns = g_wall_stop_ns == 0 ? t : t - (g_wall_stop_ns - g_wall_start_ns);
    g_wall_stop_ns = 0;
  } else if (!on && was) {
    g_wall_stop_ns = now_ns();
  }
  detail::g_timing.store(on, std::memory_order_relaxed);
  update_counting_locked();
}

void reset() {
  std::lock_guard<std::mutex> lock(g_mutex);
  for (Pair& p : g_ops) p = Pair{};
  g_named.clear();
  const int64_t t = now_ns();
  g_wall_start_ns = t;
  g_wall_stop_ns = detail::g_timing.load(std::memory_order_relaxed) ? 0 : t;
}

double wall_ms() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_wall_start_ns == 0) return 0;
  return static_cast<double>((g_wall_stop_ns != 0 ? g_wall_stop_ns : now_ns()) - g_wall_start_ns) * 1e-6;
}

std::vector<Entry> entries() {
  std::vector<Entry> out;
  std::lock_guard<std::mutex> lock(g_mutex);
  auto add = [&](const std::string& name, const Pair& p) {
    for (int d = 0; d < 2; ++d)
      if (p[d].calls > 0)
        out.push_back({name, static_cast<Direction>(d), p[d].calls, static_cast<double>(p[d].ns) * 1e-6, p[d].flops});
  };
  for (int i = 0; i < kNumOps; ++i) add(op_name(static_cast<OpId>(i)), g_ops[i]);
  for (const auto& [name, p] : g_named) add(name, p);
  std::stable_sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.total_ms > b.total_ms; });
  return out;
}

std::string report(int steps) {
  const std::vector<Entry> all = entries();
  const double wall = wall_ms();
  double sum = 0;
  for (const Entry& e : all) sum += e.total_ms;
  std::ostringstream s;
  s << "| op | direction | calls | total ms |" << (steps > 0 ? " ms/step |" : "") << " share | GFLOP | GFLOP/s |\n"
    << "|---|---|---:|---:|" << (steps > 0 ? "---:|" : "") << "---:|---:|---:|\n";
  for (const Entry& e : all) {
    s << "| " << e.name << " | " << direction_name(e.direction) << " | " << e.calls << " | " << fixed(e.total_ms, 3)
      << " |";
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
    << (wall > 0 ? fixed(100.0 * sum / wall, 1) : std::string("—"))
    << "%); the rest ran outside the kernels and backward nodes (op front-ends: checks, output allocation, "
       "autograd recording; the caller's own code)";
  if (steps > 0) s << "; " << steps << " steps";
  s << ".\n";
  return s.str();
}

Scope::Scope(OpId op) noexcept : op_(op) { open(); }

Scope::Scope(std::string name) : op_(OpId{}), name_(std::move(name)) { open(); }

void Scope::open() noexcept {
  outermost_ = t_state.depth++ == 0;
  if (outermost_) {
    t_state.flops = 0;
    start_ns_ = now_ns();
  }
}

Scope::~Scope() {
  --t_state.depth;
  if (!outermost_) return;
  const int64_t ns = now_ns() - start_ns_;
  std::lock_guard<std::mutex> lock(g_mutex);
  Stat& s = stat_locked(op_, name_, t_state.direction);
  ++s.calls;
  s.ns += ns;
  s.flops += t_state.flops;
  t_state.flops = 0;
}

BackwardScope::BackwardScope() noexcept : previous_(t_state.direction) { t_state.direction = Direction::backward; }

BackwardScope::~BackwardScope() { t_state.direction = previous_; }

void add_flops(OpId op, double flops) {
  // Inside a scope the FLOPs go with its time; outside (an op's front-end, before its kernel call)
  // straight to the op's entry, which that kernel call's time joins.
  const bool in_scope = t_state.depth > 0;
  if (in_scope && enabled()) t_state.flops += flops;
  std::lock_guard<std::mutex> lock(g_mutex);
  g_flop_total += flops;
  if (!in_scope && enabled()) stat_locked(op, std::string(), t_state.direction).flops += flops;
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
