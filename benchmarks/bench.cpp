#include "benchmarks/bench.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <utility>

#include "ops/profiler.h"

namespace precis::bench {

namespace {
std::vector<Suite>& registry() {
  static std::vector<Suite> all;
  return all;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0.0 : (n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}
}  // namespace

bool register_suite(Suite suite) {
  registry().push_back(std::move(suite));
  return true;
}

const std::vector<Suite>& suites() { return registry(); }

namespace {
CasesSeen& cases_seen() {
  static CasesSeen seen;
  return seen;
}
}  // namespace

bool case_selected(const Options& options, const std::string& name) {
  const bool selected = options.cases.empty() || name.find(options.cases) != std::string::npos;
  CasesSeen& seen = cases_seen();
  // A case is asked about once per thread count: list each name once.
  if (std::find(seen.names.begin(), seen.names.end(), name) == seen.names.end()) seen.names.push_back(name);
  seen.any_selected = seen.any_selected || selected;
  return selected;
}

CasesSeen take_cases_seen() { return std::exchange(cases_seen(), CasesSeen{}); }

std::vector<Timing> time_interleaved(const std::vector<std::function<void()>>& impls, const Options& options) {
  using Clock = std::chrono::steady_clock;
  for (const auto& fn : impls)
    for (int i = 0; i < options.warmup_reps; ++i) fn();
  std::vector<std::vector<double>> samples(impls.size());
  std::vector<double> spent(impls.size(), 0.0);
  for (int round = 0; round < options.max_reps; ++round) {
    bool done = round >= options.min_reps;
    for (double s : spent) done = done && s >= options.min_seconds;
    if (done) break;
    for (size_t i = 0; i < impls.size(); ++i) {
      const auto start = Clock::now();
      impls[i]();
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      samples[i].push_back(seconds * 1e3);
      spent[i] += seconds;
    }
  }
  std::vector<Timing> out(impls.size());
  for (size_t i = 0; i < impls.size(); ++i) {
    out[i].median_ms = median(samples[i]);
    out[i].min_ms = samples[i].empty() ? 0.0 : *std::min_element(samples[i].begin(), samples[i].end());
    out[i].reps = static_cast<int>(samples[i].size());
  }
  return out;
}

StepTiming time_step(const std::function<void()>& step, const Options& options, const std::string& title,
                     const std::function<void()>& before_timed) {
  StepTiming out;
  {
    profiler::FlopCounter counter;
    step();  // the first warm-up run
    out.flops = counter.flops();
  }
  for (int i = 1; i < options.warmup_reps; ++i) step();
  if (before_timed) before_timed();
  Options timed = options;
  timed.warmup_reps = 0;
  if (options.profile) {
    profiler::reset();
    profiler::set_enabled(true);
  }
  out.timing = time_interleaved({step}, timed)[0];
  if (options.profile) {
    profiler::set_enabled(false);
    std::printf("\n### profile: %s (%d timed steps)\n\n%s", title.c_str(), out.timing.reps,
                profiler::report(out.timing.reps).c_str());
    std::fflush(stdout);  // a forked case leaves with _exit
    profiler::reset();
  }
  return out;
}

int process_threads() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  return 0;
}

bool run_in_child(void* out, size_t size, const std::function<void(void*)>& fill, int* status) {
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error("precis-bench: pipe failed");
  std::fflush(stdout);  // or the child's exit would print the parent's buffered output again
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("precis-bench: fork failed");
  if (pid == 0) {
    ::close(fds[0]);
    fill(out);
    const ssize_t written = ::write(fds[1], out, size);
    ::_exit(written == static_cast<ssize_t>(size) ? 0 : 1);
  }
  ::close(fds[1]);
  size_t got = 0;
  while (got < size) {
    const ssize_t k = ::read(fds[0], static_cast<char*>(out) + got, size - got);
    if (k <= 0) break;
    got += static_cast<size_t>(k);
  }
  ::close(fds[0]);
  *status = 0;
  ::waitpid(pid, status, 0);
  return got == size;
}

}  // namespace precis::bench
