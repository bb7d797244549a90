// GradScaler::loss_nonfinite / set_loss_nonfinite: the seam data-parallel training uses to make
// every rank's skip decision the same (dist/ddp.h).
#include <catch2/catch.hpp>

#include <limits>

#include "amp/grad_scaler.h"
#include "ops/functional.h"
#include "optim/sgd.h"
#include "tensor/factory.h"

using namespace precis;

TEST_CASE("GradScaler: a loss flag set from outside makes step skip and update keep the scale", "[amp]") {
  Tensor w = full({2}, 1.0).requires_grad_(true);
  optim::SGD opt({w}, {.lr = 0.5});
  amp::GradScaler scaler({.init_scale = 256.0});
  CHECK_THROWS_AS(scaler.set_loss_nonfinite(zeros({})), StateError);  // before the first scale()
  scaler.scale((w * 2.0).sum()).backward();
  REQUIRE(scaler.loss_nonfinite().defined());
  CHECK(scaler.loss_nonfinite().item<float>() == 0.0f);
  CHECK_THROWS_AS(scaler.set_loss_nonfinite(zeros({2})), ShapeError);
  scaler.set_loss_nonfinite(full({1}, 2.0));  // e.g. the sum of two ranks' flags
  CHECK(scaler.loss_nonfinite().item<float>() == 1.0f);
  auto r = scaler.step(opt);
  scaler.update();
  CHECK_FALSE(r.applied());
  CHECK(scaler.get_scale() == 256.0);
  CHECK(w.detach().to_vector<float>() == std::vector<float>{1.0f, 1.0f});
  // Cleared by update(); a zero flag leaves a finite step alone.
  opt.zero_grad();
  scaler.scale((w * 2.0).sum()).backward();
  scaler.set_loss_nonfinite(zeros({}));
  CHECK(scaler.step(opt).applied());
}
