#include "ops/float32_precision.h"

#include <atomic>

#include "core/error.h"

namespace precis {

namespace {
// Relaxed: each kernel call reads its family's setting once and keys its plan on what it read, so
// no other memory needs ordering against a change.
std::atomic<Float32Precision> g_matmul{Float32Precision::ieee};  // torch.backends.cuda.matmul.allow_tf32 = False
std::atomic<Float32Precision> g_conv{Float32Precision::tf32};    // torch.backends.cudnn.allow_tf32 = True
std::atomic<Float32Precision> g_cpu_matmul{Float32Precision::ieee};  // torch.backends.mkldnn.matmul.fp32_precision
std::atomic<Float32Precision> g_cpu_conv{Float32Precision::ieee};    // torch.backends.mkldnn.conv.fp32_precision

std::atomic<Float32Precision>& setting(Float32OpFamily family, DeviceType device = DeviceType::cuda) {
  if (device == DeviceType::cpu) return family == Float32OpFamily::matmul ? g_cpu_matmul : g_cpu_conv;
  return family == Float32OpFamily::matmul ? g_matmul : g_conv;
}
}  // namespace

const char* float32_precision_name(Float32Precision precision) {
  return precision == Float32Precision::tf32 ? "tf32" : "ieee";
}

const char* float32_op_family_name(Float32OpFamily family) {
  return family == Float32OpFamily::matmul ? "matmul" : "conv";
}

Float32Precision float32_precision(Float32OpFamily family) { return setting(family).load(std::memory_order_relaxed); }

void set_float32_precision(Float32OpFamily family, Float32Precision precision) {
  setting(family).store(precision, std::memory_order_relaxed);
}

Float32Precision float32_precision(Float32OpFamily family, DeviceType device) {
  return setting(family, device).load(std::memory_order_relaxed);
}

void set_float32_precision(Float32OpFamily family, Float32Precision precision, DeviceType device) {
  setting(family, device).store(precision, std::memory_order_relaxed);
}

void set_float32_precision(Float32Precision precision) {
  for (DeviceType device : {DeviceType::cuda, DeviceType::cpu}) {
    set_float32_precision(Float32OpFamily::matmul, precision, device);
    set_float32_precision(Float32OpFamily::conv, precision, device);
  }
}

void set_float32_matmul_precision(std::string_view precision) {
  Float32Precision p;
  if (precision == "highest")
    p = Float32Precision::ieee;
  else if (precision == "high" || precision == "medium")
    p = Float32Precision::tf32;
  else
    throw ValueError(detail::str_cat("set_float32_matmul_precision: \"", precision,
                                     "\" is not a precision; use \"highest\" (IEEE fp32), \"high\" (TF32 on CUDA) "
                                     "or \"medium\" (the same as \"high\" in precis)"));
  set_float32_precision(Float32OpFamily::matmul, p);
}

std::string float32_matmul_precision() {
  return float32_precision(Float32OpFamily::matmul) == Float32Precision::tf32 ? "high" : "highest";
}

std::optional<Float32OpFamily> float32_op_family(OpId op) {
  switch (op) {
    // The composites reach cuBLAS/cuBLASLt through matmul and linear; they are listed so that the
    // answer for an op a user calls is the family of the GEMMs it runs.
    case OpId::matmul:
    case OpId::linear:
    case OpId::linear_gelu:
    case OpId::linear_cross_entropy:
    case OpId::scaled_dot_product_attention:
      return Float32OpFamily::matmul;
    case OpId::conv2d:
    case OpId::conv2d_backward:
      return Float32OpFamily::conv;
    default:
      return std::nullopt;
  }
}

Float32Precision float32_precision(OpId op, DeviceType device) {
  if (device != DeviceType::cuda) return Float32Precision::ieee;
  const std::optional<Float32OpFamily> family = float32_op_family(op);
  return family ? float32_precision(*family) : Float32Precision::ieee;
}

bool uses_tf32(OpId op, DeviceType device, DType dtype) {
  return dtype == DType::f32 && float32_precision(op, device) == Float32Precision::tf32;
}

Float32PrecisionGuard::Float32PrecisionGuard(Float32OpFamily family, Float32Precision precision, DeviceType device)
    : cuda_matmul_(float32_precision(Float32OpFamily::matmul)),
      cuda_conv_(float32_precision(Float32OpFamily::conv)),
      cpu_matmul_(float32_precision(Float32OpFamily::matmul, DeviceType::cpu)),
      cpu_conv_(float32_precision(Float32OpFamily::conv, DeviceType::cpu)) {
  set_float32_precision(family, precision, device);
}

Float32PrecisionGuard::Float32PrecisionGuard(Float32Precision precision)
    : Float32PrecisionGuard(Float32OpFamily::matmul, float32_precision(Float32OpFamily::matmul)) {
  set_float32_precision(precision);
}

Float32PrecisionGuard::~Float32PrecisionGuard() {
  set_float32_precision(Float32OpFamily::matmul, cuda_matmul_);
  set_float32_precision(Float32OpFamily::conv, cuda_conv_);
  set_float32_precision(Float32OpFamily::matmul, cpu_matmul_, DeviceType::cpu);
  set_float32_precision(Float32OpFamily::conv, cpu_conv_, DeviceType::cpu);
}

}  // namespace precis
