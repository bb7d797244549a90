// Wrapper for the transformer classifier of docs/models.md: the class at file scope; main() builds
// one, runs it on a padded batch, checks the output shape, that padding does not leak into the
// result, and that backward reaches every parameter.
#include <precis/precis.h>

#include <iostream>

using namespace precis;

// @snippet

int main() {
  TransformerClassifier model(8, 6, 16, 10);
  model.eval();  // no dropout: two runs must agree
  const Tensor x = randn({3, 6, 8});
  const Tensor pad = gt(arange(6.0).view({1, 6}).expand({3, 6}), 3.0);  // positions 4 and 5 padded
  Tensor logits = model.forward(x, pad);
  if (logits.sizes() != Shape{3, 10}) return 1;
  Tensor x2 = x.clone();
  {
    NoGradGuard no_grad;
    x2.slice(1, 4, 6).fill_(100.0);  // change only padded positions
  }
  if (max(abs(model.forward(x2, pad) - logits)).item<float>() > 1e-4f) return 1;
  model.train();
  model.forward(x, pad).sum().backward();
  for (const auto& [name, p] : model.named_parameters())
    if (!p.grad().defined()) return 1;
  return 0;
}
