#pragma once
// One op on the CPU and on cuda:0 from the same inputs: outputs, then every input gradient after
// one seeded backward, each within the dtype's tolerance for the op (tests/support/tolerance).
// Shared by the CUDA kernel tests that check ops through their public front-ends.
#include <catch2/catch.hpp>

#include <functional>
#include <vector>

#include "core/device.h"
#include "tests/support/tensor_testing.h"

namespace precis::testing {

/// A CPU leaf of `dtype` in [lo, hi), requiring grad when asked.
inline Tensor leaf(const Shape& shape, double lo, double hi, uint64_t seed, DType dtype, bool grad = true) {
  Tensor t = uniform_input(shape, lo, hi, false, seed).to(dtype);
  if (grad) t.requires_grad_();
  return t;
}

/// The same values on cuda:0, a leaf with the same requires_grad (undefined stays undefined).
inline Tensor on_gpu(const Tensor& t) {
  if (!t.defined()) return t;
  Tensor g = t.detach().to(Device::cuda(0));
  if (t.requires_grad()) g.requires_grad_();
  return g;
}

/// gpu (read back) within the tolerance of `op` in `dt` of cpu.
inline void require_close(const Tensor& gpu, const Tensor& cpu, DType dt, OpId op, Compared what) {
  const std::string report = allclose_report(gpu.to(Device::cpu()).to(DType::f64), cpu.to(DType::f64),
                                             tolerance(dt, op, what));
  INFO(report);
  REQUIRE(report.empty());
}

using CpuGpuFn = std::function<Tensor(const std::vector<Tensor>&)>;

/// f on the CPU inputs and on their CUDA copies; compares the outputs, then backpropagates one
/// seeded gradient through both and compares every input's gradient (inputs requiring grad).
inline void compare_with_cpu(OpId op, DType dt, const std::vector<Tensor>& cpu_in, const CpuGpuFn& f) {
  std::vector<Tensor> gpu_in;
  for (const Tensor& t : cpu_in) gpu_in.push_back(on_gpu(t));
  const Tensor y_cpu = f(cpu_in), y_gpu = f(gpu_in);
  REQUIRE(y_gpu.device() == Device::cuda(0));
  require_close(y_gpu, y_cpu, dt, op, Compared::output);
  if (!y_cpu.requires_grad()) return;
  const Tensor g = uniform_input(y_cpu.sizes(), -1, 1, false, 999).to(y_cpu.dtype());
  y_cpu.backward(g);
  y_gpu.backward(g.to(Device::cuda(0)));
  for (size_t i = 0; i < cpu_in.size(); ++i) {
    if (!cpu_in[i].defined() || !cpu_in[i].requires_grad()) continue;
    INFO("gradient of input " << i);
    REQUIRE(gpu_in[i].grad().defined());
    require_close(gpu_in[i].grad(), cpu_in[i].grad(), dt, op, Compared::gradient);
  }
}

}  // namespace precis::testing
