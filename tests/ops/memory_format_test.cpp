// Memory formats (ops/memory_format.h): the layout queries, the differentiable channels-last copy,
// and the pooling ops keeping a channels-last input's layout.
#include <sstream>

#include "ops/functional.h"
#include "ops/memory_format.h"
#include "tests/support/tensor_testing.h"

namespace precis {
namespace {

using testing::randn_input;

TEST_CASE("MemoryFormat prints with operator<< and to_string", "[ops][memory_format]") {
  std::ostringstream os;
  os << MemoryFormat::ChannelsLast << " " << MemoryFormat::Contiguous;
  CHECK(os.str() == "channels_last contiguous");
  CHECK(to_string(MemoryFormat::Preserve) == "preserve");
}

TEST_CASE("contiguous(ChannelsLast) re-lays a 4-D tensor out, values unchanged", "[ops][memory_format]") {
  const Tensor x = randn_input({2, 3, 4, 5}, false, 1);
  CHECK(is_contiguous(x, MemoryFormat::Contiguous));
  CHECK_FALSE(is_contiguous(x, MemoryFormat::ChannelsLast));
  CHECK(suggest_memory_format(x) == MemoryFormat::Contiguous);
  const Tensor cl = contiguous(x, MemoryFormat::ChannelsLast);
  CHECK(cl.sizes() == x.sizes());
  CHECK(cl.strides() == Shape{60, 1, 15, 3});
  CHECK(is_contiguous(cl, MemoryFormat::ChannelsLast));
  CHECK(is_contiguous(cl, MemoryFormat::Preserve));
  CHECK_FALSE(cl.is_contiguous());
  CHECK(suggest_memory_format(cl) == MemoryFormat::ChannelsLast);
  CHECK(cl.to_vector<float>() == x.to_vector<float>());
  // Already channels-last: the same tensor; Preserve keeps it; Contiguous copies back.
  CHECK(contiguous(cl, MemoryFormat::ChannelsLast).data_ptr() == cl.data_ptr());
  CHECK(contiguous(cl, MemoryFormat::Preserve).data_ptr() == cl.data_ptr());
  const Tensor back = contiguous(cl, MemoryFormat::Contiguous);
  CHECK(back.is_contiguous());
  CHECK(back.to_vector<float>() == x.to_vector<float>());
  // A strided view is neither; Preserve makes it contiguous.
  const Tensor view = x.slice(3, 0, 4, 2);
  CHECK(suggest_memory_format(view) == MemoryFormat::Preserve);
  CHECK(contiguous(view, MemoryFormat::Preserve).is_contiguous());
}

TEST_CASE("contiguous(ChannelsLast) is differentiable", "[ops][memory_format]") {
  Tensor x = randn_input({2, 3, 2, 2}, true, 2);
  const Tensor w = randn_input({2, 3, 2, 2}, false, 3);
  sum(contiguous(x, MemoryFormat::ChannelsLast) * w).backward();
  CHECK(x.grad().to_vector<float>() == w.to_vector<float>());
}

TEST_CASE("contiguous(ChannelsLast) rejects tensors that are not 4-D", "[ops][memory_format]") {
  PRECIS_REQUIRE_THROWS_WITH_ALL(contiguous(zeros({3, 4, 5}), MemoryFormat::ChannelsLast), ShapeError,
                                 "channels_last", "4-D", "[3, 4, 5]");
  PRECIS_REQUIRE_THROWS_WITH_ALL(contiguous(zeros({2, 3, 4, 5, 6}), MemoryFormat::ChannelsLast), ShapeError,
                                 "channels_last", "[2, 3, 4, 5, 6]");
  PRECIS_REQUIRE_THROWS_WITH_ALL(is_contiguous(Tensor(), MemoryFormat::ChannelsLast), Error, "undefined");
  CHECK_FALSE(is_contiguous(zeros({3, 4}), MemoryFormat::ChannelsLast));
}

// Pooling ops keep a channels-last input channels-last (output and input gradient) with the
// values of the contiguous run.
TEST_CASE("pooling keeps a channels-last input's layout", "[ops][memory_format][pool]") {
  using PoolFn = std::function<Tensor(const Tensor&)>;
  const std::vector<std::pair<const char*, PoolFn>> pools = {
      {"max_pool2d", [](const Tensor& x) { return max_pool2d(x, {3}, {2}, {1}); }},
      {"avg_pool2d", [](const Tensor& x) { return avg_pool2d(x, {2}, {2}); }},
      {"adaptive_avg_pool2d", [](const Tensor& x) { return adaptive_avg_pool2d(x, {3, 2}); }},
  };
  for (const auto& [name, pool] : pools)
    for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
      INFO(name << " " << dtype_name(dt));
      const Tensor x0 = randn_input({2, 5, 7, 6}, false, 4, dt);
      Tensor a = x0.clone().requires_grad_(true);
      Tensor b = contiguous(x0, MemoryFormat::ChannelsLast).detach().requires_grad_(true);
      // (A leaf's .grad is stored contiguous: the hook sees the gradient the pool sends.)
      bool grad_channels_last = false;
      b.register_hook([&](const Tensor& gx) {
        grad_channels_last = is_contiguous(gx, MemoryFormat::ChannelsLast) && !gx.is_contiguous();
        return Tensor();
      });
      const Tensor ya = pool(a), yb = pool(b);
      CHECK(is_contiguous(yb, MemoryFormat::ChannelsLast));
      CHECK(yb.to_vector<double>() == ya.to_vector<double>());
      const Tensor up = randn_input(ya.sizes(), false, 5, dt);
      ya.backward(up);
      yb.backward(contiguous(up, MemoryFormat::ChannelsLast));
      CHECK(grad_channels_last);
      CHECK(b.grad().to_vector<double>() == a.grad().to_vector<double>());
    }
}

// interpolate keeps a channels-last input's output channels-last (the convolution after it runs
// channels-last), with the contiguous run's values and gradient. The input gradient comes back
// contiguous (index_select's backward).
TEST_CASE("interpolate keeps a channels-last input's output layout", "[ops][memory_format]") {
  for (const InterpolateOptions& o : {InterpolateOptions{.scale_factor = {2.0}},
                                      InterpolateOptions{.size = {9, 4}, .mode = InterpolateMode::bilinear}})
    for (DType dt : {DType::f32, DType::bf16}) {
      INFO(dtype_name(dt));
      const Tensor x0 = randn_input({2, 5, 7, 6}, false, 6, dt);
      Tensor a = x0.clone().requires_grad_(true);
      Tensor b = contiguous(x0, MemoryFormat::ChannelsLast).detach().requires_grad_(true);
      const Tensor ya = interpolate(a, o), yb = interpolate(b, o);
      CHECK(is_contiguous(yb, MemoryFormat::ChannelsLast));
      CHECK(!yb.is_contiguous());
      CHECK(yb.to_vector<double>() == ya.to_vector<double>());
      const Tensor up = randn_input(ya.sizes(), false, 7, dt);
      ya.backward(up);
      yb.backward(contiguous(up, MemoryFormat::ChannelsLast));
      CHECK(b.grad().to_vector<double>() == a.grad().to_vector<double>());
    }
}

}  // namespace
}  // namespace precis
