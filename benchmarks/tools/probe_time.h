#pragma once
// Process CPU time for the standalone probe tools (benchmarks/tools/*_probe.cpp): user + system
// time of all the process's threads, which load from other processes disturbs less than wall
// time on the 2-vCPU machines.
#include <sys/resource.h>

#include <algorithm>
#include <functional>

namespace precis::probe {

/// The process's CPU time so far (user + system, all threads), in ms.
inline double cpu_ms() {
  rusage r;
  getrusage(RUSAGE_SELF, &r);
  return (r.ru_utime.tv_sec + r.ru_stime.tv_sec) * 1e3 + (r.ru_utime.tv_usec + r.ru_stime.tv_usec) * 1e-3;
}

/// The least CPU time of `reps` calls of f, in ms.
inline double best_cpu_ms(int reps, const std::function<void()>& f) {
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const double t = cpu_ms();
    f();
    best = std::min(best, cpu_ms() - t);
  }
  return best;
}

}  // namespace precis::probe
