// CUDA graph capture (core/cuda_graph.h) on the fake device: what a capture refuses before it is
// issued (a host wait, a copy from a temporary host buffer, a draw it could not replay), the state
// errors, the private pool a capture allocates from, that whole training steps are capturable — no
// host wait inside them — and that a captured step's dropout draws the masks an eager step draws.
// The fake device runs kernels as they are launched, so it has nothing to replay: replays, and the
// captured work's results, are checked on a GPU.
#include <string>
#include <vector>

#include "amp/amp.h"
#include "models/bert.h"
#include "models/resnet.h"
#include "precis.h"
#include "tests/fake_cuda/fake_device.h"
#include "tests/support/tensor_testing.h"
#include "tests/support/tiny_bert.h"

using namespace precis;
using precis::fake_cuda_testing::require_fake_device;

namespace {

const Device kDev = Device::cuda(0);

// The GraphCaptureError's message from capturing fn, failing the test when nothing throws.
template <typename F>
std::string capture_error(cuda::Graph& g, F&& fn) {
  try {
    cuda::capture(g, std::forward<F>(fn));
  } catch (const GraphCaptureError& e) {
    return e.what();
  }
  FAIL("the capture did not throw GraphCaptureError");
  return "";
}

// One f16 autocast training step with the loss scaler, clipping and the optimizer's step.
void train_step(const std::function<Tensor()>& forward_loss, optim::Optimizer& opt, amp::GradScaler& scaler) {
  Tensor loss;
  {
    amp::Autocast ac(DType::f16, DeviceType::cuda);
    loss = forward_loss();
  }
  scaler.scale(loss).backward();
  (void)scaler.clip_grad_norm_(opt, 1.0);
  (void)scaler.step(opt);
  scaler.update();
  opt.zero_grad();
}

}  // namespace

TEST_CASE("a CUDA graph capture refuses a host wait before it is issued, naming it") {
  require_fake_device();
  const Tensor x = randn({4}).to(kDev);
  cuda::Graph g;
  const std::string m = capture_error(g, [&] { (void)sum(x * 2.0).item<float>(); });
  CHECK(m.find("device-to-host copy") != std::string::npos);
  CHECK(m.find("Tensor::item()") != std::string::npos);
  CHECK(m.find("while capturing a CUDA graph") != std::string::npos);
  CHECK_FALSE(g.captured());  // abandoned: nothing to replay
  CHECK_FALSE(cuda::is_capturing());
  const std::string upload = capture_error(g, [&] { (void)full({4}, 1.0).to(kDev); });  // a pageable source
  CHECK(upload.find("pageable") != std::string::npos);
  // A factory with a device goes up through a temporary pinned buffer: no wait, but a replay would
  // copy from memory that is gone.
  const std::string factory = capture_error(g, [&] { (void)arange(4.0, {.device = kDev}); });
  CHECK(factory.find("temporary host buffer") != std::string::npos);
  const std::string sync = capture_error(g, [&] { cuda::synchronize(0); });
  CHECK(sync.find("synchronize") != std::string::npos);
  CHECK_NOTHROW((void)sum(x).item<float>());  // outside a capture the host reads as always
  // A loss scaler first used inside the capture: its state would be made again by every replay.
  amp::GradScaler fresh;
  const std::string scaler = capture_error(g, [&] { (void)fresh.scale(sum(x)); });
  CHECK(scaler.find("GradScaler") != std::string::npos);
  CHECK(scaler.find("eagerly before capturing") != std::string::npos);
  // Work on another device than the graph's: a capture records its own device's stream only.
  const Tensor other = randn({4}).to(Device::cuda(1));
  const std::string device = capture_error(g, [&] { (void)(other * 2.0); });
  CHECK(device.find("cuda:1") != std::string::npos);
  CHECK(device.find("cuda::Graph graph(1)") != std::string::npos);
}

TEST_CASE("a CUDA graph capture draws dropout's numbers relative to a base the replays set") {
  require_fake_device();
  const Tensor x = randn({64}).to(kDev);
  Generator& gen = default_generator();
  const uint64_t seed = gen.seed(), start = gen.offset();
  const Tensor eager = dropout(x, 0.5, true).to(Device::cpu());
  const uint64_t after_eager = gen.offset();
  REQUIRE(after_eager > start);
  // The fake device runs the captured kernels as they are issued, with the base written at
  // capture_begin (the generator's offset then): the eager step's mask, bit for bit.
  gen.set_state(seed, start);
  cuda::Graph g;
  Tensor captured;
  cuda::capture(g, [&] { captured = dropout(x, 0.5, true); });
  PRECIS_REQUIRE_SAME_BITS(captured.to(Device::cpu()), eager);
  CHECK(gen.offset() == start);  // on a GPU the capture does not run: replays draw, not the capture
  // A replay writes the base and advances the generator after launching; the fake device has
  // nothing to launch, so it refuses before the generator moves.
  CHECK_THROWS_AS(g.replay(), NotImplementedError);
  CHECK(gen.offset() == start);
  // Reseeding between capture and replay is refused: the captured kernels hold the old seed.
  gen.manual_seed(seed + 1);
  CHECK_THROWS_AS(g.replay(), StateError);
  gen.set_state(seed, after_eager);
}

TEST_CASE("a CUDA graph capture refuses draws it cannot replay: unknown generators, host draws, CPU tensors") {
  require_fake_device();
  const Tensor x = randn({64}).to(kDev);
  Generator other(7);
  cuda::Graph g;
  const std::string unknown = capture_error(g, [&] { (void)dropout(x, 0.5, true, &other); });
  CHECK(unknown.find("register_generator") != std::string::npos);
  CHECK(unknown.find("every replay would repeat them") != std::string::npos);
  g.register_generator(other);
  Tensor y;
  CHECK_NOTHROW(cuda::capture(g, [&] { y = dropout(x, 0.5, true, &other); }));
  CHECK(other.offset() == 0);
  cuda::Graph h;
  const std::string host = capture_error(h, [&] { (void)randn({4}); });
  CHECK(host.find("made on the host") != std::string::npos);
  const Tensor on_cpu = randn({8});
  const std::string cpu = capture_error(h, [&] { (void)dropout(on_cpu, 0.5, true); });
  CHECK(cpu.find("CPU tensor") != std::string::npos);
  CHECK_NOTHROW(dropout(x, 0.5, true));  // nothing is left installed after the captures
  CHECK_NOTHROW(randn({4}));
  cuda::Graph k;
  k.capture_begin();
  CHECK_THROWS_AS(k.register_generator(other), StateError);
  k.reset();
}

TEST_CASE("cuda::Graph refuses what its state does not allow with StateError") {
  require_fake_device();
  cuda::Graph g, other;
  CHECK_THROWS_AS(g.replay(), StateError);       // nothing captured
  CHECK_THROWS_AS(g.capture_end(), StateError);  // not capturing
  g.capture_begin();
  CHECK(cuda::is_capturing());
  CHECK_THROWS_AS(g.capture_begin(), StateError);      // already capturing
  CHECK_THROWS_AS(other.capture_begin(), StateError);  // captures do not nest
  CHECK_THROWS_AS(g.replay(), StateError);             // the capture has not ended
  g.capture_end();
  CHECK_FALSE(cuda::is_capturing());
  CHECK(g.captured());
  CHECK_THROWS_AS(g.capture_begin(), StateError);  // holds a graph: reset() first
  CHECK_THROWS_AS(g.replay(), NotImplementedError);  // the fake device has nothing to replay
  g.reset();
  CHECK_FALSE(g.captured());
  CHECK_NOTHROW(cuda::capture(g, [] {}));
  cuda::Graph moved = std::move(g);
  CHECK(moved.captured());
  CHECK_FALSE(g.captured());  // NOLINT(bugprone-use-after-move): a moved-from graph is empty
  CHECK_THROWS_AS(cuda::Graph(cuda_device_count()).capture_begin(), DeviceError);
}

TEST_CASE("a capture's allocations come from its private pool, which nothing outside receives") {
  require_fake_device();
  const Tensor x = randn({1 << 16}).to(kDev);
  cuda::Graph g;
  const void* inside = nullptr;
  cuda::capture(g, [&] {
    const Tensor y = x * 2.0;  // allocated and freed during the capture
    inside = y.data_ptr();
  });
  // Outside the capture the same request is served elsewhere: a replay writes `inside` again.
  for (int i = 0; i < 4; ++i) CHECK((x * 3.0).data_ptr() != inside);
}

TEST_CASE("whole f16 training steps are capturable: ResNet-20 with SGD, BERT without dropout with Adam") {
  require_fake_device();
  {
    auto model = models::resnet20({.num_classes = 10, .in_channels = 1, .width = 4});
    model->to(kDev);
    optim::SGD opt(model->parameters(), {.lr = 0.05, .momentum = 0.9});
    amp::GradScaler scaler;
    const Tensor x = randn({4, 1, 8, 8}).pin_memory().to(kDev, true);
    const Tensor y = from_vector<int64_t>({1, 3, 5, 7}).pin_memory().to(kDev, true);
    auto step = [&] { train_step([&] { return cross_entropy(model->forward(x), y); }, opt, scaler); };
    step();  // warm-up outside the capture: the optimizer's state, the scaler's
    step();
    cuda::Graph g;
    CHECK_NOTHROW(cuda::capture(g, step));
    CHECK(g.captured());
  }
  {
    const models::BertConfig cfg = testing::tiny_bert_config();
    models::BertForMaskedLM model(cfg);
    model.to(kDev);
    optim::Adam opt(model.parameters(), {.lr = 1e-3});
    amp::GradScaler scaler;
    const Tensor host_ids = randint(1, 60, {2, 8}, {.dtype = DType::i64});
    const Tensor ids = host_ids.pin_memory().to(kDev, true);
    const Tensor labels =
        where(lt(rand({2, 8}), 0.3), host_ids, full({2, 8}, -100.0, {.dtype = DType::i64})).pin_memory().to(kDev, true);
    auto step = [&] { train_step([&] { return model.forward_with_labels(ids, Tensor(), labels).loss; }, opt, scaler); };
    step();
    step();
    cuda::Graph g;
    CHECK_NOTHROW(cuda::capture(g, step));
    CHECK(g.captured());
  }
}

// BERT with dropout everywhere (hidden, attention): a captured step, run where kernels run as issued,
// draws the masks an eager step draws from the same generator state — parameters equal bit for bit.
TEST_CASE("a whole BERT step with dropout is capturable and its captured run equals an eager step") {
  require_fake_device();
  const models::BertConfig cfg = testing::tiny_bert_config(0.1);
  const Tensor host_ids = randint(1, 60, {2, 8}, {.dtype = DType::i64});
  const Tensor ids = host_ids.pin_memory().to(kDev, true);
  const Tensor labels =
      where(lt(rand({2, 8}), 0.3), host_ids, full({2, 8}, -100.0, {.dtype = DType::i64})).pin_memory().to(kDev, true);
  auto run = [&](bool captured) {
    manual_seed(11);
    models::BertForMaskedLM model(cfg);
    model.to(kDev);
    optim::Adam opt(model.parameters(), {.lr = 1e-3});
    amp::GradScaler scaler;
    auto step = [&] { train_step([&] { return model.forward_with_labels(ids, Tensor(), labels).loss; }, opt, scaler); };
    step();  // warm-up outside the capture
    cuda::Graph g;
    if (captured) {
      cuda::capture(g, step);
      CHECK(g.captured());
    } else {
      step();
    }
    std::vector<Tensor> params;
    for (const Tensor& p : model.parameters()) params.push_back(p.detach().to(Device::cpu()));
    return params;
  };
  const std::vector<Tensor> eager = run(false), graphed = run(true);
  REQUIRE(eager.size() == graphed.size());
  for (size_t i = 0; i < eager.size(); ++i) PRECIS_REQUIRE_SAME_BITS(graphed[i], eager[i]);
}

// A capturable optimizer with its schedule on the device (optim/optimizer.h, optim/lr_scheduler.h):
// the whole step — loss scaler, optimizer, OneCycleLR counting on the device — captures, and its
// captured run (here: run as issued) keeps equal to eager steps with the host schedule. Setting
// the lr, the mode or the table inside a capture is refused.
TEST_CASE("a whole step with a capturable optimizer and its schedule on the device captures and equals the eager steps") {
  require_fake_device();
  auto make_model = [] {
    manual_seed(11);
    auto m = models::resnet20({.num_classes = 10, .in_channels = 1, .width = 4});
    m->to(kDev);
    return m;
  };
  auto eager_model = make_model(), graph_model = make_model();
  optim::SGD eager_opt(eager_model->parameters(), {.lr = 0.05, .momentum = 0.9});
  optim::SGD graph_opt(graph_model->parameters(), {.lr = 0.05, .momentum = 0.9});
  graph_opt.set_capturable(true);
  optim::OneCycleLR eager_sched(eager_opt, {.max_lr = 0.1, .total_steps = 8});
  optim::OneCycleLR graph_sched(graph_opt, {.max_lr = 0.1, .total_steps = 8});
  graph_sched.to_device(8);
  amp::GradScaler eager_scaler, graph_scaler;
  const Tensor x = randn({4, 1, 8, 8}).pin_memory().to(kDev, true);
  const Tensor y = from_vector<int64_t>({1, 3, 5, 7}).pin_memory().to(kDev, true);
  auto step = [&](nn::Module& model, optim::Optimizer& opt, amp::GradScaler& scaler) {
    Tensor loss;
    {
      amp::Autocast ac(DType::f16, DeviceType::cuda);
      loss = cross_entropy(model.forward(x), y);
    }
    scaler.scale(loss).backward();
    amp::StepResult r = scaler.step(opt);
    scaler.update();
    opt.zero_grad();
    return r;
  };
  auto eager_step = [&] { eager_sched.step(step(*eager_model, eager_opt, eager_scaler).applied()); };
  auto graph_step = [&] { graph_sched.step_on_device(step(*graph_model, graph_opt, graph_scaler).skip_flag()); };
  auto require_equal = [&] {
    const auto a = eager_model->parameters(), b = graph_model->parameters();
    for (size_t i = 0; i < a.size(); ++i) PRECIS_REQUIRE_SAME_BITS(b[i].to(Device::cpu()), a[i].to(Device::cpu()));
  };
  for (int i = 0; i < 2; ++i) {  // warm-up outside the capture: the first scaler steps overflow and skip
    eager_step();
    graph_step();
    require_equal();
  }
  cuda::Graph g;
  REQUIRE_NOTHROW(cuda::capture(g, graph_step));  // no host wait anywhere in the step
  eager_step();
  require_equal();
  CHECK(graph_sched.last_step() == eager_sched.last_step());
  CHECK(graph_opt.scheduled(0).to(Device::cpu()).to_vector<double>() ==
        std::vector<double>{eager_opt.group_lr(0), eager_opt.group_momentum(0)});

  cuda::Graph refused;
  PRECIS_REQUIRE_THROWS_WITH_ALL(cuda::capture(refused, [&] { graph_opt.set_lr(0.2); }), StateError,
                                 "capture is in progress", "between replays", "step_on_device");
  PRECIS_REQUIRE_THROWS_WITH_ALL(cuda::capture(refused, [&] { graph_opt.set_capturable(false); }), StateError,
                                 "set_capturable", "before capturing");
  PRECIS_REQUIRE_THROWS_WITH_ALL(cuda::capture(refused, [&] { graph_sched.to_device(8); }), StateError,
                                 "OneCycleLR.to_device", "before capturing");
  // The host form of the schedule reads the device count: a host wait, refused before it is issued.
  CHECK(capture_error(refused, [&] { graph_sched.step(); }).find("Tensor::item()") != std::string::npos);
  CHECK_FALSE(refused.captured());
}

// The fp8 recipe's device-side steps (amp/fp8_recipe.h) wait for nothing: a cast with its amax, the
// record and the delayed-scaling update capture, and run where issued they equal the same steps on
// the CPU.
TEST_CASE("fp8 scaled casts and delayed-scaling updates capture, and equal the CPU's") {
  require_fake_device();
  const Tensor host_x = randn({64, 32}).to(DType::bf16);
  const Tensor x = host_x.pin_memory().to(kDev, true);
  amp::DelayedScalingState dev({.amax_history_len = 8}, kDev), cpu({.amax_history_len = 8});
  auto step = [](const Tensor& input, amp::DelayedScalingState& s) {
    const amp::Fp8Cast c = amp::fp8_scaled_cast(input, s.scale(), Fp8Format::e4m3);
    s.record(c.amax);
    s.update();
    return c.data;
  };
  (void)step(x, dev);  // warm-up outside the capture
  (void)step(host_x, cpu);
  Tensor data;
  cuda::Graph g;
  REQUIRE_NOTHROW(cuda::capture(g, [&] { data = step(x, dev); }));
  const Tensor want = step(host_x, cpu);
  PRECIS_REQUIRE_SAME_BITS(data.to(Device::cpu()), want);
  PRECIS_REQUIRE_SAME_BITS(dev.scale().to(Device::cpu()), cpu.scale());
  PRECIS_REQUIRE_SAME_BITS(dev.amax_history().to(Device::cpu()), cpu.amax_history());
}

TEST_CASE("causal attention is capturable after an eager call, with the CPU's values") {
  require_fake_device();
  // The causal mask is made from host indices: once per size, at the eager call; inside the
  // capture (where an upload is refused) the kept mask is used.
  const Tensor q0 = randn({2, 4, 5, 8}), k0 = randn({2, 4, 7, 8}), v0 = randn({2, 4, 7, 8});
  const Tensor q = q0.to(kDev), k = k0.to(kDev), v = v0.to(kDev);
  const Tensor eager = scaled_dot_product_attention(q, k, v, Tensor(), 0.0, true);
  cuda::Graph g;
  Tensor captured;
  REQUIRE_NOTHROW(cuda::capture(g, [&] { captured = scaled_dot_product_attention(q, k, v, Tensor(), 0.0, true); }));
  const Tensor cpu = scaled_dot_product_attention(q0, k0, v0, Tensor(), 0.0, true);
  PRECIS_REQUIRE_CLOSE(eager.to(Device::cpu()), cpu, DType::f32);
  PRECIS_REQUIRE_SAME_BITS(captured.to(Device::cpu()), eager.to(Device::cpu()));
  // A size first seen inside a capture still needs its upload: refused, naming what to do.
  cuda::Graph h;
  const Tensor q2 = randn({1, 1, 3, 8}).to(kDev), k2 = randn({1, 1, 6, 8}).to(kDev);
  CHECK(capture_error(h, [&] { (void)scaled_dot_product_attention(q2, k2, k2, Tensor(), 0.0, true); })
            .find("before the capture") != std::string::npos);
}
