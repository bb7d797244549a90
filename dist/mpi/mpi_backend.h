#pragma once
// The MPI backend's entry points for dist/process_group.cpp. Deliberately free of <mpi.h>: only
// dist/mpi/*.cpp (compiled when MPI is found) sees MPI's types.
#include <memory>

#include "dist/process_group.h"

namespace precis::dist::detail {

/// Initialises MPI once (finalised at exit) and returns a group over a duplicate of MPI_COMM_WORLD.
std::shared_ptr<ProcessGroup> make_mpi_process_group();
/// Whether MPI is initialised and not yet finalised.
bool mpi_running();
/// MPI_Abort(MPI_COMM_WORLD, code).
[[noreturn]] void mpi_abort(int code);

}  // namespace precis::dist::detail
