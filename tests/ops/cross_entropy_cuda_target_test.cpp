// cross_entropy on CUDA does not read its targets back to range-check them (that would wait for
// the device at every call, ops/loss.cpp): the kernels give a row whose target is outside [0, C)
// and not ignore_index a NaN loss and gradient, and leave the other rows as the CPU computes
// them. Tagged [cuda]: tests/gpu/run.sh runs it on the GPU machine.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "autograd/engine.h"
#include "core/rng.h"
#include "ops/functional.h"
#include "tensor/factory.h"
#include "tests/support/tensor_testing.h"

using namespace precis;

TEST_CASE("cross_entropy on CUDA: a target outside 0 to C - 1 gives its row a NaN loss and gradient",
          "[cuda][ops]") {
  PRECIS_REQUIRE_CUDA();
  const Device dev = Device::cuda(0);
  manual_seed(3);
  const Tensor logits = randn({4, 5});
  // Rows 1 and 3 out of range on the device; the CPU reference takes valid classes there.
  const Tensor bad = from_vector<int64_t>({0, 7, -100, -3}, {4});
  const Tensor good = from_vector<int64_t>({0, 4, -100, 2}, {4});

  const std::vector<float> cpu = cross_entropy(logits, good, Tensor(), -100, Reduction::none).to_vector<float>();
  const std::vector<float> gpu =
      cross_entropy(logits.to(dev), bad.to(dev), Tensor(), -100, Reduction::none).to(Device::cpu()).to_vector<float>();
  REQUIRE(gpu.size() == 4);
  CHECK(gpu[0] == Approx(cpu[0]).epsilon(1e-5));
  CHECK(std::isnan(gpu[1]));
  CHECK(gpu[2] == 0.0f);  // ignore_index
  CHECK(std::isnan(gpu[3]));
  CHECK(std::isnan(cross_entropy(logits.to(dev), bad.to(dev)).item<float>()));  // the mean shows it

  // Summed, each row's gradient is its own: row 0 as the CPU's, row 2 zero, rows 1 and 3 NaN.
  const Tensor xc = logits.clone().requires_grad_();
  cross_entropy(xc, good, Tensor(), -100, Reduction::sum).backward();
  const Tensor xg = logits.to(dev).requires_grad_();
  cross_entropy(xg, bad.to(dev), Tensor(), -100, Reduction::sum).backward();
  const std::vector<float> gc = xc.grad().to_vector<float>();
  const std::vector<float> gg = xg.grad().to(Device::cpu()).to_vector<float>();
  REQUIRE(gg.size() == 20);
  for (int j = 0; j < 5; ++j) {
    INFO("class " << j);
    CHECK(gg[j] == Approx(gc[j]).margin(1e-6));
    CHECK(std::isnan(gg[5 + j]));
    CHECK(gg[10 + j] == 0.0f);
    CHECK(std::isnan(gg[15 + j]));
  }
}
