// Probe of benchmarks/results/checkpointing-2026-12-07e-zen4-resnet.md (not built by CMake): the CPU
// allocator's activation memory (allocated at the end of the forward beyond the parameters and
// optimizer state) and its peak over a ResNet-18 CIFAR b64 channels-last training step (SGD momentum,
// 2 threads), without checkpointing or with ResNet::set_checkpointing({.mode = full}).
// Build: g++ -O2 -std=c++20 -fopenmp -I. -Ibuild/precis-include THIS.cpp build/libprecis.so.0.1.0 -ldnnl -lgomp
// Run:   LD_LIBRARY_PATH=build ./a.out none|full f32|bf16      (prints three steps; the last is settled)
#include <cstdio>
#include <string>
#include "amp/autocast.h"
#include "autograd/checkpoint.h"
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
  set_num_threads(2);
  const bool ck = argc > 1 && std::string(argv[1]) == "full";
  const bool bf16 = argc > 2 && std::string(argv[2]) == "bf16";
  manual_seed(1);
  auto model = models::resnet18_cifar({.num_classes = 10});
  model->set_checkpointing({.mode = ck ? autograd::CheckpointMode::full : autograd::CheckpointMode::none});
  optim::SGD opt(model->parameters(), {.lr = 1e-3, .momentum = 0.9});
  Tensor x = contiguous(randn({64, 3, 32, 32}), MemoryFormat::ChannelsLast);
  Tensor y = randint(0, 10, {64});
  Allocator& a = cpu_allocator();
  for (int s = 0; s < 3; ++s) {
    opt.zero_grad();
    const size_t before = a.stats().allocated;
    a.reset_peak_stats();
    Tensor loss;
    { amp::Autocast ac(DType::bf16, DeviceType::cpu, bf16); loss = cross_entropy(model->forward(x), y); }
    const size_t fwd = a.stats().allocated;
    loss.backward();
    opt.step();
    std::printf("%s %s step %d: before %.1f MiB, activations %.1f MiB, peak %.1f MiB\n", argv[1], bf16 ? "bf16" : "f32", s,
                before / 1048576.0, (fwd - before) / 1048576.0, a.stats().peak_allocated / 1048576.0);
  }
}
