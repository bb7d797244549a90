// The dist suite (run it under mpirun: `mpirun -np 2 precis-bench dist --threads 1`):
//   all_reduce f32 <size>  one in-place sum all-reduce: the ProcessGroup (MPI_Iallreduce + wait)
//                          against MPI_Allreduce called directly on the same buffer. The note
//                          gives the bus bandwidth, bytes · 2(n−1)/n / time (NCCL's convention:
//                          what each rank's link carries in a ring), from the median times.
//   resnet20 b32 step      one training step (forward, backward, SGD) of resnet20 on a batch of
//                          32 CIFAR-sized images per rank, with DistributedDataParallel against
//                          the same step without it (every rank computes either way, so both see
//                          the same load: the difference is what DDP's reduction costs).
//   bert_mini b8x64 adam step  one training step (forward, backward, Adam) of BERT-mini (vocabulary
//                          30522, 11.2 M parameters) on 8 sequences of 64 tokens per rank, plain
//                          DDP against DDP + ZeroOptimizer (ZeRO-1). The note gives each one's
//                          optimizer-state bytes per rank as the CPU allocator counts them (live
//                          bytes after the first step minus before it) and the step's peak above
//                          what was live before it.
// Every rank must issue the same collectives, so the repetition count is fixed (--repeat, at most
// 50; no time-based stop) and the impls are interleaved identically on every rank. Only rank 0
// prints. Without mpirun it runs as a world of one (no communication to measure).
#ifdef PRECIS_HAS_MPI
#include <mpi.h>

#include <cstdio>
#include <memory>
#include <sstream>

#include "benchmarks/bench.h"
#include "core/thread_pool.h"
#include "dist/ddp.h"
#include "dist/process_group.h"
#include "dist/zero.h"
#include "core/allocator.h"
#include "core/rng.h"
#include "models/bert.h"
#include "optim/adam.h"
#include "models/resnet.h"
#include "ops/functional.h"
#include "optim/sgd.h"
#include "tensor/factory.h"

namespace precis::bench {
namespace {

std::string fixed2(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

SuiteReport run_dist_case(const Options& options, int threads) {
  auto pg = dist::init_process_group(dist::Backend::mpi);
  const int n = pg->size();
  if (pg->rank() != 0) (void)std::freopen("/dev/null", "w", stdout);  // one table, from rank 0
  Options fixed = options;
  fixed.min_seconds = 0;
  fixed.max_reps = std::min(options.max_reps, 50);
  fixed.min_reps = fixed.max_reps;
  SuiteReport report;
  report.baseline_impl = "MPI_Allreduce";
  std::ostringstream note;
  note << "World size " << n << ", " << threads << " thread(s) per rank. Bus bandwidth (GB/s, from median): ";
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  for (int64_t mib : {1, 16}) {
    const std::string name = "all_reduce f32 " + std::to_string(mib) + " MiB";
    if (!case_selected(options, name)) continue;
    const int64_t count = mib * 1024 * 1024 / 4;
    Tensor buf = full({count}, 1.0);
    std::vector<std::function<void()>> impls = {
        [&] { pg->all_reduce(buf, dist::ReduceOp::sum)->wait(); },
        [&] { MPI_Allreduce(MPI_IN_PLACE, buf.data_ptr(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, comm); },
    };
    auto t = time_interleaved(impls, fixed);
    const char* names[] = {"ProcessGroup", "MPI_Allreduce"};
    for (int i = 0; i < 2; ++i) {
      report.records.push_back(Record{"dist", name, names[i], "f32", threads, t[i].median_ms, t[i].min_ms, 0, t[i].reps});
      const double bus = n > 1 ? static_cast<double>(count) * 4 * 2.0 * (n - 1) / n / (t[i].median_ms * 1e-3) / 1e9 : 0;
      note << name << " " << names[i] << " " << fixed2(bus) << "; ";
    }
  }
  MPI_Comm_free(&comm);
  const std::string step_name = "resnet20 b32 step";
  if (case_selected(options, step_name)) {
    models::ResNetOptions ro;
    ro.num_classes = 10;
    auto make = [&](bool with_ddp) {
      auto model = models::resnet20(ro);
      auto opt = std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions{.lr = 1e-3, .momentum = 0.9});
      std::shared_ptr<dist::DistributedDataParallel> ddp;
      if (with_ddp)
        ddp = std::make_shared<dist::DistributedDataParallel>(pg, model->named_parameters(), model->named_buffers());
      Tensor x = randn({32, 3, 32, 32});
      Tensor y = randint(0, 10, {32});
      return std::function<void()>([model, opt, ddp, x, y] {
        opt->zero_grad();
        if (ddp) ddp->pre_forward();
        cross_entropy(model->forward(x), y).backward();
        opt->step();
      });
    };
    std::vector<std::function<void()>> impls = {make(true), make(false)};
    auto t = time_interleaved(impls, fixed);
    report.records.push_back(Record{"dist", step_name, "ddp", "f32", threads, t[0].median_ms, t[0].min_ms, 0, t[0].reps});
    report.records.push_back(
        Record{"dist", step_name, "no ddp", "f32", threads, t[1].median_ms, t[1].min_ms, 0, t[1].reps});
  }
  const std::string bert_name = "bert_mini b8x64 adam step";
  if (case_selected(options, bert_name)) {
    // Each impl owns a model; the first step of each is taken alone, with the allocator's counts
    // around it, before the timed steps interleave them.
    std::vector<std::function<void()>> impls;
    std::vector<std::pair<double, double>> mib;  // (state, step peak above live) per impl
    for (bool zero : {false, true}) {
      manual_seed(1);
      auto model = std::make_shared<models::BertForMaskedLM>(models::BertConfig::mini(30522));
      auto ddp = std::make_shared<dist::DistributedDataParallel>(pg, model->named_parameters(), model->named_buffers());
      std::shared_ptr<optim::Optimizer> opt;
      auto make_adam = [](std::vector<Tensor> params) {
        return std::make_unique<optim::Adam>(std::move(params), optim::AdamOptions{.lr = 1e-4});
      };
      if (zero)
        opt = std::make_shared<dist::ZeroOptimizer>(*ddp, model->parameters(), [&](std::vector<std::vector<Tensor>> s) {
          return make_adam(std::move(s[0]));
        });
      else
        opt = make_adam(model->parameters());
      Tensor ids = randint(0, 30522, {8, 64});
      auto step = [model, opt, ddp, ids](bool measure, std::pair<double, double>* out) {
        opt->zero_grad();
        ddp->pre_forward();
        models::BertForMaskedLM::loss(model->forward(ids, Tensor()), ids).backward();
        Allocator& a = cpu_allocator();
        const AllocatorStats before = a.stats();
        if (measure) a.reset_peak_stats();
        opt->step();
        if (measure) {
          const AllocatorStats after = a.stats();
          out->first = (static_cast<double>(after.allocated) - static_cast<double>(before.allocated)) / (1 << 20);
          out->second = (static_cast<double>(after.peak_allocated) - static_cast<double>(before.allocated)) / (1 << 20);
        }
      };
      mib.emplace_back();
      step(true, &mib.back());
      impls.push_back([step] { step(false, nullptr); });
    }
    auto t = time_interleaved(impls, fixed);
    const char* names[] = {"ddp", "ddp+zero"};
    for (int i = 0; i < 2; ++i)
      report.records.push_back(Record{"dist", bert_name, names[i], "f32", threads, t[i].median_ms, t[i].min_ms, 0, t[i].reps});
    // Every rank's figures, gathered so that rank 0 can print them.
    Tensor mine = from_vector<double>({mib[0].first, mib[0].second, mib[1].first, mib[1].second});
    Tensor all = zeros({n, 4}, {.dtype = DType::f64});
    pg->all_gather(mine, all)->wait();
    note << bert_name << ": optimizer state MiB per rank (allocator, live after the first step minus before), "
         << "ddp vs ddp+zero; the step's peak MiB above what was live before it:";
    for (int r = 0; r < n; ++r) {
      const double* v = all.data_ptr<double>() + 4 * r;
      note << " rank " << r << ": state " << fixed2(v[0]) << " vs " << fixed2(v[2]) << " (" << fixed2(100 * v[2] / v[0])
           << " %), peak " << fixed2(v[1]) << " vs " << fixed2(v[3]) << ";";
    }
    note << " ";
  }
  note << "the ratio column compares each impl with MPI_Allreduce (all-reduce cases only); resnet20: ddp vs "
          "no ddp is the reduction's cost at equal per-rank work; bert_mini: ddp+zero vs ddp is ZeRO-1's step time "
          "(reduce-scatter + Adam on 1/N + all-gather, against all-reduce + Adam on all).";
  report.note = note.str();
  return report;
}

SuiteReport run_dist_suite(const Options& options) {
  SuiteReport all;
  for (int threads : options.threads) {
    set_num_threads(threads);
    SuiteReport r = run_dist_case(options, threads);
    all.records.insert(all.records.end(), r.records.begin(), r.records.end());
    all.note += (all.note.empty() ? "" : "\n\n") + r.note;
    all.baseline_impl = r.baseline_impl;
  }
  return all;
}

const bool kRegistered = register_suite(
    {"dist", "all-reduce bus bandwidth (ProcessGroup vs MPI_Allreduce) and DDP step time; run under mpirun",
     &run_dist_suite});

}  // namespace
}  // namespace precis::bench
#endif  // PRECIS_HAS_MPI
