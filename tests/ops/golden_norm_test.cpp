// Golden values from PyTorch (tests/golden/gen_fixtures.py) for normalisation and softmax:
// outputs, updated running statistics and input/weight/bias gradients, in f64 and f32.
#include <catch2/catch.hpp>

#include "ops/functional.h"
#include "tests/support/golden.h"

using namespace precis;
using namespace precis::testing;

namespace {

std::string fixture(const char* op) { return testing::golden_dir() + "/ops/" + op + ".safetensors"; }

Tensor optional(std::map<std::string, Tensor>& in, const char* role) { return in.count(role) ? in[role] : Tensor(); }

}  // namespace

TEST_CASE("golden batch_norm", "[golden]") {
  check_golden_file(fixture("batch_norm"), [](const GoldenCase& c, std::map<std::string, Tensor>& in) -> GoldenOutputs {
    // The running statistics are updated in place in training, as PyTorch's buffers.
    const Tensor running_mean = in["running_mean"], running_var = in["running_var"];
    const Tensor out = batch_norm(in["input"], running_mean, running_var, optional(in, "weight"), optional(in, "bias"),
                                  c.args.flag("training"), c.args.number("momentum"), c.args.number("eps"));
    return {{"out", out}, {"running_mean_after", running_mean}, {"running_var_after", running_var}};
  });
}

TEST_CASE("golden layer_norm", "[golden]") {
  check_golden_file(fixture("layer_norm"), [](const GoldenCase& c, std::map<std::string, Tensor>& in) -> GoldenOutputs {
    return {{"out", layer_norm(in["input"], c.args.ints("normalized_shape"), optional(in, "weight"),
                               optional(in, "bias"), c.args.number("eps"))}};
  });
}

TEST_CASE("golden group_norm", "[golden]") {
  check_golden_file(fixture("group_norm"), [](const GoldenCase& c, std::map<std::string, Tensor>& in) -> GoldenOutputs {
    return {{"out", group_norm(in["input"], c.args.integer("num_groups"), optional(in, "weight"), optional(in, "bias"),
                               c.args.number("eps"))}};
  });
}

TEST_CASE("golden softmax", "[golden]") {
  check_golden_file(fixture("softmax"), [](const GoldenCase& c, std::map<std::string, Tensor>& in) -> GoldenOutputs {
    return {{"out", softmax(in["input"], c.args.integer("dim"))}};
  });
}

TEST_CASE("golden log_softmax", "[golden]") {
  check_golden_file(fixture("log_softmax"), [](const GoldenCase& c, std::map<std::string, Tensor>& in) -> GoldenOutputs {
    return {{"out", log_softmax(in["input"], c.args.integer("dim"))}};
  });
}
