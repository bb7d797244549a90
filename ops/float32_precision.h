#pragma once
// The internal precision of f32 matrix products and convolutions: IEEE fp32 or TF32 (Tensor Cores
// reading each input with a 10-bit mantissa, summing in fp32), per op family, as PyTorch's
// torch.set_float32_matmul_precision, torch.backends.cuda.matmul.allow_tf32 and
// torch.backends.cudnn.allow_tf32 (newer: torch.backends.{cuda.matmul,cudnn.conv}.fp32_precision)
// set it. The defaults are PyTorch's: matmuls IEEE, convolutions TF32. The CPU has settings of its
// own, as PyTorch's oneDNN backend has (torch.backends.mkldnn.{matmul,conv}.fp32_precision), IEEE
// by default as there.
//
//   precis::set_float32_matmul_precision("high");  // f32 matmul/linear/attention GEMMs in TF32 on CUDA
//   {
//     precis::Float32PrecisionGuard exact(precis::Float32Precision::ieee);  // both families, this scope
//     ...
//   }
//
// The CUDA kernels read the CUDA settings (cuBLAS, cuBLASLt, cuDNN). No CPU kernel computes in
// TF32: the CPU's conv setting tf32 lets f32 3x3 stride-1 convolutions run oneDNN's Winograd
// F(4x4, 3x3) kernels, whose fp32 arithmetic has ~5x direct convolution's rounding error (still
// ~100x inside TF32's; ops/cpu/conv_onednn.cpp has the figures) for 2x the speed; the CPU's matmul
// setting changes nothing. f64/f16/bf16 ignore the settings everywhere.
//
//   precis::set_float32_precision(precis::Float32OpFamily::conv, precis::Float32Precision::tf32,
//                                 precis::DeviceType::cpu);  // Winograd for f32 3x3 convolutions
//
// One function decides what an op computes in (float32_precision(OpId, DeviceType)); the kernels
// and amp::Audit both ask it, so the audit reports what ran.
//
// Process-wide, as PyTorch's (at::globalContext()) and kernels::set_conv_deterministic are, not
// thread-local: a training step's work runs on more threads than the one that configured it
// (DataLoader workers' transforms, the backward engine, host threads sharing a device), and code
// ported from PyTorch sets it once at start-up expecting every thread to follow. The CUDA kernels'
// algorithm caches key on it, so a change takes effect at the next call without reusing a plan
// chosen for the other setting. The guard is for scopes where no other thread runs f32 GEMMs whose
// precision matters (tests, an evaluation pass): it changes theirs too.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/device.h"
#include "core/dtype.h"
#include "ops/op_table.h"

namespace precis {

/// How an f32 matrix product or convolution may compute internally (PyTorch's fp32_precision).
enum class Float32Precision : uint8_t {
  ieee,  ///< fp32 products and sums (FMA): PyTorch's "ieee", "highest", allow_tf32 = False
  tf32,  ///< TF32 Tensor Core products, fp32 sums: PyTorch's "tf32", "high", allow_tf32 = True
};

/// The op families with a setting of their own (PyTorch: torch.backends.cuda.matmul and
/// torch.backends.cudnn.conv).
enum class Float32OpFamily : uint8_t {
  matmul,  ///< matmul, linear, linear_gelu, linear_cross_entropy, scaled_dot_product_attention
  conv,    ///< conv2d and its backward
};

/// "ieee" or "tf32".
const char* float32_precision_name(Float32Precision precision);
/// "matmul" or "conv".
const char* float32_op_family_name(Float32OpFamily family);

/// The CUDA setting of a family. Defaults (PyTorch's): matmul ieee, conv tf32.
Float32Precision float32_precision(Float32OpFamily family);
/// Sets a family's CUDA precision for the whole process (PyTorch: torch.backends.cuda.matmul.allow_tf32,
/// torch.backends.cudnn.allow_tf32, or their fp32_precision).
void set_float32_precision(Float32OpFamily family, Float32Precision precision);
/// The setting of a family on a device type: CUDA's (above) or the CPU's (PyTorch:
/// torch.backends.mkldnn.{matmul,conv}.fp32_precision; both ieee by default).
Float32Precision float32_precision(Float32OpFamily family, DeviceType device);
/// Sets a family's precision on a device type for the whole process.
void set_float32_precision(Float32OpFamily family, Float32Precision precision, DeviceType device);
/// Sets both families on every device type (PyTorch: torch.backends.fp32_precision): ieee is
/// "highest" everywhere (FMA-only f32, direct convolutions), tf32 is "high" everywhere.
void set_float32_precision(Float32Precision precision);

/// PyTorch's torch.set_float32_matmul_precision: sets the matmul family only ("highest": ieee;
/// "high": tf32; "medium": tf32 too, as precis has no bf16 path for f32 GEMMs). Convolutions keep
/// their own setting, as in PyTorch. Throws ValueError naming the value and the accepted ones.
void set_float32_matmul_precision(std::string_view precision);
/// PyTorch's torch.get_float32_matmul_precision: "highest" (matmul family ieee) or "high" (tf32;
/// also after "medium" was set).
std::string float32_matmul_precision();

/// The family whose setting an op's f32 kernels follow, or nullopt for an op that runs no GEMM or
/// convolution of its own (elementwise, reductions, normalisation: always IEEE).
std::optional<Float32OpFamily> float32_op_family(OpId op);
/// What an f32 call of `op` on a `device` computes in now: tf32 only on CUDA, for an op of a family
/// set to tf32; ieee otherwise (the CPU has no TF32 products: its Winograd convolutions compute in
/// fp32). The CUDA kernels and amp::Audit ask this. (TF32 needs an Ampere or newer GPU; precis
/// builds for sm_90.)
Float32Precision float32_precision(OpId op, DeviceType device);
/// Whether a call of `op` on `device` with `dtype` operands computes in TF32: dtype f32 and
/// float32_precision(op, device) tf32. f64, f16 and bf16 never do.
bool uses_tf32(OpId op, DeviceType device, DType dtype);

/// RAII guard: sets one family on one device type, or both everywhere, until it goes out of scope,
/// then restores every previous setting. Process-wide like the setting (see the file comment); nest
/// guards in reverse order of construction.
class Float32PrecisionGuard {
 public:
  /// Sets `family` to `precision` on `device` (CUDA by default, as set_float32_precision(family, p)).
  Float32PrecisionGuard(Float32OpFamily family, Float32Precision precision, DeviceType device = DeviceType::cuda);
  /// Sets both families on every device type to `precision` (ieee: "highest" everywhere).
  explicit Float32PrecisionGuard(Float32Precision precision);
  ~Float32PrecisionGuard();
  Float32PrecisionGuard(const Float32PrecisionGuard&) = delete;
  Float32PrecisionGuard& operator=(const Float32PrecisionGuard&) = delete;

 private:
  Float32Precision cuda_matmul_, cuda_conv_, cpu_matmul_, cpu_conv_;
};

}  // namespace precis
