#pragma once
// precis-bench's shared pieces: options, result records, the timing loop and the suite registry.
// A suite is one file, benchmarks/suite_<name>.cpp, that registers itself at namespace scope:
//
//   static const bool kRegistered = precis::bench::register_suite(
//       {"matmul", "f32 GEMM: precis::matmul against the oneDNN primitive", &run_matmul_suite});
//
// (A static registration is safe here: the suites are object files of the executable itself,
// which the linker always keeps, unlike members of a static library.)
#include <cstddef>
#include <cstdio>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

namespace precis::bench {

struct Options {
  std::vector<int> threads{1, 2};  // --threads 1,2
  int max_reps = 200;              // --repeat N: stop after N timed repetitions
  double min_seconds = 0.5;        // ... or once this much time was spent (and min_reps ran)
  int min_reps = 5;
  int warmup_reps = 2;
  std::string cases;               // --cases SUBSTRING: run only the cases whose name contains it
  bool profile = false;            // --profile (or PRECIS_PROFILE=1): print each case's op profile
  std::string device = "cpu";      // --device cpu|cuda|cuda:N (the models suite; others run on the CPU only)
};

/// Whether --cases selects the case named `name` (every case when --cases was not given). Records
/// the name, so that a --cases matching nothing can be told apart from a suite without cases.
bool case_selected(const Options& options, const std::string& name);
/// The case names case_selected saw since the last call (and whether any was selected), for
/// main.cpp's check after each suite; clears them.
struct CasesSeen {
  std::vector<std::string> names;
  bool any_selected = false;
};
CasesSeen take_cases_seen();

/// One measured (case, impl, dtype, threads) combination.
struct Record {
  std::string suite, case_name, impl, dtype;
  int threads = 1;
  double median_ms = 0, min_ms = 0;
  double gflops = 0;  // from the median time; 0 where the suite counts no flops
  int reps = 0;
  double flops = 0;        // nominal FLOPs of one repetition (0: not counted)
  double peak_gflops = 0;  // the machine's measured GEMM peak for this dtype and thread count
                           // (main.cpp fills it; 0: not measured or no peak for the dtype)
  // Memory of the process that ran the case (suites that measure it; 0 = not measured, omitted
  // from the JSON): its peak resident set (VmHWM) and its resident set before the case started.
  double peak_rss_mb = 0, base_rss_mb = 0;
  // GPU cases (0 / empty = not measured, omitted from the JSON): the device ("cuda:0"), examples
  // (images or tokens) per second at the median step time, and the device allocator's peak
  // allocated bytes over the case (model, optimizer state, activations), in MiB.
  std::string device;
  double items_per_s = 0;
  std::string items;  // "images" or "tokens"
  double peak_device_mb = 0;
  // The same peak over the timed steps alone (after the warm-up: without cuDNN's algorithm search
  // and its workspaces, as torch_models.py's peak_device_mb_steps), in MiB.
  double peak_device_mb_steps = 0;
  // The GPU models cases' variant, named as benchmarks/peers/torch_models.py names PyTorch's
  // ("f32-notf32-nchw", "f32-tf32-nchw", "bf16-amp", ...) so report.py pairs like with like; empty
  // (omitted from the JSON) elsewhere.
  std::string variant;
};

struct Timing {
  double median_ms = 0, min_ms = 0;
  int reps = 0;
};

/// Times several implementations of the same case, interleaved (one repetition of each per
/// round) so that noise from other load hits all of them alike. Each runs `warmup_reps` times
/// untimed first; rounds continue until every implementation has run for min_seconds and
/// min_reps, or max_reps rounds were done.
std::vector<Timing> time_interleaved(const std::vector<std::function<void()>>& impls, const Options& options);

/// A step's timing and its nominal FLOPs per repetition.
struct StepTiming {
  Timing timing;
  double flops = 0;
};

/// Times one step as time_interleaved does, counting its FLOPs (ops/profiler.h: matmul, linear,
/// conv2d, forward and backward) on the first warm-up run. With options.profile the timed
/// repetitions are profiled and the profile is printed to stdout under a heading naming `title`.
/// `before_timed`, when given, runs once between the warm-up and the timed repetitions (e.g. to
/// start a new peak-memory window).
StepTiming time_step(const std::function<void()>& step, const Options& options, const std::string& title,
                     const std::function<void()>& before_timed = {});

/// What a suite prints beside its records: a free-form note (conventions, caveats) and the impl
/// every other impl of the same case is compared with ("" for none).
struct SuiteReport {
  std::vector<Record> records;
  std::string note;
  std::string baseline_impl;
};

struct Suite {
  std::string name;
  std::string description;
  std::function<SuiteReport(const Options&)> run;
};

/// How many threads this process has now (/proc/self/status; 0 when unknown).
int process_threads();

/// Runs `fill` in a forked child that writes `size` bytes into `out` and sends them back through
/// a pipe; returns false (with the child's wait status in *status) when fewer came back. Only call
/// it while the process is single-threaded (process_threads() == 1): a fork copies one thread.
bool run_in_child(void* out, size_t size, const std::function<void(void*)>& fill, int* status);

/// `f()` in a fresh child process (a fresh peak-memory counter, a fresh thread pool); R is plain
/// data with a `char error[]` field, which says "`what`: the child process died ..." when the
/// child returned nothing.
template <class R>
R run_forked(const char* what, const std::function<R()>& f) {
  static_assert(std::is_trivially_copyable_v<R>, "run_forked: the result crosses a pipe");
  R r{};
  int status = 0;
  if (!run_in_child(&r, sizeof r, [&](void* out) { *static_cast<R*>(out) = f(); }, &status))
    std::snprintf(r.error, sizeof r.error, "%s: the child process died (status %d)", what, status);
  return r;
}

bool register_suite(Suite suite);
const std::vector<Suite>& suites();

}  // namespace precis::bench
