// The host-side planning of library convolutions (ops/math/conv_plan.h): layout detection, output
// sizes, the dims and strides given to cuDNN's descriptors, int32 limits, the plan-cache key and
// the cache itself. Runs on every machine; the cuDNN calls built from these are checked on a GPU by
// tests/cuda/conv_linear_cuda_test.cpp.
#include <climits>
#include <set>
#include <thread>
#include <vector>

#include "ops/math/conv_plan.h"
#include "ops/functional.h"
#include "tensor/factory.h"
#include "tests/support/tensor_testing.h"

namespace precis {
namespace {

using kernels::Conv2dParams;
using kernels::ConvLayout;
using kernels::ConvPass;
using kernels::ConvProblem;

Tensor channels_last(const Tensor& t) { return t.permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2}); }

Conv2dParams params(int64_t s0, int64_t s1, int64_t p0, int64_t p1, int64_t d0, int64_t d1, int64_t g) {
  Conv2dParams p;
  p.stride[0] = s0, p.stride[1] = s1, p.padding[0] = p0, p.padding[1] = p1, p.dilation[0] = d0, p.dilation[1] = d1;
  p.groups = g;
  return p;
}

}  // namespace

TEST_CASE("conv_layout_of tells contiguous from channels-last tensors", "[ops][conv_plan]") {
  const Tensor x = zeros({2, 3, 4, 5});
  CHECK(kernels::conv_layout_of(x.sizes(), x.strides()) == ConvLayout::nchw);
  const Tensor cl = channels_last(x);
  CHECK(cl.strides() == Shape({60, 1, 15, 3}));
  CHECK(kernels::conv_layout_of(cl.sizes(), cl.strides()) == ConvLayout::nhwc);
  CHECK(kernels::conv_is_dense(cl.sizes(), cl.strides(), ConvLayout::nhwc));
  CHECK_FALSE(kernels::conv_is_dense(cl.sizes(), cl.strides(), ConvLayout::nchw));
  // Neither: a slice, another permutation, a broadcast, not 4-D.
  const Tensor sliced = x.slice(3, 0, 4);
  CHECK_FALSE(kernels::conv_layout_of(sliced.sizes(), sliced.strides()).has_value());
  const Tensor swapped = x.permute({0, 1, 3, 2});
  CHECK_FALSE(kernels::conv_layout_of(swapped.sizes(), swapped.strides()).has_value());
  const Tensor expanded = zeros({1, 3, 4, 5}).expand({2, 3, 4, 5});
  CHECK_FALSE(kernels::conv_layout_of(expanded.sizes(), expanded.strides()).has_value());
  CHECK_FALSE(kernels::conv_layout_of({3, 4, 5}, {20, 5, 1}).has_value());
  // One channel (or 1×1 planes): both layouts describe the same memory; NCHW is reported, and a
  // size-1 dim's arbitrary stride does not matter.
  const Tensor one_channel = channels_last(zeros({2, 1, 4, 5}));
  CHECK(kernels::conv_layout_of(one_channel.sizes(), one_channel.strides()) == ConvLayout::nchw);
  CHECK(kernels::conv_is_dense(one_channel.sizes(), one_channel.strides(), ConvLayout::nhwc));
  CHECK(kernels::conv_layout_of({2, 8, 1, 1}, {8, 1, 99, 7}) == ConvLayout::nchw);
}

TEST_CASE("conv_dense_strides gives NCHW and NHWC strides, zero sizes counted as one", "[ops][conv_plan]") {
  using S = std::array<int64_t, 4>;
  CHECK(kernels::conv_dense_strides(S{2, 3, 4, 5}, ConvLayout::nchw) == S{60, 20, 5, 1});
  CHECK(kernels::conv_dense_strides(S{2, 3, 4, 5}, ConvLayout::nhwc) == S{60, 1, 15, 3});
  CHECK(kernels::conv_dense_strides(S{0, 0, 4, 5}, ConvLayout::nchw) == S{20, 20, 5, 1});
  CHECK(kernels::conv_dense_strides(S{2, 3, 0, 5}, ConvLayout::nhwc) == S{15, 1, 15, 3});
}

TEST_CASE("conv2d_out_size follows PyTorch's output-size rule", "[ops][conv_plan]") {
  // floor((in + 2p - d(k-1) - 1) / s) + 1, values checked against torch.nn.functional.conv2d.
  CHECK(kernels::conv2d_out_size(32, 3, 1, 1, 1) == 32);
  CHECK(kernels::conv2d_out_size(224, 7, 2, 3, 1) == 112);
  CHECK(kernels::conv2d_out_size(56, 1, 2, 0, 1) == 28);
  CHECK(kernels::conv2d_out_size(10, 3, 3, 0, 2) == 2);  // span 5: (10 - 5) / 3 + 1
  CHECK(kernels::conv2d_out_size(7, 3, 2, 0, 1) == 3);
  CHECK(kernels::conv2d_out_size(2, 5, 1, 0, 1) == 0);   // does not fit
}

TEST_CASE("make_conv_problem and conv_descriptor_dims describe a convolution for cuDNN", "[ops][conv_plan]") {
  const ConvProblem pr = kernels::make_conv_problem({8, 64, 56, 56}, {128, 32, 3, 3}, params(2, 1, 1, 0, 1, 2, 2),
                                                    DType::f16, ConvLayout::nhwc);
  CHECK(pr.n == 8);
  CHECK(pr.c == 64);
  CHECK(pr.o == 128);
  CHECK(pr.ho == 28);  // (56 + 2 - 2 - 1) / 2 + 1
  CHECK(pr.wo == 52);  // (56 - 4 - 1) / 1 + 1
  const kernels::ConvDescriptorDims d = kernels::conv_descriptor_dims(pr);
  CHECK(d.x_dims == std::array<int, 4>{8, 64, 56, 56});
  CHECK(d.x_strides == std::array<int, 4>{56 * 56 * 64, 1, 56 * 64, 64});
  CHECK(d.y_dims == std::array<int, 4>{8, 128, 28, 52});
  CHECK(d.y_strides == std::array<int, 4>{28 * 52 * 128, 1, 52 * 128, 128});
  CHECK(d.w_dims == std::array<int, 4>{128, 32, 3, 3});  // C / groups
  CHECK(d.pad == std::array<int, 2>{1, 0});
  CHECK(d.stride == std::array<int, 2>{2, 1});
  CHECK(d.dilation == std::array<int, 2>{1, 2});
  CHECK(d.groups == 2);
  const std::string text = kernels::describe(pr);
  CHECK(text.find("f16 NHWC") != std::string::npos);
  CHECK(text.find("x (8, 64, 56, 56) w (128, 32, 3, 3) -> (8, 128, 28, 52)") != std::string::npos);
  CHECK(text.find("groups 2") != std::string::npos);

  const ConvProblem nchw = kernels::make_conv_problem({2, 3, 5, 7}, {4, 3, 2, 2}, params(1, 1, 0, 0, 1, 1, 1),
                                                      DType::f32, ConvLayout::nchw);
  const kernels::ConvDescriptorDims dn = kernels::conv_descriptor_dims(nchw);
  CHECK(dn.x_strides == std::array<int, 4>{105, 35, 7, 1});
  CHECK(dn.y_dims == std::array<int, 4>{2, 4, 4, 6});
  CHECK(dn.y_strides == std::array<int, 4>{96, 24, 6, 1});
}

TEST_CASE("conv plans reject inconsistent shapes and sizes beyond cuDNN's int32", "[ops][conv_plan]") {
  const Conv2dParams p1 = params(1, 1, 0, 0, 1, 1, 1);
  PRECIS_REQUIRE_THROWS_WITH_ALL(
      kernels::make_conv_problem({2, 6, 5, 5}, {4, 4, 3, 3}, params(1, 1, 0, 0, 1, 1, 2), DType::f32, ConvLayout::nchw),
      ShapeError, "C = w.size(1)", "groups (2)");
  PRECIS_REQUIRE_THROWS_WITH_ALL(kernels::make_conv_problem({2, 3, 5}, {4, 3, 3, 3}, p1, DType::f32, ConvLayout::nchw),
                                 ShapeError, "x of 3 dims");
  // 2^31 input elements: representable in int64, not in cuDNN's int descriptors.
  const ConvProblem big = kernels::make_conv_problem({1 << 16, 32, 32, 32}, {8, 32, 1, 1}, p1, DType::f16,
                                                     ConvLayout::nchw);
  PRECIS_REQUIRE_THROWS_WITH_ALL(kernels::conv_descriptor_dims(big), NotImplementedError, "input",
                                 "2^31-1 elements", "x (65536, 32, 32, 32)", "Split the batch");
  ConvProblem huge_pad = kernels::make_conv_problem({1, 1, 4, 4}, {1, 1, 1, 1}, p1, DType::f32, ConvLayout::nchw);
  huge_pad.p.padding[0] = int64_t{INT_MAX} + 1;
  PRECIS_REQUIRE_THROWS_WITH_ALL(kernels::conv_descriptor_dims(huge_pad), NotImplementedError, "padding",
                                 "2147483648", "exceeds int32");
}

TEST_CASE("conv plan keys differ in every field that changes the algorithm choice", "[ops][conv_plan]") {
  const ConvProblem base = kernels::make_conv_problem({4, 16, 8, 8}, {32, 16, 3, 3}, params(1, 1, 1, 1, 1, 1, 1),
                                                      DType::f16, ConvLayout::nchw);
  const kernels::PlanKey k0 = kernels::conv_plan_key(ConvPass::forward, base, 0, 256, true, false);
  CHECK(k0 == kernels::conv_plan_key(ConvPass::forward, base, 0, 256, true, false));
  CHECK(kernels::PlanKeyHash{}(k0) == kernels::PlanKeyHash{}(kernels::conv_plan_key(ConvPass::forward, base, 0, 256, true, false)));

  std::vector<kernels::PlanKey> variants;
  variants.push_back(kernels::conv_plan_key(ConvPass::backward_data, base, 0, 256, true, false));
  variants.push_back(kernels::conv_plan_key(ConvPass::backward_filter, base, 0, 256, true, false));
  variants.push_back(kernels::conv_plan_key(ConvPass::forward, base, 1, 256, true, false));
  variants.push_back(kernels::conv_plan_key(ConvPass::forward, base, 0, 2, true, false));
  variants.push_back(kernels::conv_plan_key(ConvPass::forward, base, 0, 256, false, false));
  variants.push_back(kernels::conv_plan_key(ConvPass::forward, base, 0, 256, true, true));
  auto with = [&](auto edit) {
    ConvProblem p = base;
    edit(p);
    variants.push_back(kernels::conv_plan_key(ConvPass::forward, p, 0, 256, true, false));
  };
  with([](ConvProblem& p) { p.dtype = DType::bf16; });
  with([](ConvProblem& p) { p.layout = ConvLayout::nhwc; });
  with([](ConvProblem& p) { p.n = 5; });
  with([](ConvProblem& p) { p.c = 17; });
  with([](ConvProblem& p) { p.h = 9; });
  with([](ConvProblem& p) { p.w = 9; });
  with([](ConvProblem& p) { p.o = 33; });
  with([](ConvProblem& p) { p.kh = 1; });
  with([](ConvProblem& p) { p.kw = 1; });
  with([](ConvProblem& p) { p.ho = 7; });
  with([](ConvProblem& p) { p.wo = 7; });
  with([](ConvProblem& p) { p.p.stride[0] = 2; });
  with([](ConvProblem& p) { p.p.stride[1] = 2; });
  with([](ConvProblem& p) { p.p.padding[0] = 0; });
  with([](ConvProblem& p) { p.p.padding[1] = 0; });
  with([](ConvProblem& p) { p.p.dilation[0] = 2; });
  with([](ConvProblem& p) { p.p.dilation[1] = 2; });
  with([](ConvProblem& p) { p.p.groups = 2; });
  std::set<kernels::PlanKey> distinct(variants.begin(), variants.end());
  distinct.insert(k0);
  CHECK(distinct.size() == variants.size() + 1);
}

TEST_CASE("PlanCache keeps the first value stored for a key, across threads", "[ops][conv_plan]") {
  kernels::PlanCache<int> cache;
  const kernels::PlanKey a{1, 2, 3}, b{1, 2, 4};
  CHECK_FALSE(cache.find(a).has_value());
  CHECK(cache.insert(a, 10) == 10);
  CHECK(cache.insert(a, 11) == 10);  // a second planner of the same problem gets the first answer
  CHECK(cache.find(a) == 10);
  CHECK_FALSE(cache.find(b).has_value());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&cache, t] {
      for (int64_t i = 0; i < 200; ++i) cache.insert({i, 7}, static_cast<int>(i * 10 + t));
    });
  for (std::thread& t : threads) t.join();
  CHECK(cache.size() == 201);
  for (int64_t i = 0; i < 200; ++i) {
    const std::optional<int> v = cache.find({i, 7});
    REQUIRE(v.has_value());
    CHECK(*v / 10 == i);
  }
}

TEST_CASE("common_alignment is the largest power of two dividing every address", "[ops][conv_plan]") {
  alignas(256) static unsigned char buffer[1024];
  CHECK(kernels::common_alignment({buffer}) == 256);
  CHECK(kernels::common_alignment({buffer, buffer + 512}) == 256);
  CHECK(kernels::common_alignment({buffer, buffer + 16}) == 16);
  CHECK(kernels::common_alignment({buffer + 2, buffer + 8}) == 2);
  CHECK(kernels::common_alignment({buffer + 3}) == 1);
  CHECK(kernels::common_alignment({buffer, nullptr}) == 256);  // absent operands (no bias) do not count
}

TEST_CASE("conv algorithms are deterministic unless switched off", "[ops][conv_plan]") {
  CHECK(kernels::conv_deterministic());
  kernels::set_conv_deterministic(false);
  CHECK_FALSE(kernels::conv_deterministic());
  kernels::set_conv_deterministic(true);
  CHECK(kernels::conv_deterministic());
}

TEST_CASE("conv2d on the CPU keeps a channels-last input's layout in its result", "[ops][conv_plan]") {
  const Tensor x = testing::randn_input({2, 4, 6, 5}, false, 3, DType::f32);
  const Tensor w = testing::randn_input({6, 2, 3, 3}, false, 4, DType::f32);
  const Tensor b = testing::randn_input({6}, false, 5, DType::f32);
  const Tensor expected = conv2d(x, w, b, {1}, {1}, {1}, 2);
  const Tensor got = conv2d(channels_last(x), channels_last(w), b, {1}, {1}, {1}, 2);
  CHECK(kernels::conv_layout_of(got.sizes(), got.strides()) == kernels::ConvLayout::nhwc);
  PRECIS_REQUIRE_CLOSE(got, expected, DType::f32);
}

}  // namespace precis
