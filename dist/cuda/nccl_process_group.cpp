// The NCCL backend: CUDA tensors are reduced (ncclAllReduce, ncclReduceScatter), broadcast and
// gathered by NCCL on each device's communication stream
// (cuda::comm_stream, core/cuda/cuda_context.h); CPU tensors and barriers go to the wrapped group
// (MPI or the world of one).
//
// Streams (core/side_stream.h, checked on a simulated device by tests/core/side_stream_test.cpp):
// a collective records an event on the calling thread's current stream (the compute stream: the
// producers of its tensors), the communication stream waits for it, each buffer NCCL touches is
// recorded with the caching allocator on the communication stream (record_stream: a block freed
// while the collective is queued is not handed to new work before NCCL is done with it), NCCL
// runs there, and an event `done` is recorded after it. Work::wait() makes the waiting thread's
// current stream wait for `done` and then queues the finishing kernels (avg's division, the
// rounding of a staged f16/bf16 buffer) there; it does not block the host (as with CUDA kernels,
// the host only waits where it reads device memory). Meanwhile the compute stream runs on: DDP's
// backward keeps computing gradients while earlier buckets are reduced. A Work dropped unwaited
// still makes the current stream wait for `done` in its destructor, so its results are never
// read half-written.
//
// Semantics match the MPI backend bit for bit where the arithmetic allows: f16/bf16 are reduced
// through an f32 copy and rounded back once; avg is the sum divided by the world size afterwards.
#ifdef PRECIS_HAS_NCCL
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <climits>
#include <cstring>
#include <functional>
#include <map>
#include <string>

#include "core/cuda/cuda_allocator.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "core/grad_mode.h"
#include "dist/collective_checks.h"
#include "dist/cuda/nccl_backend.h"
#include "ops/functional.h"
#include "tensor/factory.h"

namespace precis::dist::detail {

namespace {

// What to try when a collective fails, and when making a communicator does (there no other rank
// is involved in a world of one: the library, the driver or the bootstrap socket is at fault).
constexpr const char* kCollectiveHint =
    "A rank may have left the job, or two ranks share one GPU; see the other ranks' output";
constexpr const char* kInitHint =
    "Run with NCCL_DEBUG=INFO to see why. Common causes: a libnccl built for a newer CUDA than the driver "
    "supports (compare nvidia-smi's CUDA version), no network interface for NCCL's bootstrap socket (set "
    "NCCL_SOCKET_IFNAME=lo on one machine), or two ranks on one GPU (set_device(local_rank) first)";

void check_nccl(ncclResult_t rc, ncclComm_t comm, const std::string& what, const char* hint = kCollectiveHint) {
  if (rc == ncclSuccess || rc == ncclInProgress) return;
  std::string text = ncclGetErrorString(rc);
  const char* last = ncclGetLastError(comm);  // a null comm gives the calling thread's last error
  if (last != nullptr && *last != '\0') text += " (" + std::string(last) + ")";
  throw DistributedError("dist (nccl): " + what + " failed: " + text + ". " + hint);
}

ncclDataType_t nccl_type(DType d) {
  switch (d) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::i64: return ncclInt64;
    case DType::i32: return ncclInt32;
    case DType::boolean: return ncclUint8;
    default: return ncclUint8;  // f16/bf16 are staged through f32 before reaching here
  }
}

void check_cuda_tensor(const char* collective, const Tensor& t, int device) {
  PRECIS_CHECK(t.defined(), "dist::", collective, ": the tensor is undefined");
  PRECIS_CHECK_DEVICE(t.device().is_cuda() && t.device().index == device, "dist::", collective, ": ", t.describe(),
                      " is not on cuda:", device, "; the tensors of one NCCL collective share a device");
  PRECIS_CHECK(t.is_contiguous(), "dist::", collective, ": ", t.describe(),
               " is not contiguous; collectives work on dense row-major storage: pass t.contiguous() and copy back");
}

// One device's communicator, alive until exit (NCCL's teardown at exit can race with the CUDA
// runtime's own, so it is deliberately not destroyed). Collectives run on cuda::comm_stream.
struct DeviceComm {
  ncclComm_t comm = nullptr;
};

class NcclWork : public Work {
 public:
  /// Takes ownership of `done`, the event recorded on the communication stream after the collective.
  NcclWork(std::string what, int device, ncclComm_t comm, std::vector<Tensor> keep, std::function<void()> finish,
           cudaEvent_t done)
      : what_(std::move(what)), device_(device), comm_(comm), keep_(std::move(keep)), finish_(std::move(finish)),
        done_(done) {}
  ~NcclWork() override {
    if (!waited_) {  // later kernels must still not read a half-reduced result (see the file comment)
      cuda::DeviceGuard guard(device_);
      (void)cudaStreamWaitEvent(cuda::device_stream(device_), done_, 0);
    }
    (void)cudaEventDestroy(done_);
  }
  void wait() override {
    if (waited_) return;
    check_async();
    cuda::DeviceGuard guard(device_);
    PRECIS_CUDA_CHECK(cudaStreamWaitEvent(cuda::device_stream(device_), done_, 0), "dist (nccl): ", what_);
    waited_ = true;
    if (finish_) finish_();  // enqueued on the compute stream, after the collective
    keep_.clear();
  }
  bool done() override {
    if (waited_) return true;
    check_async();
    const cudaError_t q = cudaEventQuery(done_);
    if (q == cudaErrorNotReady) {
      // Not an error, but the runtime keeps it as the thread's last one: cleared, or the next
      // kernel's launch check (DDP's backward, right after polling its buckets) reports it.
      (void)cudaGetLastError();
      return false;
    }
    PRECIS_CUDA_CHECK(q, "dist (nccl): ", what_);
    return true;
  }

 private:
  void check_async() {
    ncclResult_t async = ncclSuccess;
    check_nccl(ncclCommGetAsyncError(comm_, &async), comm_, what_);
    check_nccl(async, comm_, what_);
  }
  std::string what_;
  int device_;
  ncclComm_t comm_;
  std::vector<Tensor> keep_;
  std::function<void()> finish_;
  cudaEvent_t done_ = nullptr;
  bool waited_ = false;
};

class NcclRoutingGroup : public ProcessGroup {
 public:
  explicit NcclRoutingGroup(std::shared_ptr<ProcessGroup> cpu) : cpu_(std::move(cpu)) {}
  int rank() const override { return cpu_->rank(); }
  int size() const override { return cpu_->size(); }
  int local_rank() const override { return cpu_->local_rank(); }
  std::string backend() const override { return cpu_->backend() + "+nccl"; }

  std::shared_ptr<Work> all_reduce(const Tensor& t, ReduceOp op) override {
    if (!t.defined() || !t.device().is_cuda()) return cpu_->all_reduce(t, op);
    const int dev = t.device().index;
    check_cuda_tensor("all_reduce", t, dev);
    check_reduce_dtype(t, op);
    const std::string what = std::string("all_reduce(") + reduce_op_name(op) + ") of " + t.describe();
    const Tensor buf = reduce_buffer(t);  // f16/bf16 travel as f32, rounded back once when done
    const int n = size();
    auto finish = [t, buf, op, n] {
      if (op == ReduceOp::avg && n > 1) {
        NoGradGuard no_grad;
        Tensor b = buf.detach();
        b.copy_(div(b, static_cast<double>(n)));
      }
      finish_reduce_buffer(t, buf);
    };
    const ncclRedOp_t nop = op == ReduceOp::max ? ncclMax : ncclSum;
    auto work = launch(dev, what, {t, buf}, {buf}, finish, [&](ncclComm_t comm, cudaStream_t s) {
      return ncclAllReduce(buf.data_ptr(), buf.data_ptr(), static_cast<size_t>(buf.numel()), nccl_type(buf.dtype()),
                           nop, comm, s);
    });
    t.bump_version();
    return work;
  }

  std::shared_ptr<Work> reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) override {
    if (!in.defined() || !in.device().is_cuda()) {
      PRECIS_CHECK_DEVICE(!out.defined() || !out.device().is_cuda(), "dist::reduce_scatter: in is ", in.describe(),
                          " but out is ", out.describe(), "; both must be on one device");
      return cpu_->reduce_scatter(in, out, op);
    }
    const int dev = in.device().index;
    check_cuda_tensor("reduce_scatter", in, dev);
    check_cuda_tensor("reduce_scatter", out, dev);
    check_reduce_dtype(in, op);
    PRECIS_CHECK_SHAPE(in.numel() == static_cast<int64_t>(size()) * out.numel() && in.dtype() == out.dtype(),
                       "dist::reduce_scatter: in is ", in.describe(), " and out ", out.describe(),
                       "; in must hold world size (", size(), ") times out's elements, in out's dtype");
    const std::string what = std::string("reduce_scatter(") + reduce_op_name(op) + ") of " + in.describe();
    const Tensor send = reduce_buffer(in);  // f16/bf16 travel as f32, rounded back once when done
    const Tensor recv = reduce_buffer(out);
    const int n = size();
    auto finish = [out, recv, op, n] {
      if (op == ReduceOp::avg && n > 1) {
        NoGradGuard no_grad;
        Tensor b = recv.detach();
        b.copy_(div(b, static_cast<double>(n)));
      }
      finish_reduce_buffer(out, recv);
    };
    const ncclRedOp_t nop = op == ReduceOp::max ? ncclMax : ncclSum;
    auto work = launch(dev, what, {in, out, send, recv}, {send, recv}, finish, [&](ncclComm_t comm, cudaStream_t s) {
      return ncclReduceScatter(send.data_ptr(), recv.data_ptr(), static_cast<size_t>(recv.numel()),
                               nccl_type(recv.dtype()), nop, comm, s);
    });
    out.bump_version();
    return work;
  }
  std::shared_ptr<Work> broadcast(const Tensor& t, int root) override {
    if (!t.defined() || !t.device().is_cuda()) return cpu_->broadcast(t, root);
    const int dev = t.device().index;
    check_cuda_tensor("broadcast", t, dev);
    PRECIS_CHECK_INDEX(root >= 0 && root < size(), "dist::broadcast: root ", root, " is not a rank of a world of size ",
                       size());
    const std::string what = "broadcast from rank " + std::to_string(root) + " of " + t.describe();
    const size_t bytes = static_cast<size_t>(t.numel()) * t.element_size();
    auto work = launch(dev, what, {t}, {t}, nullptr, [&](ncclComm_t comm, cudaStream_t s) {
      return ncclBroadcast(t.data_ptr(), t.data_ptr(), bytes, ncclUint8, root, comm, s);
    });
    t.bump_version();
    return work;
  }

  std::shared_ptr<Work> all_gather(const Tensor& in, const Tensor& out) override {
    if (!in.defined() || !in.device().is_cuda()) {
      PRECIS_CHECK_DEVICE(!out.defined() || !out.device().is_cuda(), "dist::all_gather: in is ", in.describe(),
                          " but out is ", out.describe(), "; both must be on one device");
      return cpu_->all_gather(in, out);
    }
    const int dev = in.device().index;
    check_cuda_tensor("all_gather", in, dev);
    check_cuda_tensor("all_gather", out, dev);
    Shape want{size()};
    for (int64_t s : in.sizes()) want.push_back(s);
    PRECIS_CHECK_SHAPE(out.sizes() == want && out.dtype() == in.dtype(), "dist::all_gather: out is ", out.describe(),
                       " but must be [world size = ", size(), ", *in.shape] with in's dtype for in ", in.describe());
    const std::string what = "all_gather of " + in.describe();
    const size_t bytes = static_cast<size_t>(in.numel()) * in.element_size();
    auto work = launch(dev, what, {in, out}, {in, out}, nullptr, [&](ncclComm_t comm, cudaStream_t s) {
      return ncclAllGather(in.data_ptr(), out.data_ptr(), bytes, ncclUint8, comm, s);
    });
    out.bump_version();
    return work;
  }

  std::shared_ptr<Work> barrier() override { return cpu_->barrier(); }

 private:
  DeviceComm& comm_for(int dev) {
    auto it = comms_.find(dev);
    if (it != comms_.end()) return it->second;
    cuda::check_device_index(dev, "dist (nccl)");
    ncclUniqueId id;
    std::memset(&id, 0, sizeof id);
    if (rank() == 0) check_nccl(ncclGetUniqueId(&id), nullptr, "ncclGetUniqueId", kInitHint);
    // A world of one is its own rank 0: the id never leaves this process, so no MPI is needed.
    if (size() > 1) broadcast_unique_id(id);
    DeviceComm dc;
    cuda::DeviceGuard guard(dev);
    check_nccl(ncclCommInitRank(&dc.comm, size(), id, rank()), nullptr,
               "ncclCommInitRank on cuda:" + std::to_string(dev) + " (rank " + std::to_string(rank()) + " of " +
                   std::to_string(size()) + ")",
               kInitHint);
    return comms_.emplace(dev, dc).first->second;
  }

  // Rank 0's unique id to every rank, as 16 i64 words over the CPU group (MPI).
  void broadcast_unique_id(ncclUniqueId& id) {
    static_assert(sizeof(ncclUniqueId) % sizeof(int64_t) == 0, "ncclUniqueId is a whole number of words");
    Tensor words = zeros({static_cast<int64_t>(sizeof id / sizeof(int64_t))}, {.dtype = DType::i64});
    std::memcpy(words.data_ptr(), &id, sizeof id);
    cpu_->broadcast(words, 0)->wait();
    std::memcpy(&id, words.data_ptr(), sizeof id);
  }

  /// Queues `call(comm, stream)` on the device's communication stream behind the current
  /// stream's work, with `buffers` (what NCCL reads or writes) recorded on that stream
  /// (core/side_stream.h); the Work keeps `keep` alive and runs `finish` when waited.
  template <typename Call>
  std::shared_ptr<Work> launch(int dev, const std::string& what, std::vector<Tensor> keep,
                               const std::vector<Tensor>& buffers, std::function<void()> finish, Call&& call) {
    DeviceComm& dc = comm_for(dev);
    cuda::DeviceGuard guard(dev);
    std::vector<SideBuffer> side;
    for (const Tensor& b : buffers)  // memory from elsewhere (from_blob) is the caller's to keep
      if (b.numel() > 0 && b.storage()->allocator() == &cuda::caching_allocator(dev))
        side.push_back({b.data_ptr(), dev});
    const EventHandle done = enqueue_on_side_stream(
        cuda::stream_ordering(dev), cuda::current_stream(dev), cuda::comm_stream(dev), side,
        [&](StreamHandle s) { check_nccl(call(dc.comm, static_cast<cudaStream_t>(s)), dc.comm, what); });
    return std::make_shared<NcclWork>(what, dev, dc.comm, std::move(keep), std::move(finish),
                                      static_cast<cudaEvent_t>(done));
  }

  std::shared_ptr<ProcessGroup> cpu_;
  std::map<int, DeviceComm> comms_;
};

}  // namespace

std::shared_ptr<ProcessGroup> make_nccl_routing_group(std::shared_ptr<ProcessGroup> cpu) {
  return std::make_shared<NcclRoutingGroup>(std::move(cpu));
}

}  // namespace precis::dist::detail

extern "C" void precis_nccl_routing_group(std::shared_ptr<precis::dist::ProcessGroup>* group) {
  *group = precis::dist::detail::make_nccl_routing_group(std::move(*group));
}
#endif  // PRECIS_HAS_NCCL
