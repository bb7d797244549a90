// Wrapper for the mixed-precision snippets: a small MLP classifier `model` (fp32) with
// parameters() / named_parameters() / forward(x), its data (`x` (512, 2) f32, `y` (512,) i64, `x16`
// = x in f16) and `micro_batches`, a list of (x, y) pairs of 32 examples. After the snippet, the
// program fails unless every parameter of `model` is finite.
#include <precis/precis.h>

#include <cmath>
#include <iostream>
#include <utility>
#include <vector>

using namespace precis;

struct Mlp {
  Tensor w1, b1, w2, b2;
  Mlp(DType dtype, uint64_t seed) {
    Generator gen(seed);
    w1 = (randn({64, 2}, {}, &gen) * 0.5).to(dtype).requires_grad_();
    b1 = zeros({64}, {.dtype = dtype}).requires_grad_();
    w2 = (randn({4, 64}, {}, &gen) * 0.1).to(dtype).requires_grad_();
    b2 = zeros({4}, {.dtype = dtype}).requires_grad_();
  }
  std::vector<Tensor> parameters() const { return {w1, b1, w2, b2}; }
  std::vector<std::pair<std::string, Tensor>> named_parameters() const {
    return {{"fc1.weight", w1}, {"fc1.bias", b1}, {"fc2.weight", w2}, {"fc2.bias", b2}};
  }
  Tensor forward(const Tensor& x) const { return linear(relu(linear(x, w1, b1)), w2, b2); }
};

int main() {
  Generator gen(0);
  const Tensor x = randn({512, 2}, {}, &gen);
  const Tensor y = (gt(x.slice(1, 0, 1), 0.0).to(DType::i64) * 2 + gt(x.slice(1, 1, 2), 0.0).to(DType::i64)).reshape({512});
  const Tensor x16 = x.to(DType::f16);
  std::vector<std::pair<Tensor, Tensor>> micro_batches;
  for (int64_t i = 0; i < 16; ++i) micro_batches.emplace_back(x.slice(0, 32 * i, 32 * i + 32), y.slice(0, 32 * i, 32 * i + 32));
  Mlp model(DType::f32, 1);

  // @snippet

  for (const Tensor& p : model.parameters())
    if (!std::isfinite(sum(abs(p)).item<double>())) return 1;
  return 0;
}
