#pragma once
// The machine's GEMM peak, measured at the start of a precis-bench run: the bar every FLOP figure
// is compared with ("share of peak"). MACHINE.md's limits are nominal; this is the best oneDNN's
// dense-math kernels reach on this machine, now, at the suite's thread count, over square matmuls
// from in-cache (512³) to large (2048³) and one 3x3 convolution: on AMX CPUs the bf16 rate depends
// strongly on the shape and the kernel (see benchmarks/README.md).
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

/// Measures the f32 and bf16 peaks at each thread count: oneDNN matmuls n×n×n for n = 512, 1024
/// and 2048 and a 3x3 convolution forward, on page-aligned buffers, each with one warm-up and then
/// its best of several runs; the peak is the best of them (precis::matmul's squares when
/// precis-bench is built without oneDNN). Runs in a forked child when this process has one
/// thread, so that its OpenMP team does not stop the models suite from forking its cases.
GemmPeaks measure_gemm_peaks(const std::vector<int>& threads);

}  // namespace precis::bench
