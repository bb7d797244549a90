// The torch.nn layers added for users coming from PyTorch: GroupNorm, SiLU, Sigmoid, LeakyReLU, AvgPool2d,
// TransformerEncoderLayer / TransformerEncoder, MultiheadAttention's (output, weights) pair, and
// ModuleList::at. Numerics against PyTorch are in golden_layers_test.cpp; here: names, defaults,
// shapes, masks, modes, copies and bad inputs.
#include <limits>

#include <catch2/catch.hpp>

#include "autograd/grad_mode.h"
#include "models/nn/nn.h"
#include "ops/functional.h"
#include "tests/support/names.h"
#include "tests/support/tensor_testing.h"

using namespace precis;

using testing::names_of;

TEST_CASE("nn::GroupNorm: PyTorch's names and defaults, equals the functional op", "[models][layers]") {
  nn::GroupNorm gn(2, 6);
  CHECK(names_of(gn.named_parameters()) == std::vector<std::string>{"weight", "bias"});
  CHECK(gn.weight.to_vector<float>() == std::vector<float>(6, 1.0f));
  CHECK(gn.bias.to_vector<float>() == std::vector<float>(6, 0.0f));
  CHECK(gn.str() == "GroupNorm(2, 6, eps=1e-05, affine=true)");
  {
    NoGradGuard ng;
    gn.weight.copy_(randn({6}));
    gn.bias.copy_(randn({6}));
  }
  const Tensor x = randn({3, 6, 4, 5});
  PRECIS_REQUIRE_CLOSE(gn(x), group_norm(x, 2, gn.weight, gn.bias, 1e-5), DType::f32);
  gn.eval();  // batch-independent: eval changes nothing
  PRECIS_REQUIRE_CLOSE(gn(x), group_norm(x, 2, gn.weight, gn.bias, 1e-5), DType::f32);
  nn::GroupNorm plain(3, 6, {.eps = 1e-3, .affine = false});
  CHECK(plain.named_parameters().empty());
  PRECIS_REQUIRE_CLOSE(plain(x), group_norm(x, 3, Tensor(), Tensor(), 1e-3), DType::f32);
  PRECIS_REQUIRE_THROWS_WITH_ALL(nn::GroupNorm(4, 6), ValueError, "nn::GroupNorm", "num_channels (6)",
                                 "num_groups (4)");
  PRECIS_REQUIRE_THROWS_WITH_ALL(gn(randn({3, 5, 4})), ShapeError, "nn::GroupNorm(2, 6)", "[3, 5, 4] f32 cpu",
                                 "(N, 6, ...)");
}

TEST_CASE("nn::SiLU and nn::Sigmoid: PyTorch's names, the functional ops, in a Sequential", "[models][layers]") {
  const Tensor x = randn({3, 5});
  nn::SiLU silu_layer;
  nn::Sigmoid sigmoid_layer;
  PRECIS_REQUIRE_SAME_BITS(silu_layer(x), silu(x));
  PRECIS_REQUIRE_SAME_BITS(sigmoid_layer(x), sigmoid(x));
  CHECK(silu_layer.str() == "SiLU()");
  CHECK(sigmoid_layer.str() == "Sigmoid()");
  nn::Sequential gate{nn::Linear(5, 4), nn::SiLU(), nn::Linear(4, 1), nn::Sigmoid()};
  const Tensor y = gate(x);
  CHECK(y.sizes() == Shape{3, 1});
  CHECK(-max(neg(y)).item<float>() > 0.0f);
  CHECK(max(y).item<float>() < 1.0f);
}

TEST_CASE("nn::LeakyReLU: PyTorch's default slope and repr, the functional op, a DCGAN discriminator block",
          "[models][layers]") {
  const Tensor x = randn({2, 3, 8, 8});
  nn::LeakyReLU fixed;
  nn::LeakyReLU lrelu(0.2);
  PRECIS_REQUIRE_SAME_BITS(fixed(x), leaky_relu(x, 0.01));
  PRECIS_REQUIRE_SAME_BITS(lrelu(x), leaky_relu(x, 0.2));
  CHECK(fixed.str() == "LeakyReLU(negative_slope=0.01)");
  CHECK(lrelu.str() == "LeakyReLU(negative_slope=0.2)");
  nn::Sequential block{nn::Conv2d(3, 8, 4, {.stride = 2, .padding = 1, .bias = false}), nn::BatchNorm2d(8),
                       nn::LeakyReLU(0.2)};
  const Tensor y = block(x);
  CHECK(y.sizes() == Shape{2, 8, 4, 4});
  PRECIS_REQUIRE_THROWS_WITH_ALL(nn::LeakyReLU(std::numeric_limits<double>::infinity()), ValueError,
                                 "nn::LeakyReLU", "finite");
}

TEST_CASE("nn::Upsample: interpolate with its options, PyTorch's repr, a U-Net decoder step", "[models][layers]") {
  const Tensor x = randn({2, 4, 5, 6});
  nn::Upsample up({.scale_factor = {2}, .mode = InterpolateMode::bilinear});
  nn::Upsample to({.size = {7, 3}});
  PRECIS_REQUIRE_SAME_BITS(up(x), interpolate(x, {.scale_factor = {2}, .mode = InterpolateMode::bilinear}));
  PRECIS_REQUIRE_SAME_BITS(to(x), interpolate(x, {.size = {7, 3}}));
  CHECK(up.str() == "Upsample(scale_factor=2.0, mode='bilinear')");
  CHECK(to.str() == "Upsample(size=(7, 3), mode='nearest')");
  CHECK(nn::Upsample({.scale_factor = {1.7, 0.5}, .mode = InterpolateMode::nearest_exact}).str() ==
        "Upsample(scale_factor=(1.7, 0.5), mode='nearest-exact')");
  CHECK(nn::Upsample({.size = {9}, .mode = InterpolateMode::linear}).str() == "Upsample(size=9, mode='linear')");
  // Python's float repr: positional up to 1e16, the shortest digits.
  CHECK(nn::Upsample({.scale_factor = {2e10, 1e16}}).str() ==
        "Upsample(scale_factor=(20000000000.0, 1e+16), mode='nearest')");
  CHECK(nn::Upsample({.scale_factor = {1e-5, 0.0001}}).str() ==
        "Upsample(scale_factor=(1e-05, 0.0001), mode='nearest')");
  // Upsample, then a 3x3 convolution, concatenated with the skip connection.
  nn::Sequential decode{nn::Upsample({.scale_factor = {2}, .mode = InterpolateMode::bilinear}),
                        nn::Conv2d(4, 2, 3, {.padding = 1})};
  const Tensor skip = randn({2, 2, 10, 12});
  const Tensor y = cat({decode(x), skip}, 1);
  CHECK(y.sizes() == Shape{2, 4, 10, 12});
  PRECIS_REQUIRE_THROWS_WITH_ALL(up(randn({2, 4, 5})), ShapeError, "interpolate", "bilinear needs 4-D");
}

TEST_CASE("nn::BatchNorm1d: batch_norm over (N, C) and (N, C, L), BatchNorm2d's names and buffers", "[models][layers]") {
  nn::BatchNorm1d bn(4);
  const Tensor x = randn({6, 4, 5});
  const Tensor y = bn(x);
  Tensor rm = zeros({4}), rv = ones({4});
  PRECIS_REQUIRE_SAME_BITS(y, batch_norm(x, rm, rv, ones({4}), zeros({4}), true, 0.1, 1e-5));
  PRECIS_REQUIRE_SAME_BITS(bn.running_mean, rm);
  CHECK(bn.num_batches_tracked.item<int64_t>() == 1);
  CHECK(bn(randn({8, 4})).sizes() == Shape{8, 4});
  CHECK(names_of(bn.named_parameters()) == std::vector<std::string>{"weight", "bias"});
  CHECK(bn.str() == "BatchNorm1d(4, eps=1e-05, momentum=0.1, affine=true, track_running_stats=true)");
  PRECIS_REQUIRE_THROWS_WITH_ALL(bn(randn({2, 4, 3, 3})), ShapeError, "nn::BatchNorm1d(4)", "(N, 4) or (N, 4, L)");
  PRECIS_REQUIRE_THROWS_WITH_ALL(bn(randn({2, 5})), ShapeError, "nn::BatchNorm1d(4)", "[2, 5]");
}

TEST_CASE("nn::ModuleDict: keyed children in insertion order, PyTorch's state_dict names", "[models][layers]") {
  class Heads : public nn::Module {
   public:
    Heads() : heads(add("heads", nn::ModuleDict())) {
      heads->insert("cls", nn::Linear(4, 3));
      heads->insert("box", nn::Linear(4, 2));
    }
    Tensor forward(const Tensor& x) override { return heads->at<nn::Linear>("cls")(x); }
    nn::Child<nn::ModuleDict> heads;
  };
  Heads m;
  CHECK(m.heads->size() == 2);
  CHECK(m.heads->keys() == std::vector<std::string>{"cls", "box"});
  CHECK(m.heads->contains("box"));
  CHECK_FALSE(m.heads->contains("seg"));
  CHECK(names_of(m.named_parameters()) ==
        std::vector<std::string>{"heads.cls.weight", "heads.cls.bias", "heads.box.weight", "heads.box.bias"});
  CHECK(m.state_dict().count("heads.box.bias") == 1);
  CHECK(m(randn({5, 4})).sizes() == Shape{5, 3});
  CHECK(m.heads->at<nn::Linear>("box").weight.sizes() == Shape{2, 4});
  PRECIS_REQUIRE_THROWS_WITH_ALL((*m.heads)["seg"], IndexError, "nn::ModuleDict", "\"seg\"", "cls, box");
  PRECIS_REQUIRE_THROWS_WITH_ALL(m.heads->at<nn::ReLU>("cls"), ValueError, "nn::ModuleDict::at<T>(cls)", "Linear");
  PRECIS_REQUIRE_THROWS_WITH_ALL(m.heads->insert("cls", nn::ReLU()), ValueError, "cls");
}

TEST_CASE("nn::AvgPool2d: options as torch.nn.AvgPool2d", "[models][layers]") {
  const Tensor x = randn({2, 3, 7, 6});
  nn::AvgPool2d pool(2);
  CHECK(pool(x).sizes() == Shape{2, 3, 3, 3});
  PRECIS_REQUIRE_CLOSE(pool(x), avg_pool2d(x, {2, 2}), DType::f32);
  nn::AvgPool2d padded(3, {.stride = 2, .padding = 1, .ceil_mode = true, .count_include_pad = false});
  PRECIS_REQUIRE_CLOSE(padded(x), avg_pool2d(x, {3, 3}, {2, 2}, {1, 1}, true, false), DType::f32);
  nn::AvgPool2d divided({2, 3}, {.divisor_override = 4});
  PRECIS_REQUIRE_CLOSE(divided(x), avg_pool2d(x, {2, 3}, {2, 3}, {0, 0}, false, true, 4), DType::f32);
  CHECK(pool.named_parameters().empty());
  CHECK(padded.str().find("count_include_pad=false") != std::string::npos);
  PRECIS_REQUIRE_THROWS_WITH_ALL(nn::AvgPool2d(0), ValueError, "nn::AvgPool2d", "kernel size");
}

TEST_CASE("nn::MultiheadAttention returns (output, weights) as PyTorch", "[models][layers]") {
  manual_seed(4);
  nn::MultiheadAttention mha(8, 2);  // sequence-first, as PyTorch's default
  const Tensor q = randn({3, 2, 8}), kv = randn({5, 2, 8});
  auto [out, weights] = mha.forward(q, kv, kv);
  CHECK(out.sizes() == Shape{3, 2, 8});
  CHECK(weights.sizes() == Shape{2, 3, 5});  // (N, L, S), averaged over heads
  PRECIS_REQUIRE_CLOSE(sum(weights, {-1}), ones({2, 3}), DType::f32);
  auto [out2, per_head] = mha.forward(q, kv, kv, {.average_attn_weights = false});
  CHECK(per_head.sizes() == Shape{2, 2, 3, 5});
  PRECIS_REQUIRE_CLOSE(mean(per_head, {1}), weights, DType::f32);
  // need_weights = false: the fused attention, the same output, no weights.
  auto [out3, none] = mha.forward(q, kv, kv, {.need_weights = false});
  CHECK_FALSE(none.defined());
  PRECIS_REQUIRE_CLOSE(out3, out, DType::f32);
  // Masked keys get zero weight; a bool attn_mask (true = not allowed) likewise.
  const Tensor pad = from_vector<bool>({false, false, false, true, true, false, false, false, false, false}, {2, 5});
  auto [o4, w4] = mha.forward(q, kv, kv, {.key_padding_mask = pad});
  CHECK(sum(abs(w4.select(0, 0).slice(1, 3, 5))).item<float>() == 0.0f);
  CHECK(sum(abs(w4.select(0, 1))).item<float>() > 0.0f);
  // A query whose keys are all masked gets zero weights and zero attention, not NaN.
  const Tensor all = ones({2, 5}, {.dtype = DType::boolean});
  auto [o5, w5] = mha.forward(q, kv, kv, {.key_padding_mask = all});
  CHECK(sum(abs(w5)).item<float>() == 0.0f);
  CHECK(std::isfinite(sum(o5).item<float>()));
  // Gradients flow through the weights path.
  Tensor qg = q.clone().requires_grad_();
  auto [o6, w6] = mha.forward(qg, kv, kv);
  (sum(o6) + sum(w6 * w6)).backward();
  CHECK(qg.grad().defined());
  CHECK(mha.in_proj_weight.grad().defined());
  PRECIS_REQUIRE_THROWS_WITH_ALL(mha.forward(q, kv, kv, {.attn_mask = zeros({3, 4})}), ShapeError, "attn_mask",
                                 "[3, 4] f32 cpu", "(3, 5)");
}

TEST_CASE("nn::TransformerEncoderLayer: PyTorch's names, defaults and shapes", "[models][layers]") {
  nn::TransformerEncoderLayer layer(16, 4);
  CHECK(names_of(layer.named_parameters()) ==
        std::vector<std::string>{"self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight",
                                 "self_attn.out_proj.bias", "linear1.weight", "linear1.bias", "linear2.weight",
                                 "linear2.bias", "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias"});
  CHECK(layer.linear1->weight.sizes() == Shape{2048, 16});  // dim_feedforward 2048, as PyTorch
  CHECK(layer.options().dropout == 0.1);
  CHECK(layer.options().activation == "relu");
  CHECK_FALSE(layer.options().batch_first);
  CHECK_FALSE(layer.options().norm_first);
  const Tensor x = randn({7, 3, 16});  // (S, N, E)
  layer.eval();
  CHECK(layer(x).sizes() == Shape{7, 3, 16});
  // Eval is deterministic; training applies dropout.
  PRECIS_REQUIRE_CLOSE(layer(x), layer(x), DType::f32);
  layer.train();
  CHECK(layer(x).to_vector<float>() != layer(x).to_vector<float>());
  // bias = false reaches the attention, the linear layers and the norms.
  nn::TransformerEncoderLayer no_bias(8, 2, {.dim_feedforward = 16, .bias = false});
  for (const auto& [name, p] : no_bias.named_parameters()) CHECK(name.find("bias") == std::string::npos);
  PRECIS_REQUIRE_THROWS_WITH_ALL(nn::TransformerEncoderLayer(8, 2, {.activation = "swish"}), ValueError,
                                 "activation", "\"swish\"");
  PRECIS_REQUIRE_THROWS_WITH_ALL(nn::TransformerEncoderLayer(8, 3), ValueError, "embed_dim (8)", "num_heads (3)");
  PRECIS_REQUIRE_THROWS_WITH_ALL(layer(randn({3, 16})), ShapeError, "TransformerEncoderLayer", "(S, N, E)");
}

TEST_CASE("nn::TransformerEncoderLayer: a padded position does not change the others", "[models][layers]") {
  for (bool norm_first : {false, true}) {
    INFO("norm_first " << norm_first);
    nn::TransformerEncoderLayer layer(8, 2, {.dim_feedforward = 16, .dropout = 0.0, .batch_first = true,
                                             .norm_first = norm_first});
    const Tensor x = randn({2, 5, 8});
    Tensor x2 = x.clone();
    {
      NoGradGuard ng;
      x2.select(0, 1).select(0, 4).fill_(7.0);  // sample 1, position 4: padding
    }
    const Tensor pad = from_vector<bool>({false, false, false, false, false, false, false, false, false, true}, {2, 5});
    const Tensor a = layer.forward(x, Tensor(), pad), b = layer.forward(x2, Tensor(), pad);
    PRECIS_REQUIRE_CLOSE(a.slice(1, 0, 4), b.slice(1, 0, 4), DType::f32);
    // Without the mask the padded value leaks into every position.
    CHECK_FALSE(allclose(layer(x).slice(1, 0, 4), layer(x2).slice(1, 0, 4), testing::tolerance(DType::f32)));
  }
}

TEST_CASE("nn::TransformerEncoder: deep copies under layers.<i>, the optional final norm", "[models][layers]") {
  nn::TransformerEncoderLayer proto(8, 2, {.dim_feedforward = 16, .dropout = 0.0, .norm_first = true});
  nn::TransformerEncoder enc(proto, 3, nn::LayerNorm(8));
  CHECK(enc.num_layers() == 3);
  const auto names = names_of(enc.named_parameters());
  CHECK(names.front() == "layers.0.self_attn.in_proj_weight");
  CHECK(names.back() == "norm.bias");
  CHECK(std::count_if(names.begin(), names.end(), [](const std::string& n) { return n.rfind("layers.2.", 0) == 0; }) ==
        12);
  // The copies start equal to the prototype (as PyTorch's deepcopy) but are separate tensors.
  CHECK(enc.layer(1).linear1->weight.to_vector<float>() == proto.linear1->weight.to_vector<float>());
  CHECK_FALSE(enc.layer(1).linear1->weight.is_same(enc.layer(2).linear1->weight));
  CHECK_FALSE(enc.layer(0).linear1->weight.is_same(proto.linear1->weight));
  CHECK(&enc.layers->at<nn::TransformerEncoderLayer>(2) == &enc.layer(2));
  // forward = the layers in order, then the norm.
  const Tensor x = randn({4, 2, 8});
  Tensor expect = x;
  for (size_t i = 0; i < 3; ++i) expect = enc.layer(i)(expect);
  PRECIS_REQUIRE_CLOSE(enc(x), (*enc.norm)(expect), DType::f32);
  // clone() relinks the layer handles to the copy's own layers.
  auto copy = enc.clone<nn::TransformerEncoder>();
  CHECK(&copy->layer(0) == &copy->layers->at<nn::TransformerEncoderLayer>(0));
  CHECK(&copy->layer(0) != &enc.layer(0));
  PRECIS_REQUIRE_CLOSE((*copy)(x), enc(x), DType::f32);
  nn::TransformerEncoder bare(proto, 1);
  CHECK_FALSE(bare.norm);
  PRECIS_REQUIRE_THROWS_WITH_ALL(nn::TransformerEncoder(proto, 0), ValueError, "num_layers");
  PRECIS_REQUIRE_THROWS_WITH_ALL(enc.layer(3), IndexError, "layer 3", "3 layers");
}
