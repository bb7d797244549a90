#pragma once
// The machine's GEMM peak, measured at the start of a precis-bench run: the bar every FLOP figure
// is compared with ("share of peak"). MACHINE.md's limits are nominal; this is what a large square
// matmul through oneDNN reaches on this machine, now, at the suite's thread count.
#include <map>
#include <string>
#include <vector>

namespace precis::bench {

/// The measured peak at one thread count, in GFLOP/s (0 where not measured).
struct GemmPeak {
  double f32 = 0;
  double bf16 = 0;
};

/// The peaks of every thread count, and how they were measured (for the report).
struct GemmPeaks {
  std::map<int, GemmPeak> by_threads;
  std::string method;
  /// The peak for a record's dtype ("f32", "bf16") and thread count; 0 when there is none.
  double of(const std::string& dtype, int threads) const;
};

/// Measures the f32 and bf16 GEMM peaks at each thread count: an n×n×n matmul through oneDNN
/// (precis::matmul when precis-bench is built without oneDNN), one warm-up, then the best of
/// `reps` runs. Runs in a forked child when this process has one thread, so that its OpenMP team
/// does not stop the models suite from forking its cases.
GemmPeaks measure_gemm_peaks(const std::vector<int>& threads, int n = 2048, int reps = 5);

}  // namespace precis::bench
