// init_process_group, the world-of-one backend, the argument checks and the job-ending helpers.
#include "dist/process_group.h"

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>

#include "core/cuda_backend.h"
#include "core/device.h"
#include "core/grad_mode.h"
#include "dist/collective_checks.h"
#include "dist/mpi/mpi_backend.h"

namespace precis::dist {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
    case ReduceOp::max: return "max";
  }
  return "?";
}

namespace detail {

void check_collective_tensor(const char* collective, const Tensor& t) {
  PRECIS_CHECK(t.defined(), "dist::", collective, ": the tensor is undefined");
  PRECIS_CHECK_DEVICE(t.device().is_cpu(), "dist::", collective, ": ", t.describe(),
                      " is not on the CPU; CUDA tensors go to the NCCL backend (built with PRECIS_CUDA when NCCL is "
                      "found; nccl_available() says whether this build has it), else move it with .to(Device::cpu())");
  PRECIS_CHECK(t.is_contiguous(), "dist::", collective, ": ", t.describe(),
               " is not contiguous; collectives work on dense row-major storage: pass t.contiguous() and copy back");
}

void check_reduce_dtype(const Tensor& t, ReduceOp op) {
  PRECIS_CHECK_DTYPE(!(op == ReduceOp::avg && !t.is_floating_point()), "dist::all_reduce(avg): ", t.describe(),
                     " is not floating; an integer mean would be truncated: use sum and divide, or convert to f32");
  PRECIS_CHECK_DTYPE(!(t.dtype() == DType::boolean && op != ReduceOp::max), "dist::all_reduce(",
                     reduce_op_name(op), "): ", t.describe(), " is boolean; only max (logical or) is defined");
}

void check_all_gather_shapes(const Tensor& in, const Tensor& out, int world) {
  check_collective_tensor("all_gather", in);
  check_collective_tensor("all_gather", out);
  Shape want{world};
  for (int64_t s : in.sizes()) want.push_back(s);
  PRECIS_CHECK_SHAPE(out.sizes() == want && out.dtype() == in.dtype(), "dist::all_gather: out is ", out.describe(),
                     " but must be [world size = ", world, ", *in.shape] with in's dtype for in ", in.describe());
}

void check_reduce_scatter_shapes(const Tensor& in, const Tensor& out, int world, ReduceOp op) {
  check_collective_tensor("reduce_scatter", in);
  check_collective_tensor("reduce_scatter", out);
  check_reduce_dtype(in, op);
  PRECIS_CHECK_SHAPE(in.numel() == static_cast<int64_t>(world) * out.numel() && in.dtype() == out.dtype(),
                     "dist::reduce_scatter: in is ", in.describe(), " and out ", out.describe(),
                     "; in must hold world size (", world, ") times out's elements, in out's dtype: pad the input "
                     "to a multiple of the world size");
}

Tensor reduce_buffer(const Tensor& t) {
  if (t.dtype() != DType::f16 && t.dtype() != DType::bf16) return t;
  NoGradGuard no_grad;
  return t.detach().to(DType::f32).contiguous();
}

void finish_reduce_buffer(const Tensor& t, const Tensor& buf) {
  if (buf.is_same(t)) return;
  NoGradGuard no_grad;
  Tensor(t).detach().copy_(buf);
  t.bump_version();
}

}  // namespace detail

namespace {

class DoneWork : public Work {
 public:
  void wait() override {}
  bool done() override { return true; }
};

}  // namespace

std::shared_ptr<Work> ProcessGroup::reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) {
  PRECIS_CHECK(in.defined() && out.defined(), "dist::reduce_scatter: a tensor is undefined");
  PRECIS_CHECK_SHAPE(in.numel() == static_cast<int64_t>(size()) * out.numel() && in.dtype() == out.dtype() &&
                         in.device() == out.device(),
                     "dist::reduce_scatter: in is ", in.describe(), " and out ", out.describe(),
                     "; in must hold world size (", size(), ") times out's elements, in out's dtype and device");
  NoGradGuard no_grad;
  Tensor all = in.detach().contiguous().clone();
  all_reduce(all, op)->wait();
  Tensor(out).detach().copy_(all.reshape({in.numel()}).narrow(0, rank() * out.numel(), out.numel()).reshape(out.sizes()));
  out.bump_version();
  return std::make_shared<DoneWork>();
}

namespace {

// A world of one: every collective is the identity, completed on return.
class LocalProcessGroup : public ProcessGroup {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_rank() const override { return 0; }
  std::string backend() const override { return "local"; }
  std::shared_ptr<Work> all_reduce(const Tensor& t, ReduceOp op) override {
    detail::check_collective_tensor("all_reduce", t);
    detail::check_reduce_dtype(t, op);
    return std::make_shared<DoneWork>();
  }
  std::shared_ptr<Work> reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) override {
    detail::check_reduce_scatter_shapes(in, out, 1, op);
    NoGradGuard no_grad;
    Tensor(out).detach().copy_(in.reshape(out.sizes()));
    out.bump_version();
    return std::make_shared<DoneWork>();
  }
  std::shared_ptr<Work> broadcast(const Tensor& t, int root) override {
    detail::check_collective_tensor("broadcast", t);
    PRECIS_CHECK_INDEX(root == 0, "dist::broadcast: root ", root, " is not a rank of a world of size 1");
    return std::make_shared<DoneWork>();
  }
  std::shared_ptr<Work> all_gather(const Tensor& in, const Tensor& out) override {
    detail::check_all_gather_shapes(in, out, 1);
    NoGradGuard no_grad;
    out.select(0, 0).copy_(in);
    return std::make_shared<DoneWork>();
  }
  std::shared_ptr<Work> barrier() override { return std::make_shared<DoneWork>(); }
};

// Backend::nccl's preconditions, checked before any group exists so that a failure leaves none.
void require_nccl() {
  if (!nccl_available())
    throw DistributedError(
        "dist::init_process_group(Backend::nccl): precis has no NCCL here, so CUDA tensors have no transport: " +
        (cuda_backend_available() ? std::string("its CUDA backend was built without NCCL")
                                  : cuda_backend_unavailable_reason()) +
        "; NCCL comes with the CUDA backend: install NCCL next to the CUDA toolkit (libnccl-dev, or the toolkit's "
        "own) and build precis with PRECIS_CUDA=ON PRECIS_NCCL=ON. Backend::automatic reduces CPU tensors without it");
  PRECIS_CHECK_DEVICE(cuda_is_available(), "dist::init_process_group(Backend::nccl): no CUDA device is visible (",
                      cuda_device_count(), " devices), and NCCL reduces only CUDA tensors: run on a machine with a "
                      "GPU (check nvidia-smi and CUDA_VISIBLE_DEVICES), or use Backend::automatic for CPU tensors");
}

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(v) != nullptr) return true;
  return false;
}

std::mutex g_mutex;
std::shared_ptr<ProcessGroup> g_group;
Backend g_backend = Backend::automatic;

}  // namespace

namespace {
// The CUDA backend's NCCL entry (dist/cuda/nccl_backend.h): replaces *group by a group with its
// ranks that sends CUDA tensors to NCCL. nullptr when the backend cannot be loaded or has no NCCL.
using NcclWrapFn = void(std::shared_ptr<ProcessGroup>* group);
NcclWrapFn* nccl_wrap() {
  return reinterpret_cast<NcclWrapFn*>(precis::detail::cuda_backend_symbol("precis_nccl_routing_group"));
}
}  // namespace

bool nccl_available() { return nccl_wrap() != nullptr; }

bool mpi_available() {
#ifdef PRECIS_HAS_MPI
  return true;
#else
  return false;
#endif
}

std::shared_ptr<ProcessGroup> init_process_group(Backend backend) {
  std::lock_guard lock(g_mutex);
  if (backend == Backend::nccl) {
    require_nccl();
    backend = Backend::automatic;  // NCCL wraps whichever CPU group automatic picks (below)
  }
  if (backend == Backend::automatic) backend = launched_by_mpi() ? Backend::mpi : Backend::local;
  if (g_group) {
    PRECIS_CHECK_T(StateError, backend == g_backend, "dist::init_process_group: the group already exists with the ",
                   g_group->backend(), " backend; a process has one group");
    return g_group;
  }
  if (backend == Backend::mpi) {
#ifdef PRECIS_HAS_MPI
    g_group = detail::make_mpi_process_group();
    std::set_terminate(abort_on_uncaught);
#else
    throw DistributedError(
        "dist::init_process_group: the MPI backend was asked for (or the process was started by mpirun/srun) but "
        "precis was built without MPI: install Open MPI (scripts/install-deps.sh) and rebuild with PRECIS_MPI=AUTO");
#endif
  } else {
    g_group = std::make_shared<LocalProcessGroup>();
  }
  // CUDA tensors to NCCL, the rest to the group above. Only where a GPU is visible: a CPU job does
  // not hold NCCL's state, and a CUDA tensor cannot exist without a device anyway.
  if (NcclWrapFn* wrap = nccl_wrap(); wrap != nullptr && cuda_is_available()) wrap(&g_group);
  g_backend = backend;
  return g_group;
}

bool is_initialized() {
  std::lock_guard lock(g_mutex);
  return g_group != nullptr;
}

void abort_job(const std::string& message, int code) {
  std::fprintf(stderr, "%s\n", message.c_str());
  std::fflush(stderr);
#ifdef PRECIS_HAS_MPI
  if (detail::mpi_running()) detail::mpi_abort(code);
#endif
  std::_Exit(code);
}

void abort_on_uncaught() {
  std::string what = "an uncaught exception of unknown type";
  if (auto e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      what = ex.what();
    } catch (...) {
    }
  } else {
    what = "std::terminate without an exception";
  }
  abort_job("precis: terminate on this rank (" + what + "); ending the whole job so that no rank waits for it", 134);
}

}  // namespace precis::dist
