#include "benchmarks/bench.h"

#include <algorithm>
#include <chrono>

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

bool case_selected(const Options& options, const std::string& name) {
  return options.cases.empty() || name.find(options.cases) != std::string::npos;
}

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

}  // namespace precis::bench
