// The main of precis_dist_tests: starts the process group (MPI under mpirun, else a world of one),
// runs Catch2 on every rank, and ends the whole job at the first failed assertion on any rank (a
// rank that stopped would leave the others blocked in a collective until the ctest timeout).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>

#include "dist/process_group.h"
#include "tensor/factory.h"

namespace {

struct AbortOnFailure : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  bool assertionEnded(const Catch::AssertionStats& stats) override {
    const auto& r = stats.assertionResult;
    if (r.isOk() || !precis::dist::is_initialized()) return true;
    auto pg = precis::dist::init_process_group();
    if (pg->size() == 1) return true;  // Catch2 reports it as usual
    std::string msg = "precis_dist_tests: rank " + std::to_string(pg->rank()) + " failed at " +
                      r.getSourceInfo().file + ":" + std::to_string(r.getSourceInfo().line) + ": " +
                      r.getExpressionInMacro() + " with expansion " + r.getExpandedExpression();
    if (r.hasMessage()) msg += " (" + r.getMessage() + ")";
    precis::dist::abort_job(msg + "; ending every rank", 1);
  }
};

}  // namespace

CATCH_REGISTER_LISTENER(AbortOnFailure)

int main(int argc, char** argv) {
  auto pg = precis::dist::init_process_group();
  std::printf("precis_dist_tests: rank %d of %d (%s backend)\n", pg->rank(), pg->size(), pg->backend().c_str());
  std::fflush(stdout);
  int rc = Catch::Session().run(argc, argv);
  // Every rank exits with the worst result, so mpirun's status reflects any rank's failure.
  precis::Tensor worst = precis::full({1}, static_cast<double>(rc), {.dtype = precis::DType::i64});
  pg->all_reduce(worst, precis::dist::ReduceOp::max)->wait();
  return static_cast<int>(worst.item<int64_t>());
}
