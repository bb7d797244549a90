// The MPI backend: nonblocking collectives (MPI_Iallreduce, MPI_Ireduce_scatter_block, MPI_Ibcast,
// MPI_Iallgather, MPI_Ibarrier) on a duplicate of MPI_COMM_WORLD whose errors return codes (MPI_ERRORS_RETURN),
// turned into DistributedError. f16/bf16 are reduced through an f32 staging copy (Open MPI has no
// half types); avg is a sum divided by the world size when the work completes.
#include <mpi.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <string>

#include "core/grad_mode.h"
#include "dist/collective_checks.h"
#include "dist/mpi/mpi_backend.h"
#include "tensor/factory.h"

namespace precis::dist::detail {

namespace {

std::string mpi_error_text(int rc) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, buf, &len) != MPI_SUCCESS) return "MPI error code " + std::to_string(rc);
  return std::string(buf, static_cast<size_t>(len));
}

void check_mpi(int rc, const std::string& what) {
  if (rc != MPI_SUCCESS)
    throw DistributedError("dist (mpi): " + what + " failed: " + mpi_error_text(rc) +
                           ". A rank may have left the job; see the other ranks' output");
}

int checked_count(const char* collective, const Tensor& t, size_t unit_bytes) {
  const size_t bytes = static_cast<size_t>(t.numel()) * t.element_size();
  const size_t count = bytes / unit_bytes;
  PRECIS_CHECK(count <= static_cast<size_t>(INT_MAX), "dist::", collective, ": ", t.describe(), " has ", count,
               " elements, more than one MPI call takes (", INT_MAX, "); split it");
  return static_cast<int>(count);
}

MPI_Datatype mpi_type(DType d) {
  switch (d) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i64: return MPI_INT64_T;
    case DType::i32: return MPI_INT32_T;
    case DType::boolean: return MPI_UINT8_T;
    default: return MPI_DATATYPE_NULL;
  }
}

class MpiWork : public Work {
 public:
  MpiWork(std::string what, std::function<void()> finish) : what_(std::move(what)), finish_(std::move(finish)) {}
  // A Work dropped before wait() (`pg->all_reduce(t, op);` as a statement, PyTorch's synchronous
  // habit) finishes here: the tensor gets its result, and MPI never writes into a staging buffer
  // freed with this object. While an exception unwinds, the other ranks may never join: the
  // request and its buffers are left alive (leaked) instead of waited.
  ~MpiWork() override {
    if (completed_ || req_ == MPI_REQUEST_NULL) return;
    if (std::uncaught_exceptions() > 0) {
      (void)new std::function<void()>(std::move(finish_));  // keeps the buffers MPI may still write
      return;
    }
    try {
      wait();
    } catch (...) {  // a destructor must not throw; the next collective reports the failure
    }
  }
  MPI_Request* request() { return &req_; }
  void wait() override {
    if (completed_) return;
    check_mpi(MPI_Wait(&req_, MPI_STATUS_IGNORE), what_);
    complete();
  }
  bool done() override {
    if (completed_) return true;
    int flag = 0;
    check_mpi(MPI_Test(&req_, &flag, MPI_STATUS_IGNORE), what_);
    if (flag) complete();
    return completed_;
  }

 private:
  void complete() {
    completed_ = true;
    if (finish_) finish_();
  }
  MPI_Request req_ = MPI_REQUEST_NULL;
  std::string what_;
  std::function<void()> finish_;
  bool completed_ = false;
};

template <typename T>
void divide_in_place(const Tensor& t, int n) {
  T* p = t.data_ptr<T>();
  const int64_t count = t.numel();
  for (int64_t i = 0; i < count; ++i) p[i] /= static_cast<T>(n);
}

class MpiProcessGroup : public ProcessGroup {
 public:
  explicit MpiProcessGroup(MPI_Comm comm) : comm_(comm) {
    check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    check_mpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
    MPI_Comm local;
    check_mpi(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local),
              "MPI_Comm_split_type(shared)");
    check_mpi(MPI_Comm_rank(local, &local_rank_), "MPI_Comm_rank(local)");
    MPI_Comm_free(&local);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  std::string backend() const override { return "mpi"; }

  std::shared_ptr<Work> all_reduce(const Tensor& t, ReduceOp op) override {
    check_collective_tensor("all_reduce", t);
    check_reduce_dtype(t, op);
    const std::string what = std::string("all_reduce(") + reduce_op_name(op) + ") of " + t.describe();
    const Tensor buf = reduce_buffer(t);  // f16/bf16 travel as f32, rounded back once when done
    const int n = size_;
    auto finish = [t, buf, op, n] {
      if (op == ReduceOp::avg) {
        if (buf.dtype() == DType::f64) divide_in_place<double>(buf, n);
        else divide_in_place<float>(buf, n);
      }
      finish_reduce_buffer(t, buf);
    };
    auto work = std::make_shared<MpiWork>(what, finish);
    const MPI_Op mop = op == ReduceOp::max ? MPI_MAX : MPI_SUM;
    check_mpi(MPI_Iallreduce(MPI_IN_PLACE, buf.data_ptr(), checked_count("all_reduce", buf, buf.element_size()),
                             mpi_type(buf.dtype()), mop, comm_, work->request()),
              what);
    t.bump_version();
    return work;
  }

  std::shared_ptr<Work> reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) override {
    check_reduce_scatter_shapes(in, out, size_, op);
    const std::string what = std::string("reduce_scatter(") + reduce_op_name(op) + ") of " + in.describe();
    const Tensor send = reduce_buffer(in);  // f16/bf16 travel as f32, as in all_reduce
    const Tensor recv = reduce_buffer(out);
    const int n = size_;
    auto finish = [out, recv, send, op, n] {  // send is kept alive until the collective is done
      if (op == ReduceOp::avg) {
        if (recv.dtype() == DType::f64) divide_in_place<double>(recv, n);
        else divide_in_place<float>(recv, n);
      }
      finish_reduce_buffer(out, recv);
    };
    auto work = std::make_shared<MpiWork>(what, finish);
    const MPI_Op mop = op == ReduceOp::max ? MPI_MAX : MPI_SUM;
    check_mpi(MPI_Ireduce_scatter_block(send.data_ptr(), recv.data_ptr(),
                                        checked_count("reduce_scatter", recv, recv.element_size()),
                                        mpi_type(recv.dtype()), mop, comm_, work->request()),
              what);
    out.bump_version();
    return work;
  }

  std::shared_ptr<Work> broadcast(const Tensor& t, int root) override {
    check_collective_tensor("broadcast", t);
    PRECIS_CHECK_INDEX(root >= 0 && root < size_, "dist::broadcast: root ", root, " is not a rank of a world of size ",
                       size_);
    const std::string what = "broadcast from rank " + std::to_string(root) + " of " + t.describe();
    auto work = std::make_shared<MpiWork>(what, nullptr);
    check_mpi(MPI_Ibcast(t.data_ptr(), checked_count("broadcast", t, 1), MPI_BYTE, root, comm_, work->request()), what);
    t.bump_version();
    return work;
  }

  std::shared_ptr<Work> all_gather(const Tensor& in, const Tensor& out) override {
    check_all_gather_shapes(in, out, size_);
    const std::string what = "all_gather of " + in.describe();
    auto work = std::make_shared<MpiWork>(what, nullptr);
    const int count = checked_count("all_gather", in, 1);
    check_mpi(MPI_Iallgather(in.data_ptr(), count, MPI_BYTE, out.data_ptr(), count, MPI_BYTE, comm_, work->request()),
              what);
    out.bump_version();
    return work;
  }

  std::shared_ptr<Work> barrier() override {
    auto work = std::make_shared<MpiWork>("barrier", nullptr);
    check_mpi(MPI_Ibarrier(comm_, work->request()), "barrier");
    return work;
  }

 private:
  MPI_Comm comm_;  // never freed: the group lives until exit, and MPI_Finalize releases it
  int rank_ = 0, size_ = 1, local_rank_ = 0;
};

// At exit (glibc's on_exit, which sees the status): MPI_Finalize, or, for a rank leaving a job of
// several with a failure status (an error caught in main and `return 1`, exit(1)), MPI_Abort: the
// other ranks would otherwise wait in their next collective, or in MPI_Finalize, for ever.
void finalize_on_exit(int status, void*) {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  int size = 1, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (status != 0 && size > 1) {
    std::fprintf(stderr, "precis: rank %d of %d exits with status %d; ending the job (MPI_Abort) so that the other "
                 "ranks do not wait for it\n", rank, size, status);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, status);
  }
  MPI_Finalize();
}

}  // namespace

bool mpi_running() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

void mpi_abort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

std::shared_ptr<ProcessGroup> make_mpi_process_group() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    on_exit(finalize_on_exit, nullptr);
  }
  MPI_Comm comm;
  check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "MPI_Comm_dup");
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  return std::make_shared<MpiProcessGroup>(comm);
}

}  // namespace precis::dist::detail
