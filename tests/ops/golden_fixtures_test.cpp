// The golden fixtures themselves (tests/golden/gen_fixtures.py): every file loads, every case's
// arguments parse and name tensors that exist, so a broken regeneration fails here first rather
// than as a confusing op mismatch. Also the flat-JSON reader the golden tests rely on.
#include <catch2/catch.hpp>

#include "core/error.h"
#include "tests/support/golden.h"

using namespace precis;
using namespace precis::testing;

namespace {

const char* const kOpFiles[] = {
    "conv2d", "conv1d", "conv_transpose2d", "max_pool2d", "max_pool1d", "avg_pool1d", "avg_pool2d", "adaptive_avg_pool2d", "batch_norm", "layer_norm", "group_norm",
    "softmax", "log_softmax", "cross_entropy", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "leaky_relu",
    "binary_cross_entropy_with_logits",
    "embedding", "scaled_dot_product_attention", "erf", "pad", "interpolate",
};

}  // namespace

TEST_CASE("golden args parse flat JSON objects", "[golden]") {
  const GoldenArgs a = GoldenArgs::parse(
      R"({"stride":[2,1], "eps":1e-05, "mode":"constant", "training":true, "scale":null, "grads":["input","weight"], "empty":[], "n":-100})");
  CHECK(a.ints("stride") == std::vector<int64_t>{2, 1});
  CHECK(a.numbers("stride") == std::vector<double>{2, 1});
  CHECK(GoldenArgs::parse(R"({"factors":[1e-05,0.5]})").numbers("factors") == std::vector<double>{1e-5, 0.5});
  CHECK(a.number("eps") == 1e-5);
  CHECK(a.text("mode") == "constant");
  CHECK(a.flag("training"));
  CHECK(a.is_null("scale"));
  CHECK(a.is_null("absent"));
  CHECK(!a.is_null("eps"));
  CHECK(a.strings("grads") == std::vector<std::string>{"input", "weight"});
  CHECK(a.ints("empty").empty());
  CHECK(a.strings("empty").empty());
  CHECK(a.integer("n") == -100);
  CHECK_THROWS_AS(a.text("eps"), ValueError);
  CHECK_THROWS_AS(a.number("absent"), ValueError);
  CHECK_THROWS_AS(GoldenArgs::parse(R"({"a": {"b": 1}})"), ValueError);
  CHECK_THROWS_AS(GoldenArgs::parse(R"({"a": 1)"), ValueError);
  CHECK_THROWS_AS(GoldenArgs::parse(R"({"a": [1, "x"]})"), ValueError);
}

TEST_CASE("golden op fixtures are complete", "[golden]") {
  for (const char* op : kOpFiles) {
    const std::vector<GoldenCase> cases = load_golden(testing::golden_dir() + "/ops/" + op + ".safetensors");
    INFO(op);
    REQUIRE(!cases.empty());
    for (const GoldenCase& c : cases) {
      INFO(c.name);
      for (const std::string& role : c.args.strings("inputs")) CHECK(c.has(role));
      for (const std::string& role : c.args.strings("outputs")) CHECK(c.has(role));
      for (const std::string& role : c.args.strings("grads")) {
        CHECK(c.has("grad." + role));
        CHECK(c.get("grad." + role).sizes() == c.get(role).sizes());
      }
      CHECK(c.get("grad_out").sizes() == c.get("out").sizes());
      // Inputs are f32-exact, so one fixture serves the f64 and the f32 runs.
      for (const std::string& role : c.args.strings("inputs")) {
        const Tensor t = c.get(role);
        if (!t.is_floating_point()) continue;
        CHECK(t.to(DType::f32).to(DType::f64).to_vector<double>() == t.to_vector<double>());
      }
    }
  }
}

TEST_CASE("golden block fixtures hold PyTorch state_dict names", "[golden]") {
  const SafetensorsFile block = load_safetensors(testing::golden_dir() + "/blocks/resnet_basic_block.safetensors");
  for (const char* name : {"conv1.weight", "bn1.weight", "bn1.bias", "bn1.running_mean", "bn1.running_var",
                           "bn1.num_batches_tracked", "conv2.weight", "bn2.weight", "downsample.0.weight",
                           "downsample.1.running_var", "after.bn2.running_mean", "input", "out", "grad_out",
                           "grad.input", "grad.conv1.weight", "grad.downsample.1.bias"})
    CHECK(block.contains(name));
  const SafetensorsFile bert = load_safetensors(testing::golden_dir() + "/blocks/bert_layer.safetensors");
  for (const char* name : {"attention.self.query.weight", "attention.self.key.bias", "attention.self.value.weight",
                           "attention.output.dense.weight", "attention.output.LayerNorm.weight",
                           "intermediate.dense.weight", "output.dense.bias", "output.LayerNorm.bias", "input",
                           "attention_mask", "out", "grad_out", "grad.input", "grad.attention.self.query.weight"})
    CHECK(bert.contains(name));
}
