// tests/dist/expect_abort.sh runs this under mpirun: the last rank throws an exception that
// escapes main while the others wait in a barrier that can never complete. The job must end
// (MPI_Abort from the terminate handler init_process_group installs), not hang.
#include <cstdio>
#include <stdexcept>

#include "dist/process_group.h"

int main() {
  auto pg = precis::dist::init_process_group();
  if (pg->rank() == pg->size() - 1) {
    std::printf("abort_probe: rank %d throws\n", pg->rank());
    std::fflush(stdout);
    throw std::runtime_error("abort_probe: the failure injected on the last rank");
  }
  pg->barrier()->wait();  // never completes: the last rank does not call it
  std::printf("abort_probe: rank %d passed a barrier it should not have\n", pg->rank());
  return 0;
}
