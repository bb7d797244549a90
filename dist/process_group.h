#pragma once
// Collective communication between the processes of a data-parallel job (torch.distributed's
// ProcessGroup). One process per rank; ranks come from the launcher (`mpirun`, `srun --mpi=pmix`).
//
//   auto pg = dist::init_process_group();          // MPI under mpirun, else a world of one
//   Tensor g = ...;                                // contiguous, on the CPU (or a GPU: NCCL)
//   auto work = pg->all_reduce(g, dist::ReduceOp::avg);
//   ...                                            // overlap other work
//   work->wait();                                  // g holds the mean over the ranks
//
// Every collective is asynchronous and returns a Work handle; every rank must issue the same
// collectives in the same order (MPI's rule), and a handle must be waited before its tensor is
// read or written. Backends: MPI for CPU tensors (dist/mpi/, built when MPI is found); a world of
// one needs no backend; NCCL for CUDA tensors (dist/cuda/, built with CUDA when NCCL is found),
// chosen per call by the tensor's device (docs/distributed.md). For a CUDA tensor, wait() orders
// the device's compute stream after the collective without blocking the host. Public headers of
// dist/ include no MPI or NCCL header.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "tensor/tensor.h"

namespace precis::dist {

/// A collective failed (the transport reported an error, or a rank left the job); the message
/// names the collective, the tensor and the backend's own text.
class DistributedError : public Error { using Error::Error; };

enum class ReduceOp { sum, avg, max };
/// "sum", "avg", "max".
const char* reduce_op_name(ReduceOp op);

/// A collective in flight. wait() blocks until its result is in the tensor(s) it was given and
/// rethrows its error (DistributedError); done() polls without blocking (and makes progress).
class Work {
 public:
  /// A Work dropped before wait() still completes before anything reads its tensors, so that
  /// `pg->all_reduce(t, op);` as a statement behaves as PyTorch's synchronous all_reduce(t): the
  /// MPI backend waits in the destructor (while an exception unwinds it abandons the request and
  /// keeps its buffers alive instead), NCCL orders the device's stream after the collective.
  virtual ~Work() = default;
  /// Blocks until complete; DistributedError on failure. Idempotent.
  virtual void wait() = 0;
  /// Whether it has completed (a completed failure reports true; wait() throws it).
  virtual bool done() = 0;
};

/// The ranks of a job and their collectives (all_reduce, reduce_scatter, broadcast, all_gather,
/// barrier), each
/// asynchronous, returning a Work to wait on. Backends: MPI (CPU tensors), NCCL (CUDA tensors), and
/// a world of one without MPI (docs/distributed.md).
class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  /// This process's rank, 0 .. size()-1.
  virtual int rank() const = 0;
  /// Number of ranks.
  virtual int size() const = 0;
  /// Rank among the processes on this machine (for choosing a GPU).
  virtual int local_rank() const = 0;
  /// "mpi", "local" (a world of one), either followed by "+nccl" when CUDA tensors go to NCCL, or
  /// a wrapper's name.
  virtual std::string backend() const = 0;

  /// Reduces `t` over the ranks in place. `t` is contiguous, on the same device on every rank, with
  /// the same shape and dtype everywhere; f16/bf16 are reduced through f32; avg needs a floating
  /// dtype. Integer-valued inputs give exact results.
  virtual std::shared_ptr<Work> all_reduce(const Tensor& t, ReduceOp op) = 0;
  /// Reduces `in` (contiguous, size() · out.numel() elements, the same on every rank) over the ranks
  /// and leaves in this rank's `out` (contiguous, in's dtype and device) the block of out.numel()
  /// elements starting at rank() · out.numel(): a ring all-reduce's first half (MPI
  /// MPI_Ireduce_scatter_block, NCCL ncclReduceScatter). `in` itself is left as it was. Dtypes as
  /// all_reduce. This base version is an all_reduce of a copy of `in` (twice the traffic), for
  /// wrappers and backends without one; the MPI and NCCL groups override it.
  virtual std::shared_ptr<Work> reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op);
  /// Copies `root`'s `t` into every rank's `t` (same shape and dtype everywhere).
  virtual std::shared_ptr<Work> broadcast(const Tensor& t, int root) = 0;
  /// out (shape [size(), *in.shape], contiguous, in's dtype) receives every rank's `in`, in rank order.
  virtual std::shared_ptr<Work> all_gather(const Tensor& in, const Tensor& out) = 0;
  /// Returns once every rank has called it.
  virtual std::shared_ptr<Work> barrier() = 0;
};

/// automatic, mpi and local choose the transport of CPU tensors and barriers; in a build with NCCL
/// CUDA tensors go to NCCL under each of them. nccl (torch's init_process_group("nccl")) is
/// automatic that insists on NCCL for CUDA tensors, failing at once where they could not go there.
enum class Backend { automatic, mpi, local, nccl };

/// The process group of this job, created on the first call (later calls return the same one;
/// `backend` must then agree). automatic: MPI when the process was started by an MPI launcher
/// (mpirun/srun set OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK), else a world of one. Starting
/// MPI initialises it once (MPI_THREAD_FUNNELED: collectives are issued from the thread that
/// created the group) and finalises it at exit, and installs abort_on_uncaught(). DistributedError
/// when MPI is asked for (or launched) but precis was built without it.
/// nccl: as automatic, so without a launcher a world of one whose NCCL communicator is made in
/// this process (ncclGetUniqueId, no MPI) on the first CUDA collective; backend() then reads
/// "local+nccl" ("mpi+nccl" under a launcher). DistributedError when the CUDA backend cannot be
/// loaded or was built without NCCL, DeviceError when no CUDA device is visible; neither creates a
/// group. automatic and mpi route CUDA tensors to NCCL too, where a GPU is visible and NCCL is there.
std::shared_ptr<ProcessGroup> init_process_group(Backend backend = Backend::automatic);
/// Whether init_process_group() has created the group.
bool is_initialized();
/// Whether precis was built with the MPI backend.
bool mpi_available();
/// Whether the CUDA backend (core/cuda_backend.h; loaded by this call) has NCCL for CUDA tensors.
bool nccl_available();

/// Ends the whole job now: with MPI, MPI_Abort on every rank (so no rank hangs waiting in a
/// collective for one that failed); otherwise std::_Exit. Prints `message` on stderr first.
[[noreturn]] void abort_job(const std::string& message, int code = 1);
/// std::set_terminate handler that prints the uncaught exception and calls abort_job: an exception
/// that escapes main() on one rank ends every rank within the launcher's kill time instead of
/// leaving the others blocked. init_process_group installs it when it starts MPI.
void abort_on_uncaught();

}  // namespace precis::dist
