// Operands on two devices, as a user mixing a CPU target with CUDA logits makes them: the losses'
// errors name every operand's device and say how to move them (the fake CUDA device provides the
// second device without a GPU).
#include "precis.h"
#include "tests/fake_cuda/fake_device.h"
#include "tests/support/tensor_testing.h"

using namespace precis;
using precis::fake_cuda_testing::require_fake_device;

TEST_CASE("the losses refuse operands on two devices, naming them and the fix") {
  require_fake_device();
  const Device dev = Device::cuda(0);
  const Tensor logits = randn({4, 3}).to(dev), target = from_vector<int64_t>({0, 2, 1, 0});
  PRECIS_REQUIRE_THROWS_WITH_ALL(cross_entropy(logits, target), DeviceError, "cross_entropy", "cuda:0", "cpu",
                                 "target.to(input.device())");
  PRECIS_REQUIRE_THROWS_WITH_ALL(nll_loss(log_softmax(logits, 1), target), DeviceError, "nll_loss", "cuda:0",
                                 "target.to(input.device())");
  PRECIS_REQUIRE_THROWS_WITH_ALL(mse_loss(logits, randn({4, 3})), DeviceError, "mse_loss", "cuda:0", "cpu",
                                 ".to(cuda:0)");
  const Tensor w = randn({5, 3}).to(dev);
  PRECIS_REQUIRE_THROWS_WITH_ALL(linear_cross_entropy(logits, w, Tensor(), from_vector<int64_t>({0, 4, 1, 0})),
                                 DeviceError, "linear_cross_entropy", "cuda:0", "target.to(input.device())");
}
