// precis-bench: runs the benchmark suites named on the command line and prints a markdown table
// per suite (optionally a JSON file of all records). See benchmarks/README.md.
//
//   precis-bench matmul [--threads 1,2] [--repeat N] [--min-time S] [--json FILE]
//   precis-bench models --profile --cases "bert_mini b16x128 bf16" --threads 2
//   precis-bench --list
//
// Suites that count FLOPs (matmul, ops, models) are compared with the machine's GEMM peak,
// measured first (benchmarks/peak.h) at every thread count of the run.
#include <chrono>
#include <cstdio>
#include <ctime>
#include <exception>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <thread>

#include "benchmarks/bench.h"
#include "benchmarks/processor.h"
#include "benchmarks/peak.h"
#include "ops/profiler.h"

namespace {

using precis::bench::GemmPeaks;
using precis::bench::Options;
using precis::bench::Record;
using precis::bench::Suite;
using precis::bench::SuiteReport;

void usage(std::ostream& os) {
  os << "usage: precis-bench SUITE... [--threads 1,2] [--repeat N] [--min-time SECONDS] [--json FILE] [--cases SUBSTRING]\n"
        "                    [--profile] [--no-peak] [--device cpu|cuda|cuda:N]\n"
        "       precis-bench --list\n\n"
        "  --threads   thread counts to run every case at (default 1,2)\n"
        "  --repeat    at most N timed repetitions per case (default 200)\n"
        "  --min-time  repeat until each impl ran this long, at least 5 times (default 0.5)\n"
        "  --json      also write all records as a JSON array to FILE\n"
        "  --cases     only the cases whose name contains SUBSTRING (models, ops: the name with its\n"
        "              dtype, e.g. 'resnet18_cifar b64 bf16')\n"
        "  --profile   models, ops: print each case's per-op profile of its timed repetitions (time per\n"
        "              op and direction, device time on a GPU; also PRECIS_PROFILE=1)\n"
        "  --no-peak   do not measure the GEMM peak (no share-of-peak columns)\n"
        "  --device    models only: cuda runs ResNet-50 (b256, 224x224) and BERT-mini (b64x128) training\n"
        "              steps on the GPU in f32 and f16 AMP; fails when no usable GPU is there\n\nsuites:\n";
  for (const Suite& s : precis::bench::suites()) os << "  " << s.name << "  " << s.description << "\n";
}

std::vector<int> parse_int_list(const std::string& text) {
  std::vector<int> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(std::stoi(item));
  if (out.empty()) throw std::invalid_argument("empty list");
  for (int v : out)
    if (v < 1) throw std::invalid_argument("thread counts must be >= 1");
  return out;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", std::gmtime(&t));
  return buf;
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// Share of the GEMM peak in percent, from the median (or the best) time; "" without flops or peak.
std::string peak_share(const Record& r, bool best) {
  if (r.gflops <= 0 || r.peak_gflops <= 0) return "";
  const double gflops = best && r.min_ms > 0 ? r.gflops * r.median_ms / r.min_ms : r.gflops;
  return fixed(100.0 * gflops / r.peak_gflops, 1) + "%";
}

void print_table(const Suite& suite, const SuiteReport& report) {
  std::cout << "\n## " << suite.name << "\n\n";
  if (!report.note.empty()) std::cout << report.note << "\n\n";
  // Baseline median time per (case, dtype, threads), for the ratio column.
  std::map<std::string, double> baseline;
  auto key = [](const Record& r) { return r.case_name + "|" + r.dtype + "|" + std::to_string(r.threads); };
  for (const Record& r : report.records)
    if (r.impl == report.baseline_impl) baseline[key(r)] = r.median_ms;
  const bool ratio = !report.baseline_impl.empty();
  bool peak = false;
  for (const Record& r : report.records) peak = peak || (r.gflops > 0 && r.peak_gflops > 0);
  std::cout << "| case | dtype | threads | impl | median ms | min ms | GFLOP/s (median) | GFLOP/s (best) |"
            << (peak ? " GFLOP | peak GFLOP/s | % of peak (median) | % of peak (best) |" : "")
            << (ratio ? " vs " + report.baseline_impl + " |" : "") << "\n";
  std::cout << "|---|---|---:|---|---:|---:|---:|---:|" << (peak ? "---:|---:|---:|---:|" : "") << (ratio ? "---:|" : "")
            << "\n";
  for (const Record& r : report.records) {
    const double best_gflops = r.min_ms > 0 ? r.gflops * r.median_ms / r.min_ms : 0;
    std::cout << "| " << r.case_name << " | " << r.dtype << " | " << r.threads << " | " << r.impl << " | "
              << fixed(r.median_ms, 3) << " | " << fixed(r.min_ms, 3) << " | " << fixed(r.gflops, 1) << " | "
              << fixed(best_gflops, 1) << " |";
    if (peak) {
      const bool has = r.gflops > 0 && r.peak_gflops > 0;
      const double flops = r.flops > 0 ? r.flops : r.gflops * r.median_ms * 1e6;
      std::cout << " " << (r.gflops > 0 ? fixed(flops * 1e-9, 2) : "") << " | " << (has ? fixed(r.peak_gflops, 1) : "")
                << " | " << peak_share(r, false) << " | " << peak_share(r, true) << " |";
    }
    if (ratio) {
      auto it = baseline.find(key(r));
      std::cout << " " << (it != baseline.end() && r.median_ms > 0 ? fixed(100.0 * it->second / r.median_ms, 1) + "%" : "")
                << " |";
    }
    std::cout << "\n";
  }
  std::cout.flush();
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

void write_json(const std::string& path, const std::vector<Record>& records) {
  std::ofstream out(path);
  if (!out) throw std::runtime_error("cannot write " + path);
  out << "[\n";
  for (size_t i = 0; i < records.size(); ++i) {
    const Record& r = records[i];
    const precis::bench::Processor& cpu = precis::bench::processor();
    out << "  {\"suite\": \"" << json_escape(r.suite) << "\", \"case\": \"" << json_escape(r.case_name)
        << "\", \"impl\": \"" << json_escape(r.impl) << "\", \"dtype\": \"" << r.dtype << "\", \"threads\": "
        << r.threads << ", \"median_ms\": " << fixed(r.median_ms, 4) << ", \"min_ms\": " << fixed(r.min_ms, 4)
        << ", \"gflops\": " << fixed(r.gflops, 2) << ", \"reps\": " << r.reps;
    if (r.gflops > 0) {
      out << ", \"flops\": " << fixed(r.flops > 0 ? r.flops : r.gflops * r.median_ms * 1e6, 0);
      if (r.peak_gflops > 0)
        out << ", \"peak_gflops\": " << fixed(r.peak_gflops, 2) << ", \"share_of_peak\": "
            << fixed(r.gflops / r.peak_gflops, 4) << ", \"share_of_peak_best\": "
            << fixed(r.min_ms > 0 ? r.gflops * r.median_ms / r.min_ms / r.peak_gflops : 0.0, 4);
    }
    if (r.peak_rss_mb > 0)
      out << ", \"peak_rss_mb\": " << fixed(r.peak_rss_mb, 1) << ", \"base_rss_mb\": " << fixed(r.base_rss_mb, 1);
    if (!r.device.empty())
      out << ", \"device\": \"" << r.device << "\", \"" << r.items << "_per_s\": " << fixed(r.items_per_s, 1)
          << ", \"peak_device_mb\": " << fixed(r.peak_device_mb, 1) << ", \"peak_device_mb_steps\": "
          << fixed(r.peak_device_mb_steps, 1);
    if (!r.variant.empty()) out << ", \"variant\": \"" << json_escape(r.variant) << "\"";
    out << ", \"processor\": \"" << json_escape(cpu.model_name) << "\", \"processor_family\": \""
        << json_escape(cpu.family) << "\", \"cpu_vendor\": \"" << json_escape(cpu.vendor)
        << "\", \"cpu_family\": " << cpu.cpu_family << ", \"cpu_model\": " << cpu.cpu_model << ", \"cpu_flags\": \""
        << cpu.flags << "\"";
    out << "}"
        << (i + 1 < records.size() ? "," : "") << "\n";
  }
  out << "]\n";
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  bool measure_peak = true;
  std::string json_path;
  std::vector<std::string> names;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= argc) throw std::invalid_argument(arg + " needs a value");
        return argv[++i];
      };
      if (arg == "--threads") {
        options.threads = parse_int_list(value());
      } else if (arg == "--repeat") {
        options.max_reps = std::stoi(value());
        if (options.max_reps < 1) throw std::invalid_argument("--repeat must be >= 1");
        options.min_reps = std::min(options.min_reps, options.max_reps);
      } else if (arg == "--min-time") {
        options.min_seconds = std::stod(value());
      } else if (arg == "--json") {
        json_path = value();
      } else if (arg == "--cases") {
        options.cases = value();
      } else if (arg == "--profile") {
        options.profile = true;
      } else if (arg == "--no-peak") {
        measure_peak = false;
      } else if (arg == "--device") {
        options.device = value();
        if (options.device != "cpu" && options.device != "cuda" && options.device.rfind("cuda:", 0) != 0)
          throw std::invalid_argument("--device must be cpu, cuda or cuda:N, got '" + options.device + "'");
      } else if (arg == "--list" || arg == "-h" || arg == "--help") {
        usage(std::cout);
        return 0;
      } else if (!arg.empty() && arg[0] == '-') {
        throw std::invalid_argument("unknown option " + arg);
      } else {
        names.push_back(arg);
      }
    }
  } catch (const std::exception& e) {
    std::cerr << "precis-bench: " << e.what() << "\n\n";
    usage(std::cerr);
    return 2;
  }
  if (names.empty()) {
    usage(std::cerr);
    return 2;
  }
  std::vector<const Suite*> selected;
  for (const std::string& name : names) {
    const Suite* found = nullptr;
    for (const Suite& s : precis::bench::suites())
      if (s.name == name) found = &s;
    if (found == nullptr) {
      std::cerr << "precis-bench: no suite named '" << name << "'\n\n";
      usage(std::cerr);
      return 2;
    }
    if (options.device != "cpu" && name != "models") {
      std::cerr << "precis-bench: suite '" << name << "' runs on the CPU only; --device " << options.device
                << " is for the models suite\n";
      return 2;
    }
    selected.push_back(found);
  }

  // PRECIS_PROFILE=1 turned the profiler on at start-up: profile each case's timed repetitions
  // (as --profile) instead of the whole run, which mixes warm-ups and cases.
  if (precis::profiler::enabled()) {
    options.profile = true;
    precis::profiler::set_enabled(false);
    precis::profiler::reset();
  }

  const precis::bench::Processor& cpu = precis::bench::processor();
  std::cout << "# precis-bench\n\n" << utc_now() << ", " << cpu.family << " (" << cpu.model_name << "; "
            << (cpu.flags.empty() ? std::string("none of ") + cpu.absent_flags
                                  : cpu.flags + (cpu.absent_flags.empty() ? "" : "; no " + cpu.absent_flags))
            << "), " << std::thread::hardware_concurrency() << " hardware threads\n";
  std::vector<Record> all;
  try {
    GemmPeaks peaks;
    bool wants_peak = false;
    for (const Suite* s : selected) wants_peak = wants_peak || s->name == "matmul" || s->name == "ops" || s->name == "models";
    if (measure_peak && wants_peak) {
      peaks = precis::bench::measure_gemm_peaks(options.threads);
      std::cout << "\nGEMM peak (" << peaks.method << "):";
      for (const auto& [threads, p] : peaks.by_threads)
        std::cout << " " << threads << (threads == 1 ? " thread" : " threads") << " f32 " << fixed(p.f32, 1)
                  << " GFLOP/s, bf16 " << (p.bf16 > 0 ? fixed(p.bf16, 1) + " GFLOP/s" : std::string("none")) << ";";
      std::cout << " the share-of-peak columns divide by these. On a loaded machine the peak is measured low "
                   "and the shares come out high: compare shares measured on a quiet machine.\n";
      std::cout.flush();
    }
    for (const Suite* s : selected) {
      (void)precis::bench::take_cases_seen();
      SuiteReport report = s->run(options);
      // A --cases that matches none of a suite's cases (a typo, a dtype left out) would print an
      // empty table and look like a result.
      if (const precis::bench::CasesSeen seen = precis::bench::take_cases_seen();
          !options.cases.empty() && !seen.names.empty() && !seen.any_selected) {
        std::cerr << "precis-bench: --cases '" << options.cases << "' matches none of the " << s->name
                  << " suite's cases, so nothing was measured; --cases picks the cases whose name contains it. The "
                  << s->name << " suite's cases:\n";
        for (const std::string& name : seen.names) std::cerr << "  " << name << "\n";
        return 2;
      }
      // The peak is the CPU's GEMM peak: a GPU case gets no share of it.
      for (Record& r : report.records)
        if (r.device.empty() || r.device == "cpu") r.peak_gflops = peaks.of(r.dtype, r.threads);
      print_table(*s, report);
      all.insert(all.end(), report.records.begin(), report.records.end());
    }
    if (!json_path.empty()) write_json(json_path, all);
  } catch (const std::exception& e) {
    std::cerr << "precis-bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
