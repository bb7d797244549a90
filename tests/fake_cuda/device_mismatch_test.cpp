// Operands on two devices, as a user mixing a CPU target with CUDA logits makes them: the losses'
// errors name every operand's device and say how to move them (the fake CUDA device provides the
// second device without a GPU).
#include <cmath>

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

TEST_CASE("a 0-d CPU tensor beside a device tensor is a scalar there, as in PyTorch") {
  require_fake_device();
  const Device dev = Device::cuda(0);
  const Tensor x0 = randn({3, 4});
  const Tensor x = x0.to(dev), two = full({}, 2.5), n = full({}, 3, {.dtype = DType::i64});
  // Arithmetic, comparisons and the reverse order; the result stays on the device.
  const Tensor y = add(mul(x, two), div(x, n));
  CHECK(y.device() == dev);
  PRECIS_REQUIRE_SAME_BITS(y.to(Device::cpu()), add(mul(x0, two), div(x0, n)));
  PRECIS_REQUIRE_SAME_BITS(gt(two, x).to(Device::cpu()), gt(two, x0));
  PRECIS_REQUIRE_SAME_BITS(maximum(two, x).to(Device::cpu()), maximum(two, x0));
  // Its dtype promotes as a 0-d tensor's: an i64 one beside f32 keeps f32, an f64 one too.
  CHECK(mul(x, n).dtype() == DType::f32);
  CHECK(mul(x, full({}, 2.0, {.dtype = DType::f64})).dtype() == DType::f32);
  // A CPU scalar that needs a gradient gets it, on the CPU.
  const Tensor s = full({}, 1.5).requires_grad_();
  const Tensor xl = x0.to(dev).detach().requires_grad_();
  sum(mul(xl, s)).backward();
  REQUIRE(s.grad().defined());
  CHECK(s.grad().device().is_cpu());
  CHECK(std::abs(s.grad().item<float>() - sum(x0).item<float>()) <= 1e-4f);
  PRECIS_REQUIRE_SAME_BITS(xl.grad().to(Device::cpu()), full({3, 4}, 1.5));
  // A CPU tensor with dimensions is still refused: it is data on another device, not a scalar.
  PRECIS_REQUIRE_THROWS_WITH_ALL(add(x, randn({4})), DeviceError, "add", "cuda:0", "cpu", ".to(cuda:0)");
}
