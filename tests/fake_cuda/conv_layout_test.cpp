// conv2d on the fake device with channels-last activations: ops/conv.cpp then hands the kernels a
// channels-last weight (cuDNN's NHWC filter) and wants the weight gradient so; the fake device
// must still compute what the CPU does, or every channels-last network checked on it (ResNet's
// `-cl` variants) is checked against wrong numbers.
#include "precis.h"
#include "tests/fake_cuda/fake_device.h"
#include "tests/support/tensor_testing.h"

using namespace precis;
using precis::fake_cuda_testing::require_fake_device;

TEST_CASE("conv2d with channels-last activations on the fake device computes the CPU's values") {
  require_fake_device();
  struct Case {
    int64_t groups, stride, padding;
  };
  for (const Case c : {Case{1, 1, 1}, Case{2, 2, 0}}) {
    for (DType dt : {DType::f64, DType::f32}) {
      INFO("groups " << c.groups << ", stride " << c.stride << ", " << dtype_name(dt));
      const Tensor x0 = randn({2, 4, 7, 6}).to(dt), w0 = randn({6, 4 / c.groups, 3, 3}).to(dt),
                   b0 = randn({6}).to(dt);
      const auto run = [&](Device device) {
        const Tensor x = contiguous(x0.to(device), MemoryFormat::ChannelsLast).detach().requires_grad_();
        const Tensor w = w0.to(device).detach().requires_grad_(), b = b0.to(device).detach().requires_grad_();
        const Tensor y = conv2d(x, w, b, {c.stride, c.stride}, {c.padding, c.padding}, {1, 1}, c.groups);
        sum(mul(y, y)).backward();
        return std::vector<Tensor>{y.to(Device::cpu()).contiguous(), x.grad().to(Device::cpu()).contiguous(),
                                   w.grad().to(Device::cpu()), b.grad().to(Device::cpu())};
      };
      const std::vector<Tensor> cpu = run(Device::cpu()), dev = run(Device::cuda(0));
      for (size_t k = 0; k < cpu.size(); ++k) {
        INFO("output " << k << " (y, dx, dw, db)");
        PRECIS_REQUIRE_CLOSE(dev[k], cpu[k], dt);
      }
    }
  }
}

TEST_CASE("conv_transpose2d on the fake device computes the CPU's values, NCHW and channels-last") {
  require_fake_device();
  for (bool channels_last : {false, true}) {
    for (DType dt : {DType::f64, DType::f32}) {
      INFO((channels_last ? "channels-last " : "NCHW ") << dtype_name(dt));
      const Tensor x0 = randn({2, 4, 5, 6}).to(dt), w0 = randn({4, 3, 3, 3}).to(dt), b0 = randn({6}).to(dt);
      const auto run = [&](Device device) {
        Tensor x = x0.to(device);
        if (channels_last) x = contiguous(x, MemoryFormat::ChannelsLast);
        x = x.detach().requires_grad_();
        const Tensor w = w0.to(device).detach().requires_grad_(), b = b0.to(device).detach().requires_grad_();
        const Tensor y = conv_transpose2d(x, w, b, {2}, {1}, {1}, 2);
        sum(mul(y, y)).backward();
        return std::vector<Tensor>{y.to(Device::cpu()).contiguous(), x.grad().to(Device::cpu()).contiguous(),
                                   w.grad().to(Device::cpu()), b.grad().to(Device::cpu())};
      };
      const std::vector<Tensor> cpu = run(Device::cpu()), dev = run(Device::cuda(0));
      for (size_t k = 0; k < cpu.size(); ++k) {
        INFO("output " << k << " (y, dx, dw, db)");
        PRECIS_REQUIRE_CLOSE(dev[k], cpu[k], dt);
      }
    }
  }
}
