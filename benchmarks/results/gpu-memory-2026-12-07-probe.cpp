// Probe of benchmarks/results/gpu-memory-2026-12-07-fake-device.md (not built by CMake): a ResNet-50
// (ImageNet layout, 1000 classes) training step as precis-bench's GPU case runs it (autocast, the
// loss scaler for f16, SGD momentum), on the device named, printing that device allocator's
// activation memory (allocated at the end of the forward beyond the parameters and optimizer state)
// and its peak over the step. On the fake CUDA device (PRECIS_CUDA_BACKEND=build/tests/
// libprecis_fake_cuda.so: the real DeviceCachingAllocator over host memory, the CPU kernels, autocast's
// CUDA policy) it shows what the op front-ends keep on a GPU, without what only the CUDA kernels
// allocate (cuDNN workspaces and algorithm search, kernel scratch).
// Build: g++ -O2 -std=c++20 -fopenmp -I. -Ibuild/precis-include THIS.cpp build/libprecis.so.0.1.0 -ldnnl -lgomp
// Run:   PRECIS_CUDA_BACKEND=$PWD/build/tests/libprecis_fake_cuda.so LD_LIBRARY_PATH=build ./a.out f16|bf16|f32 cuda|cpu BATCH SIZE [cl]
#include <cstdio>
#include <cstdlib>
#include <string>

#include "amp/autocast.h"
#include "amp/grad_scaler.h"
#include "core/allocator.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "models/resnet.h"
#include "ops/functional.h"
#include "ops/memory_format.h"
#include "optim/sgd.h"
#include "tensor/factory.h"

using namespace precis;

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s f16|bf16|f32 cuda|cpu BATCH SIZE [cl]\n", argv[0]);
    return 2;
  }
  set_num_threads(2);
  const std::string dt = argv[1], dev = argv[2];
  const int64_t b = std::atoll(argv[3]), hw = std::atoll(argv[4]);
  const bool cl = argc > 5 && std::string(argv[5]) == "cl";
  const Device device = dev == "cuda" ? Device::cuda(0) : Device::cpu();
  manual_seed(1);
  auto model = models::resnet50({.num_classes = 1000});
  model->to(device);
  model->train();
  optim::SGD opt(model->parameters(), {.lr = 1e-3, .momentum = 0.9});
  const bool amp = dt != "f32";
  amp::GradScaler scaler({.enabled = dt == "f16", .device = device});
  Tensor x = contiguous(randn({b, 3, hw, hw}).to(device), cl ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous);
  Tensor y = randint(0, 1000, {b}).to(device);
  Allocator& a = allocator_for(device);
  for (int s = 0; s < 3; ++s) {
    opt.zero_grad();
    const size_t before = a.stats().allocated;
    a.reset_peak_stats();
    Tensor loss;
    {
      amp::Autocast ac(dt == "bf16" ? DType::bf16 : DType::f16, device.type, amp);
      loss = cross_entropy(model->forward(x), y);
    }
    const size_t fwd = a.stats().allocated;
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
    std::printf("%s %s %s b%lld %lld step %d: before %.1f MiB, activations %.1f MiB, step peak %.1f MiB\n", dev.c_str(),
                dt.c_str(), cl ? "cl" : "nchw", static_cast<long long>(b), static_cast<long long>(hw), s,
                before / 1048576.0, (fwd - before) / 1048576.0, a.stats().peak_allocated / 1048576.0);
  }
}
