// Harness of benchmarks/results/checkpointing-2026-12-05.md, -12-05b.md and -12-06-amx.md (the last
// added the per-call keep policies recompute-v, recompute-qkv, recompute-qkvo; not built by CMake): one BERT-mini
// masked-LM training step (L4 H256 A4 I1024, vocabulary 30522, dropout on, 15 % of the tokens
// predicted with the head at those positions only and the decoder fused with its loss, SGD), with
// the encoder layers' activation checkpointing none, full, selective (linear, linear_gelu, conv2d
// kept) or selective+matmul (attention's score and context products kept too).
// Prints one JSON line: the CPU allocator's bytes before the step (parameters, optimizer state),
// the activation memory (what the graph holds at the end of the forward: allocated then - before),
// the allocator's peak during the step (activations, the recomputed layer, gradients), the
// process's peak RSS (VmHWM), and the median and min wall time and process CPU time (user + system,
// all threads) of the timed steps: on a loaded machine the CPU time is the steadier cost measure.
// Built against a build dir's libprecis.so with the link line of precis-bench (build.ninja).
// With PRECIS_PROFILE=1 it also prints the op profile of the timed steps to stderr (per step;
// a checkpointed region's recomputed forward under "recompute"), reset after the warm-up.
// usage: harness none|full|selective|selective+matmul|recompute-v|recompute-qkv|recompute-qkvo|policy-qkvo BATCH SEQ f32|bf16 THREADS REPS
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <time.h>
#include <vector>

#include "amp/autocast.h"
#include "core/allocator.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "models/bert.h"
#include "ops/functional.h"
#include "optim/sgd.h"
#include "ops/profiler.h"
#include "tensor/factory.h"

using namespace precis;

static double cpu() { timespec t; clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static double wall() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

static double vm_hwm_mb() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 7) {
    std::fprintf(stderr, "usage: %s none|full|selective|selective+matmul|recompute-v|recompute-qkv|recompute-qkvo|policy-qkvo BATCH SEQ f32|bf16 THREADS REPS\n", argv[0]);
    return 2;
  }
  const std::string mode = argv[1];
  const int64_t batch = std::atoll(argv[2]), seq = std::atoll(argv[3]);
  const bool bf16 = std::string(argv[4]) == "bf16";
  set_num_threads(std::atoi(argv[5]));
  const int reps = std::atoi(argv[6]);

  autograd::CheckpointOptions ck{.mode = mode == "none" ? autograd::CheckpointMode::none
                                        : mode == "full" ? autograd::CheckpointMode::full
                                                         : autograd::CheckpointMode::selective};
  if (mode == "selective+matmul") ck.kept_ops.push_back(OpId::matmul);
  // Per-call policies over an encoder layer's linear calls: 0 query, 1 key, 2 value, 3 the
  // attention output projection, 4 the feed-forward output projection (linear_gelu kept always).
  auto keep_linears = [&](std::vector<int64_t> kept) {
    ck.keep = [kept](const KeepCandidate& c) {
      return c.op == OpId::linear_gelu || c.op == OpId::conv2d ||
             (c.op == OpId::linear && std::find(kept.begin(), kept.end(), c.index) != kept.end());
    };
  };
  if (mode == "recompute-v") keep_linears({0, 1, 3, 4});
  if (mode == "recompute-qkv") keep_linears({3, 4});
  if (mode == "recompute-qkvo") keep_linears({4});
  // policy-qkvo: BERT's own policy for L <= hidden with q, k, v and the attention output all
  // recomputed (kept: the feed-forward GEMMs and the score pass's dropout mask).
  if (mode == "policy-qkvo") {
    ck.keep = [](const KeepCandidate& c) {
      return c.op == OpId::linear_gelu || c.op == OpId::attention_softmax || (c.op == OpId::linear && c.index == 4);
    };
  }

  Generator init(1);
  models::BertConfig c = models::BertConfig::mini(30522);
  c.max_position_embeddings = std::max<int64_t>(512, seq);
  c.generator = &init;
  models::BertForMaskedLM model(c);
  model.train();
  model.bert->set_checkpointing(ck);
  optim::SGD opt(model.parameters(), {.lr = 1e-3});

  Generator data(2);
  const Tensor ids = (rand({batch, seq}, {}, &data) * 30000.0 + 1.0).to(DType::i64);
  std::vector<int64_t> labels = ids.to_vector<int64_t>();
  for (size_t i = 0; i < labels.size(); ++i)
    if (i % 7 != 0) labels[i] = -100;  // ~15 % of the positions predicted
  const Tensor label_t = from_vector<int64_t>(labels, {batch, seq});

  Allocator& a = cpu_allocator();
  size_t after_forward = 0;
  auto step = [&] {
    opt.zero_grad();
    Tensor loss;
    {
      std::optional<amp::Autocast> ac;
      if (bf16) ac.emplace(DType::bf16);
      loss = model.forward_with_labels(ids, Tensor(), label_t, {.masked_positions_only = true, .return_logits = false})
                 .loss;
    }
    after_forward = a.stats().allocated;
    loss.backward();
    opt.step();
  };
  manual_seed(3);
  step();
  step();  // warm-up; the optimizer (no state for plain SGD) and caches are settled
  opt.zero_grad();
  const size_t before = a.stats().allocated;
  a.reset_peak_stats();
  profiler::reset();
  std::vector<double> times, cpu_times;
  for (int r = 0; r < reps; ++r) {
    const double t0 = wall(), c0 = cpu();
    step();
    times.push_back((wall() - t0) * 1e3);
    cpu_times.push_back((cpu() - c0) * 1e3);
  }
  if (profiler::enabled()) std::fprintf(stderr, "%s\n", profiler::report(reps).c_str());
  const size_t peak = a.stats().peak_allocated;
  std::sort(times.begin(), times.end());
  std::sort(cpu_times.begin(), cpu_times.end());
  std::printf("{\"mode\":\"%s\",\"batch\":%lld,\"seq\":%lld,\"precision\":\"%s\",\"threads\":%s,\"reps\":%d,"
              "\"allocated_before_mb\":%.1f,\"activation_mb\":%.1f,\"peak_allocated_mb\":%.1f,\"peak_rss_mb\":%.1f,"
              "\"median_ms\":%.1f,\"min_ms\":%.1f,\"cpu_median_ms\":%.1f,\"cpu_min_ms\":%.1f}\n",
              mode.c_str(), static_cast<long long>(batch), static_cast<long long>(seq), bf16 ? "bf16" : "f32", argv[5],
              reps, before / 1048576.0, (after_forward - before) / 1048576.0, peak / 1048576.0, vm_hwm_mb(),
              times[times.size() / 2], times.front(), cpu_times[cpu_times.size() / 2], cpu_times.front());
  return 0;
}
