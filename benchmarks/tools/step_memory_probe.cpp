// step_memory_probe: the CPU allocator's peak over one ResNet-50 training step (forward, backward,
// SGD momentum), in f32 and in bf16 autocast — what a change to what autograd saves does to memory.
// Build (from the repo root, after building build/):
//   g++ -O1 -std=c++20 -I. -Ibuild/precis-include benchmarks/tools/step_memory_probe.cpp -Lbuild -lprecis \
//       -Wl,-rpath,$PWD/build -o build/step_memory_probe
// Run:   ./build/step_memory_probe [f32|bf16] [batch] [image side]
// Prints per step: the loss and the peak allocated bytes above what was live before the step
// (parameters, momentum and the data). Step 0 also holds first-use buffers; read step 1.
#include <precis/precis.h>

#include <cstdio>
#include <cstdlib>
#include <string>

using namespace precis;

int main(int argc, char** argv) {
  const bool bf16 = argc > 1 && std::string(argv[1]) == "bf16";
  const int64_t batch = argc > 2 ? std::atoll(argv[2]) : 8, side = argc > 3 ? std::atoll(argv[3]) : 112;
  manual_seed(1);
  auto model = models::resnet50({.num_classes = 100});
  const Tensor x = contiguous(randn({batch, 3, side, side}), MemoryFormat::ChannelsLast);
  const Tensor y = randint(0, 100, {batch});
  optim::SGD opt(model->parameters(), optim::SGDOptions{.lr = 1e-3, .momentum = 0.9});
  Allocator& a = allocator_for(Device::cpu());
  for (int step = 0; step < 2; ++step) {
    a.reset_peak_stats();
    const size_t before = a.stats().allocated;
    opt.zero_grad();
    Tensor loss;
    {
      amp::Autocast ac(DType::bf16, DeviceType::cpu, bf16);
      loss = cross_entropy(model->forward(x), y);
    }
    loss.backward();
    opt.step();
    std::printf("%s b%lld %lldx%lld step %d: loss %.6f, peak above live %.1f MiB\n", bf16 ? "bf16" : "f32",
                static_cast<long long>(batch), static_cast<long long>(side), static_cast<long long>(side), step,
                loss.item<double>(), (a.stats().peak_allocated - before) / 1048576.0);
  }
}
