#include "benchmarks/processor.h"

#include <fstream>
#include <set>
#include <sstream>
#include <string>

namespace precis::bench {

namespace {

// The instruction sets precis's CPU kernels choose between (core/cpu_features.h, oneDNN's ISA).
constexpr const char* kFlagsOfInterest[] = {"avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16"};

std::string value_of(const std::string& line) {
  const size_t colon = line.find(':');
  return colon == std::string::npos || colon + 2 > line.size() ? std::string() : line.substr(colon + 2);
}

Processor read_processor() {
  Processor p;
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  std::set<std::string> flags;
  bool seen_flags = false;
  // The first processor's entry: the machines here are homogeneous.
  while (std::getline(in, line) && !(line.empty() && seen_flags)) {
    if (line.rfind("model name", 0) == 0) p.model_name = value_of(line);
    else if (line.rfind("vendor_id", 0) == 0) p.vendor = value_of(line);
    else if (line.rfind("cpu family", 0) == 0) p.cpu_family = std::stoi(value_of(line));
    else if (line.rfind("model", 0) == 0 && line.find("name") == std::string::npos) p.cpu_model = std::stoi(value_of(line));
    else if (line.rfind("flags", 0) == 0) {
      std::istringstream ss(value_of(line));
      for (std::string f; ss >> f;) flags.insert(f);
      seen_flags = true;
    }
  }
  for (const char* f : kFlagsOfInterest) {
    std::string& list = flags.count(f) != 0 ? p.flags : p.absent_flags;
    list += (list.empty() ? "" : " ") + std::string(f);
  }
  if (p.model_name.empty()) p.model_name = "unknown CPU";
  p.family = processor_family(p.vendor, p.cpu_family, p.flags, p.model_name);
  return p;
}

bool has_flag(const std::string& flags, const std::string& flag) {
  std::istringstream ss(flags);
  for (std::string f; ss >> f;)
    if (f == flag) return true;
  return false;
}

}  // namespace

std::string processor_family(const std::string& vendor, int cpu_family, const std::string& flags,
                             const std::string& model_name) {
  if (vendor == "AuthenticAMD") {
    if (cpu_family == 26) return "AMD Zen 5";
    if (cpu_family == 25) return has_flag(flags, "avx512f") ? "AMD Zen 4" : "AMD Zen 3";
    if (cpu_family == 23) return "AMD Zen 1/2";
  }
  if (vendor == "GenuineIntel") {
    if (has_flag(flags, "amx_tile")) return "Intel AMX";
    if (has_flag(flags, "avx512f")) return "Intel AVX-512";
    return "Intel";
  }
  return model_name;
}

const Processor& processor() {
  static const Processor p = read_processor();
  return p;
}

}  // namespace precis::bench
