#pragma once
// Where a tensor lives: the CPU, or CUDA device N.
#include <cstdint>
#include <iosfwd>
#include <string>

namespace precis {

enum class DeviceType : uint8_t { cpu, cuda };
inline constexpr int kNumDeviceTypes = 2;

/// A device: its type and, for CUDA, its ordinal (torch.device). A plain value type; the default is
/// the CPU.
struct Device {
  DeviceType type = DeviceType::cpu;  ///< cpu or cuda
  int16_t index = 0;  ///< CUDA ordinal; always 0 for the CPU

  static constexpr Device cpu() { return {DeviceType::cpu, 0}; }  ///< the CPU
  /// CUDA device `index`. Not checked here: using a device that is not visible throws DeviceError.
  static constexpr Device cuda(int index = 0) { return {DeviceType::cuda, static_cast<int16_t>(index)}; }
  constexpr bool is_cpu() const { return type == DeviceType::cpu; }  ///< type == cpu
  constexpr bool is_cuda() const { return type == DeviceType::cuda; }  ///< type == cuda
  /// Same type and index.
  friend constexpr bool operator==(Device a, Device b) { return a.type == b.type && a.index == b.index; }

  /// "cpu" or "cuda:N".
  std::string str() const;
  /// Parses "cpu", "cuda", "cuda:N"; throws ValueError otherwise.
  static Device parse(const std::string& s);
};

const char* device_type_name(DeviceType t);

/// d.str(): "cpu" or "cuda:N" (PyTorch's str(torch.device)).
std::string to_string(Device d);
/// Writes d.str(): `std::cout << x.device()` prints "cpu" or "cuda:0".
std::ostream& operator<<(std::ostream& os, Device d);

/// True when precis was built with CUDA and at least one CUDA device is visible. Never throws: a
/// missing driver or GPU reads as false.
bool cuda_is_available();
/// Number of visible CUDA devices; 0 in a CPU-only build or when the driver/GPU is missing.
/// The first call loads the CUDA backend library (core/cuda_backend.h).
int cuda_device_count();
/// The compute capability of visible CUDA device `index` as major·10 + minor (90 for an H100 or
/// H200, 80 for an A100); 0 when it is not a visible device. Never throws.
int cuda_compute_capability(int index = 0);
/// Why cuda_is_available() is false, in a phrase for an error message ("this precis was built
/// without CUDA ...", "the CUDA backend ... could not be loaded (...)", "no NVIDIA driver ...");
/// empty when a device is visible.
std::string cuda_unavailable_reason();

}  // namespace precis
