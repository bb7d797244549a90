// Golden values from PyTorch (tests/golden/gen_fixtures.py) for the losses, embedding, attention,
// erf and pad: outputs and gradients, in f64 and f32.
#include <catch2/catch.hpp>

#include "core/error.h"
#include "ops/functional.h"
#include "tests/support/golden.h"

using namespace precis;
using namespace precis::testing;

namespace {

std::string fixture(const char* op) { return testing::golden_dir() + "/ops/" + op + ".safetensors"; }

Tensor optional(std::map<std::string, Tensor>& in, const char* role) { return in.count(role) ? in[role] : Tensor(); }

Reduction reduction(const GoldenCase& c) {
  const std::string& r = c.args.text("reduction");
  if (r == "none") return Reduction::none;
  if (r == "sum") return Reduction::sum;
  if (r == "mean") return Reduction::mean;
  throw ValueError("golden: unknown reduction " + r);
}

}  // namespace

TEST_CASE("golden cross_entropy", "[golden]") {
  check_golden_file(fixture("cross_entropy"), [](const GoldenCase& c, std::map<std::string, Tensor>& in) -> GoldenOutputs {
    return {{"out", cross_entropy(in["input"], in["target"], optional(in, "weight"), c.args.integer("ignore_index"),
                                  reduction(c), c.args.number("label_smoothing"))}};
  });
}

TEST_CASE("golden nll_loss", "[golden]") {
  check_golden_file(fixture("nll_loss"), [](const GoldenCase& c, std::map<std::string, Tensor>& in) -> GoldenOutputs {
    return {{"out", nll_loss(in["input"], in["target"], optional(in, "weight"), c.args.integer("ignore_index"),
                             reduction(c))}};
  });
}

TEST_CASE("golden mse_loss", "[golden]") {
  check_golden_file(fixture("mse_loss"), [](const GoldenCase& c, std::map<std::string, Tensor>& in) -> GoldenOutputs {
    return {{"out", mse_loss(in["input"], in["target"], reduction(c))}};
  });
}

TEST_CASE("golden l1_loss, smooth_l1_loss and huber_loss", "[golden]") {
  check_golden_file(fixture("l1_loss"), [](const GoldenCase& c, std::map<std::string, Tensor>& in) -> GoldenOutputs {
    return {{"out", l1_loss(in["input"], in["target"], reduction(c))}};
  });
  check_golden_file(fixture("smooth_l1_loss"),
                    [](const GoldenCase& c, std::map<std::string, Tensor>& in) -> GoldenOutputs {
                      return {{"out", smooth_l1_loss(in["input"], in["target"], reduction(c), c.args.number("beta"))}};
                    });
  check_golden_file(fixture("huber_loss"), [](const GoldenCase& c, std::map<std::string, Tensor>& in) -> GoldenOutputs {
    return {{"out", huber_loss(in["input"], in["target"], reduction(c), c.args.number("delta"))}};
  });
}

TEST_CASE("golden leaky_relu", "[golden]") {
  check_golden_file(fixture("leaky_relu"), [](const GoldenCase& c, std::map<std::string, Tensor>& in) -> GoldenOutputs {
    return {{"out", leaky_relu(in["input"], c.args.number("negative_slope"))}};
  });
}

TEST_CASE("golden binary_cross_entropy_with_logits", "[golden]") {
  check_golden_file(fixture("binary_cross_entropy_with_logits"),
                    [](const GoldenCase& c, std::map<std::string, Tensor>& in) -> GoldenOutputs {
                      return {{"out", binary_cross_entropy_with_logits(in["input"], in["target"], Tensor(),
                                                                       optional(in, "pos_weight"), reduction(c))}};
                    });
}

TEST_CASE("golden embedding", "[golden]") {
  check_golden_file(fixture("embedding"), [](const GoldenCase& c, std::map<std::string, Tensor>& in) -> GoldenOutputs {
    const int64_t padding_idx = c.args.is_null("padding_idx") ? -1 : c.args.integer("padding_idx");
    return {{"out", embedding(in["input"], in["weight"], padding_idx)}};
  });
}

TEST_CASE("golden scaled_dot_product_attention", "[golden]") {
  check_golden_file(fixture("scaled_dot_product_attention"),
                    [](const GoldenCase& c, std::map<std::string, Tensor>& in) -> GoldenOutputs {
                      const double scale = c.args.is_null("scale") ? 0.0 : c.args.number("scale");
                      return {{"out", scaled_dot_product_attention(in["query"], in["key"], in["value"],
                                                                   optional(in, "attn_mask"), c.args.number("dropout_p"),
                                                                   c.args.flag("is_causal"), scale)}};
                    });
}

TEST_CASE("golden erf", "[golden]") {
  check_golden_file(fixture("erf"), [](const GoldenCase&, std::map<std::string, Tensor>& in) -> GoldenOutputs {
    return {{"out", erf(in["input"])}};
  });
}

TEST_CASE("golden pad", "[golden]") {
  check_golden_file(fixture("pad"), [](const GoldenCase& c, std::map<std::string, Tensor>& in) -> GoldenOutputs {
    REQUIRE(c.args.text("mode") == "constant");
    return {{"out", pad(in["input"], c.args.ints("pad"), c.args.number("value"))}};
  });
}
