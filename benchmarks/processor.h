#pragma once
// The processor a benchmark ran on, named in every result (precis-bench's markdown header and
// each JSON record): the development machines differ between sessions (AMD Zen 4 and Zen 5,
// Intel Xeon with AMX), and a time or a share of the peak means nothing without the processor.
#include <string>

namespace precis::bench {

struct Processor {
  std::string model_name;  ///< /proc/cpuinfo's "model name" (virtual machines often say only "AMD EPYC")
  std::string family;      ///< the family the results group by: "AMD Zen 5", "Intel AMX", ...
  std::string vendor;      ///< "AuthenticAMD", "GenuineIntel"
  int cpu_family = -1, cpu_model = -1;  ///< /proc/cpuinfo's numbers (-1: not found)
  /// The flags that decide which kernels run, those present, space-separated ("avx2 avx512f
  /// avx512_bf16"); the markdown also names the absent ones.
  std::string flags;
  std::string absent_flags;
};

/// This machine's processor, read from /proc/cpuinfo once.
const Processor& processor();

/// The family label of a processor: AMD by cpu family (23 Zen 1/2, 25 Zen 3 or, with avx512f,
/// Zen 4, 26 Zen 5), Intel by its widest matrix or vector unit (amx_tile: "Intel AMX",
/// avx512f: "Intel AVX-512"); otherwise the model name.
std::string processor_family(const std::string& vendor, int cpu_family, const std::string& flags,
                             const std::string& model_name);

}  // namespace precis::bench
