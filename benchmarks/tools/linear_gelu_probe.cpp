// linear_gelu_probe: CPU time of linear_gelu forward + backward against the unfused
// gelu(linear()) at BERT-mini's intermediate layer (x (2048, 256), W (1024, 256), b (1024);
// bf16 or f32), with linear_gelu in both of its modes: "deriv" (gelu' computed in forward and
// kept in fp32, backward a multiply; the default) and "pre" (the GEMM's output kept, gelu'
// computed in backward). `step`: the whole op with autograd (x, W and b gradients); `epi`: the
// element-wise passes alone on one (2048, 1024) tensor (pair: the gelu, gelu_backward and sum
// kernels; deriv / pre: the two epilogue kernels). Variants run alternated (pair, deriv, pre, pre,
// deriv, pair, ...) so a loaded machine disturbs all alike; each figure is the best of `reps` of
// process CPU time (getrusage: user + sys, all threads).
// Build (against a CPU-only Release build dir B of a source tree S), as cefused_probe.cpp:
//   g++ -O2 -std=c++20 -fopenmp -DPRECIS_HAS_ONEDNN=1 -IS -IB/precis-include linear_gelu_probe.cpp \
//       B/libprecis.a -ldnnl -lOpenCL -ldl -lgomp -lpthread -lmpi_cxx -lmpi -lz -lprotobuf -lisal
// Run:   ./linear_gelu_probe step|epi bf16|f32 [threads] [rounds] [reps]

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

#include "autograd/engine.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "ops/functional.h"
#include "ops/contracts/kernels.h"
#include "ops/contracts/kernels_epilogue.h"
#include "ops/op_table.h"
#include "tensor/factory.h"
#include <omp.h>
#include "benchmarks/tools/probe_time.h"
using namespace precis;


int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "step";
  const DType dt = argc > 2 && std::string(argv[2]) == "f32" ? DType::f32 : DType::bf16;
  const int threads = argc > 3 ? std::atoi(argv[3]) : 2;
  const int rounds = argc > 4 ? std::atoi(argv[4]) : 3;
  const int reps = argc > 5 ? std::atoi(argv[5]) : 5;
  set_num_threads(threads);
  omp_set_num_threads(threads);
  const int64_t M = 2048, K = 256, N = 1024;
  const DType acc = DType::f32;
  Generator gen(1);
  const Tensor x = randn({M, K}, {}, &gen).to(dt).requires_grad_();
  const Tensor w = mul(randn({N, K}, {}, &gen), 0.0625).to(dt).requires_grad_();
  const Tensor b = mul(randn({N}, {}, &gen), 0.1).to(dt).requires_grad_();
  const Tensor g = randn({M, N}, {}, &gen).to(dt);
  const Tensor pre = randn({M, N}, {}, &gen).to(dt);

  // variant: 0 pair, 1 linear_gelu keeping gelu', 2 linear_gelu keeping the GEMM's output.
  std::function<void(int)> step;
  if (what == "step") {
    step = [&](int v) {
      detail::linear_gelu_saves_derivative() = v == 1;
      const Tensor y = v == 0 ? gelu(linear(x, w, b)) : linear_gelu(x, w, b);
      (void)autograd::grad({y}, {x, w, b}, {g});
    };
  } else {
    const Tensor out = empty({M, N}, {.dtype = dt}), deriv = empty({M, N}, {.dtype = acc}),
                 gp = empty({M, N}, {.dtype = dt}), gb = empty({N}, {.dtype = dt});
    step = [=](int v) {
      if (v == 0) {
        kernel<kernels::UnaryKernel>(OpId::gelu, DeviceType::cpu, dt)(out, pre, 0.0);
        kernel<kernels::BinaryKernel>(OpId::gelu_backward, DeviceType::cpu, dt)(gp, g, pre, 0.0);
        kernel<kernels::ReduceKernel>(OpId::sum, DeviceType::cpu, dt)(gb.view({1, N}), gp, {0});
      } else {
        const bool keep = v == 1;
        kernel<kernels::GeluEpilogueKernel>(OpId::gelu_epilogue, DeviceType::cpu, dt)(out, keep ? deriv : Tensor(),
                                                                                      pre, 0.0);
        kernel<kernels::GeluEpilogueBackwardKernel>(OpId::gelu_epilogue_backward, DeviceType::cpu, dt)(
            gp, gb, g, keep ? deriv : pre, keep, 0.0);
      }
    };
  }
  for (int v : {0, 1, 2}) step(v);  // warm-up: allocations, oneDNN primitives
  std::printf("%s %s threads %d: best of %d CPU ms per round (order pair, deriv, pre, pre, deriv, pair)\n",
              what.c_str(), std::string(dtype_name(dt)).c_str(), threads, reps);
  for (int r = 0; r < rounds; ++r) {
    double best[3] = {1e30, 1e30, 1e30};
    for (int v : {0, 1, 2, 2, 1, 0}) best[v] = std::min(best[v], probe::best_cpu_ms(reps, [&] { step(v); }));
    std::printf("round %d: pair %.2f deriv %.2f pre %.2f  deriv/pair %.3f pre/pair %.3f\n", r, best[0], best[1],
                best[2], best[1] / best[0], best[2] / best[0]);
  }
  detail::linear_gelu_saves_derivative() = true;
  return 0;
}
