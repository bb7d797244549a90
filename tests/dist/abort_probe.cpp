// tests/dist/expect_abort.sh runs this under mpirun: the last rank throws an exception that
// escapes main while the others wait in a barrier that can never complete. The job must end
// (MPI_Abort from the terminate handler init_process_group installs), not hang. With the argument
// "return", the last rank catches it and returns 1 from main, as ordinary C++ error handling
// does: the job must end too (MPI_Abort at exit for a failure status).
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "dist/process_group.h"

int main(int argc, char** argv) {
  auto pg = precis::dist::init_process_group();
  if (pg->rank() == pg->size() - 1) {
    std::printf("abort_probe: rank %d throws\n", pg->rank());
    std::fflush(stdout);
    try {
      throw std::runtime_error("abort_probe: the failure injected on the last rank");
    } catch (const std::exception& e) {
      if (argc < 2 || std::strcmp(argv[1], "return") != 0) throw;
      std::fprintf(stderr, "%s; main returns 1\n", e.what());
      return 1;
    }
  }
  pg->barrier()->wait();  // never completes: the last rank does not call it
  std::printf("abort_probe: rank %d passed a barrier it should not have\n", pg->rank());
  return 0;
}
