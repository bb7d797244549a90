// Golden values from PyTorch (tests/golden/gen_fixtures.py) for convolution and pooling: outputs,
// max-pool indices and input/weight/bias gradients, in f64 and f32.
#include <catch2/catch.hpp>

#include "ops/functional.h"
#include "tests/support/golden.h"

using namespace precis;
using namespace precis::testing;

namespace {

std::string fixture(const char* op) { return testing::golden_dir() + "/ops/" + op + ".safetensors"; }

// A 3×3 convolution sums 9·C products with cancellation: PyTorch's own f32 conv misses the plain
// f32 tolerance against the f64 reference (up to 1.3× on these cases), so conv compares at 4×.
constexpr double kConvWiden = 4.0;

}  // namespace

TEST_CASE("golden conv2d", "[golden]") {
  check_golden_file(fixture("conv2d"), [](const GoldenCase& c, std::map<std::string, Tensor>& in) -> GoldenOutputs {
    const Tensor bias = in.count("bias") ? in["bias"] : Tensor();
    return {{"out", conv2d(in["input"], in["weight"], bias, c.args.ints("stride"), c.args.ints("padding"),
                           c.args.ints("dilation"), c.args.integer("groups"))}};
  }, kConvWiden);
}

TEST_CASE("golden conv1d", "[golden]") {
  check_golden_file(fixture("conv1d"), [](const GoldenCase& c, std::map<std::string, Tensor>& in) -> GoldenOutputs {
    const Tensor bias = in.count("bias") ? in["bias"] : Tensor();
    return {{"out", conv1d(in["input"], in["weight"], bias, c.args.integer("stride"), c.args.integer("padding"),
                           c.args.integer("dilation"), c.args.integer("groups"))}};
  }, kConvWiden);
}

TEST_CASE("golden conv_transpose2d", "[golden]") {
  check_golden_file(fixture("conv_transpose2d"),
                    [](const GoldenCase& c, std::map<std::string, Tensor>& in) -> GoldenOutputs {
                      const Tensor bias = in.count("bias") ? in["bias"] : Tensor();
                      return {{"out", conv_transpose2d(in["input"], in["weight"], bias, c.args.ints("stride"),
                                                       c.args.ints("padding"), c.args.ints("output_padding"),
                                                       c.args.integer("groups"), c.args.ints("dilation"))}};
                    }, kConvWiden);
}

TEST_CASE("golden max_pool2d", "[golden]") {
  check_golden_file(fixture("max_pool2d"), [](const GoldenCase& c, std::map<std::string, Tensor>& in) -> GoldenOutputs {
    auto [out, indices] = max_pool2d_with_indices(in["input"], c.args.ints("kernel_size"), c.args.ints("stride"),
                                                  c.args.ints("padding"), c.args.ints("dilation"),
                                                  c.args.flag("ceil_mode"));
    return {{"out", out}, {"indices", indices}};
  });
}

TEST_CASE("golden max_pool2d without indices", "[golden]") {
  // The plain entry point must give the same values and gradients.
  check_golden_file(fixture("max_pool2d"), [](const GoldenCase& c, std::map<std::string, Tensor>& in) -> GoldenOutputs {
    const Tensor out = max_pool2d(in["input"], c.args.ints("kernel_size"), c.args.ints("stride"), c.args.ints("padding"),
                                  c.args.ints("dilation"), c.args.flag("ceil_mode"));
    return {{"out", out}, {"indices", c.get("indices")}};
  });
}

TEST_CASE("golden max_pool1d and avg_pool1d", "[golden]") {
  check_golden_file(fixture("max_pool1d"), [](const GoldenCase& c, std::map<std::string, Tensor>& in) -> GoldenOutputs {
    return {{"out", max_pool1d(in["input"], c.args.integer("kernel_size"), c.args.integer("stride"),
                               c.args.integer("padding"), c.args.integer("dilation"), c.args.flag("ceil_mode"))}};
  });
  check_golden_file(fixture("avg_pool1d"), [](const GoldenCase& c, std::map<std::string, Tensor>& in) -> GoldenOutputs {
    return {{"out", avg_pool1d(in["input"], c.args.integer("kernel_size"), c.args.integer("stride"),
                               c.args.integer("padding"), c.args.flag("ceil_mode"), c.args.flag("count_include_pad"))}};
  });
}

TEST_CASE("golden avg_pool2d", "[golden]") {
  check_golden_file(fixture("avg_pool2d"), [](const GoldenCase& c, std::map<std::string, Tensor>& in) -> GoldenOutputs {
    return {{"out", avg_pool2d(in["input"], c.args.ints("kernel_size"), c.args.ints("stride"), c.args.ints("padding"),
                               c.args.flag("ceil_mode"), c.args.flag("count_include_pad"))}};
  });
}

TEST_CASE("golden adaptive_avg_pool2d", "[golden]") {
  check_golden_file(fixture("adaptive_avg_pool2d"),
                    [](const GoldenCase& c, std::map<std::string, Tensor>& in) -> GoldenOutputs {
                      return {{"out", adaptive_avg_pool2d(in["input"], c.args.ints("output_size"))}};
                    });
}
