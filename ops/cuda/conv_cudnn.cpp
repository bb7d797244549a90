// conv2d and its backward on CUDA devices through cuDNN: every cuDNN call of the conv family is
// in this file, as every oneDNN call of the CPU one is in ops/cpu/conv_onednn.cpp. The host-side
// planning (layout detection, output size, descriptor dims, cache key) is plain C++ in
// ops/math/conv_plan.cpp, which the CPU tests check.
//
// cuDNN's convolution API (cudnnConvolution{Forward,BackwardData,BackwardFilter}; marked
// deprecated in cuDNN 9 in favour of the graph API, still shipped and supported there, and far
// smaller to drive; a move to the graph API would stay inside this file): one call per pass, the
// algorithm picked by cuDNN's heuristics (the *_v7 queries) once per problem and cached, with the
// operands' alignment, the device, the determinism switch and the f32 precision in the key; with
// PRECIS_CUDNN_BENCHMARK=1 the heuristic's candidates are timed once per problem
// (cudnnFind*AlgorithmEx) and the fastest that passes the same filters runs. Handles are one per
// (host thread, device) (core/cuda/handle_pool.h), bound to the thread's current stream.
// Compute type fp32 for f32, f16 and bf16 (fp32 accumulation; f16/bf16 operands use Tensor Cores),
// f64 for f64. f32 follows the conv family's precision setting (ops/float32_precision.h; TF32 by
// default, as PyTorch's cudnn.allow_tf32): with TF32 allowed, algorithms of every math type but
// CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION (which may round f32 operands to f16) run with their own
// math type, so cuDNN may use TF32 Tensor Cores; under "ieee" only CUDNN_FMA_MATH runs, and f32
// results keep fp32 precision as the CPU's do. The setting is part of the plan key. NCHW
// (contiguous) and NHWC (channels-last) operands are described by their strides; NHWC is the
// layout Tensor Core kernels want, so conv2d passes channels-last tensors on CUDA through
// unchanged (ops/conv.cpp).
//
// Workspace comes from the caching allocator as a scratch tensor, freed once the call is queued
// (the device's stream orders its reuse, see docs/design/cuda-backend.md). Results are
// deterministic by default (kernels::conv_deterministic()): only algorithms cuDNN reports as
// deterministic are chosen. The bias is added by precis' add kernel after the convolution (fp32
// math, so f16/bf16 outputs are rounded twice, within their tolerance), and its gradient is
// precis' deterministic sum over (N, H, W).
#ifdef PRECIS_HAS_CUDNN  // cmake/precis_cudnn.cmake; without cuDNN the CUDA backend has no convolutions

#include <cudnn.h>

#include <algorithm>
#include <cstdlib>
#include <initializer_list>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "core/cuda/handle_pool.h"
#include "ops/math/conv_plan.h"
#include "ops/cuda/cuda_backend.h"
#include "ops/float32_precision.h"
#include "ops/contracts/kernels.h"
#include "ops/contracts/kernels_conv.h"
#include "ops/op_table.h"
#include "tensor/factory.h"

namespace precis::cuda {

namespace {

using kernels::Conv2dParams;
using kernels::ConvDescriptorDims;
using kernels::ConvLayout;
using kernels::ConvPass;
using kernels::ConvProblem;

[[noreturn]] void throw_cudnn_error(cudnnStatus_t status, const char* call, const char* file, int line,
                                    const std::string& context) {
  char detail[512] = {};
  cudnnGetLastErrorString(detail, sizeof detail);  // cuDNN 9's explanation of the last failure, if any
  throw DeviceError(precis::detail::str_cat("cuDNN error ", cudnnGetErrorString(status), " (status ",
                                            static_cast<int>(status), ")", detail[0] ? ": " : "", detail,
                                            context.empty() ? "" : " in ", context, " [", call, " at ", file, ":",
                                            line, "]"));
}

#define PRECIS_CUDNN_CHECK(call, ...)                                                                        \
  do {                                                                                                       \
    const cudnnStatus_t precis_status_ = (call);                                                             \
    if (precis_status_ != CUDNN_STATUS_SUCCESS) [[unlikely]]                                                 \
      throw_cudnn_error(precis_status_, #call, __FILE__, __LINE__,                                           \
                        ::precis::detail::str_cat("" __VA_OPT__(, ) __VA_ARGS__));                           \
  } while (0)

/// The calling thread's cuDNN handle of the device (core/cuda/handle_pool.h: one per thread and
/// device, so two host threads never rebind each other's), bound to the thread's current stream
/// of the device at every use.
cudnnHandle_t cudnn_handle(int index) {
  static HandlePool<cudnnHandle_t>* const pool = new HandlePool<cudnnHandle_t>([](int device) {  // never freed
    DeviceGuard guard(device);
    cudnnHandle_t h = nullptr;
    PRECIS_CUDNN_CHECK(cudnnCreate(&h), "creating a cuDNN handle of cuda:", device);
    return h;
  });
  check_device_index(index, "cudnn_handle");
  cudnnHandle_t h = pool->get(index);
  PRECIS_CUDNN_CHECK(cudnnSetStream(h, device_stream(index)), "binding cuDNN to the stream of cuda:", index);
  return h;
}

// Owners of cuDNN descriptors.
struct TensorDesc {
  cudnnTensorDescriptor_t d = nullptr;
  TensorDesc() { PRECIS_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d), "creating a tensor descriptor"); }
  ~TensorDesc() { cudnnDestroyTensorDescriptor(d); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
};
struct FilterDesc {
  cudnnFilterDescriptor_t d = nullptr;
  FilterDesc() { PRECIS_CUDNN_CHECK(cudnnCreateFilterDescriptor(&d), "creating a filter descriptor"); }
  ~FilterDesc() { cudnnDestroyFilterDescriptor(d); }
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
};
struct ConvDesc {
  cudnnConvolutionDescriptor_t d = nullptr;
  ConvDesc() { PRECIS_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d), "creating a convolution descriptor"); }
  ~ConvDesc() { cudnnDestroyConvolutionDescriptor(d); }
  ConvDesc(const ConvDesc&) = delete;
  ConvDesc& operator=(const ConvDesc&) = delete;
};

cudnnDataType_t cudnn_type(DType t) {
  switch (t) {
    case DType::f32: return CUDNN_DATA_FLOAT;
    case DType::f64: return CUDNN_DATA_DOUBLE;
    case DType::f16: return CUDNN_DATA_HALF;
    case DType::bf16: return CUDNN_DATA_BFLOAT16;
    default: break;
  }
  throw InternalError("conv2d: cuDNN has no data type for this dtype");
}

bool low_precision(DType t) { return t == DType::f16 || t == DType::bf16; }

/// Math types an algorithm may use for this dtype: f16/bf16 anything (their Tensor Core kernels
/// accumulate in fp32); f32 with TF32 allowed anything but ALLOW_CONVERSION (no rounding to f16);
/// otherwise (f64, f32 under "ieee") only FMA kernels.
bool math_allowed(DType t, bool tf32, cudnnMathType_t m) {
  if (low_precision(t)) return true;
  if (tf32) return m != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
  return m == CUDNN_DEFAULT_MATH || m == CUDNN_FMA_MATH;
}

/// The math type to run a listed algorithm with: its own for f16/bf16 and TF32-allowed f32; FMA
/// otherwise, since CUDNN_DEFAULT_MATH permits TF32 Tensor Core math on Ampere and newer.
cudnnMathType_t run_math(DType t, bool tf32, cudnnMathType_t listed) {
  return low_precision(t) || tf32 ? listed : CUDNN_FMA_MATH;
}

/// The descriptor's math type while cuDNN lists or times algorithms: Tensor Core math for
/// f16/bf16, DEFAULT (TF32 permitted, no down-conversion; what PyTorch sets) for TF32-allowed f32,
/// FMA otherwise.
cudnnMathType_t query_math(DType t, bool tf32) {
  return low_precision(t) ? CUDNN_TENSOR_OP_MATH : tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
}

/// The descriptors of one problem, built from its plan, and whether this call may use TF32 (read
/// once per call, so its plan key and its math types agree).
struct ConvDescs {
  TensorDesc x, y;
  FilterDesc w;
  ConvDesc conv;
  DType dtype;
  bool tf32;

  ConvDescs(const ConvProblem& pr, bool allow_tf32) : dtype(pr.dtype), tf32(allow_tf32) {
    const ConvDescriptorDims d = kernels::conv_descriptor_dims(pr);
    const cudnnDataType_t t = cudnn_type(pr.dtype);
    const std::string what = kernels::describe(pr);
    PRECIS_CUDNN_CHECK(cudnnSetTensor4dDescriptorEx(x.d, t, d.x_dims[0], d.x_dims[1], d.x_dims[2], d.x_dims[3],
                                                    d.x_strides[0], d.x_strides[1], d.x_strides[2], d.x_strides[3]),
                       "describing the input of ", what);
    PRECIS_CUDNN_CHECK(cudnnSetTensor4dDescriptorEx(y.d, t, d.y_dims[0], d.y_dims[1], d.y_dims[2], d.y_dims[3],
                                                    d.y_strides[0], d.y_strides[1], d.y_strides[2], d.y_strides[3]),
                       "describing the output of ", what);
    const cudnnTensorFormat_t format = pr.layout == ConvLayout::nchw ? CUDNN_TENSOR_NCHW : CUDNN_TENSOR_NHWC;
    PRECIS_CUDNN_CHECK(cudnnSetFilter4dDescriptor(w.d, t, format, d.w_dims[0], d.w_dims[1], d.w_dims[2], d.w_dims[3]),
                       "describing the weight of ", what);
    const cudnnDataType_t compute = pr.dtype == DType::f64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
    PRECIS_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv.d, d.pad[0], d.pad[1], d.stride[0], d.stride[1],
                                                       d.dilation[0], d.dilation[1], CUDNN_CROSS_CORRELATION, compute),
                       "describing ", what);
    PRECIS_CUDNN_CHECK(cudnnSetConvolutionGroupCount(conv.d, d.groups), "setting the groups of ", what);
    set_math(query_math(pr.dtype, tf32));
  }
  void set_math(cudnnMathType_t m) {
    PRECIS_CUDNN_CHECK(cudnnSetConvolutionMathType(conv.d, m), "setting the math type of a convolution");
  }
};

/// One usable algorithm of a pass, with its math type and workspace size.
struct Candidate {
  int algo = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  size_t workspace = 0;
};

// The three passes' algorithm queries, behind one interface.
struct ForwardPass {
  using Perf = cudnnConvolutionFwdAlgoPerf_t;
  static constexpr int kCount = CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
  static const char* name() { return "forward"; }
  static cudnnStatus_t query(cudnnHandle_t h, const ConvDescs& c, int* returned, Perf* perf) {
    return cudnnGetConvolutionForwardAlgorithm_v7(h, c.x.d, c.w.d, c.conv.d, c.y.d, kCount, returned, perf);
  }
  static cudnnStatus_t workspace(cudnnHandle_t h, const ConvDescs& c, int algo, size_t* bytes) {
    return cudnnGetConvolutionForwardWorkspaceSize(h, c.x.d, c.w.d, c.conv.d, c.y.d,
                                                   static_cast<cudnnConvolutionFwdAlgo_t>(algo), bytes);
  }
  // Times the algorithms on the operands (x, w, y); writes y.
  static cudnnStatus_t find(cudnnHandle_t h, const ConvDescs& c, const std::vector<const void*>& p, int* returned,
                            Perf* perf, void* ws, size_t ws_bytes) {
    return cudnnFindConvolutionForwardAlgorithmEx(h, c.x.d, p[0], c.w.d, p[1], c.conv.d, c.y.d,
                                                  const_cast<void*>(p[2]), kCount, returned, perf, ws, ws_bytes);
  }
};
struct BackwardDataPass {
  using Perf = cudnnConvolutionBwdDataAlgoPerf_t;
  static constexpr int kCount = CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
  static const char* name() { return "backward data"; }
  static cudnnStatus_t query(cudnnHandle_t h, const ConvDescs& c, int* returned, Perf* perf) {
    return cudnnGetConvolutionBackwardDataAlgorithm_v7(h, c.w.d, c.y.d, c.conv.d, c.x.d, kCount, returned, perf);
  }
  static cudnnStatus_t workspace(cudnnHandle_t h, const ConvDescs& c, int algo, size_t* bytes) {
    return cudnnGetConvolutionBackwardDataWorkspaceSize(h, c.w.d, c.y.d, c.conv.d, c.x.d,
                                                        static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), bytes);
  }
  // Times the algorithms on the operands (w, dy, dx); writes dx.
  static cudnnStatus_t find(cudnnHandle_t h, const ConvDescs& c, const std::vector<const void*>& p, int* returned,
                            Perf* perf, void* ws, size_t ws_bytes) {
    return cudnnFindConvolutionBackwardDataAlgorithmEx(h, c.w.d, p[0], c.y.d, p[1], c.conv.d, c.x.d,
                                                       const_cast<void*>(p[2]), kCount, returned, perf, ws, ws_bytes);
  }
};
struct BackwardFilterPass {
  using Perf = cudnnConvolutionBwdFilterAlgoPerf_t;
  static constexpr int kCount = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
  static const char* name() { return "backward filter"; }
  static cudnnStatus_t query(cudnnHandle_t h, const ConvDescs& c, int* returned, Perf* perf) {
    return cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, c.x.d, c.y.d, c.conv.d, c.w.d, kCount, returned, perf);
  }
  static cudnnStatus_t workspace(cudnnHandle_t h, const ConvDescs& c, int algo, size_t* bytes) {
    return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, c.x.d, c.y.d, c.conv.d, c.w.d,
                                                          static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), bytes);
  }
  // Times the algorithms on the operands (x, dy, dw); writes dw.
  static cudnnStatus_t find(cudnnHandle_t h, const ConvDescs& c, const std::vector<const void*>& p, int* returned,
                            Perf* perf, void* ws, size_t ws_bytes) {
    return cudnnFindConvolutionBackwardFilterAlgorithmEx(h, c.x.d, p[0], c.y.d, p[1], c.conv.d, c.w.d,
                                                         const_cast<void*>(p[2]), kCount, returned, perf, ws,
                                                         ws_bytes);
  }
};

kernels::PlanCache<std::vector<Candidate>>& plan_cache() {
  static kernels::PlanCache<std::vector<Candidate>> cache;
  return cache;
}

/// The benchmarked lists (PRECIS_CUDNN_BENCHMARK=1), kept apart from the heuristic ones.
kernels::PlanCache<std::vector<Candidate>>& benchmark_cache() {
  static kernels::PlanCache<std::vector<Candidate>> cache;
  return cache;
}

/// Whether PRECIS_CUDNN_BENCHMARK=1 asks for algorithms timed on the first problem of each key
/// (torch.backends.cudnn.benchmark) instead of cuDNN's heuristic order. Read once.
bool benchmark_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("PRECIS_CUDNN_BENCHMARK");
    return v != nullptr && std::string(v) == "1";
  }();
  return on;
}

/// The usable algorithms of a pass in cuDNN's order of preference, planned once per key: those
/// cuDNN supports for the problem, of an allowed math type, deterministic unless allowed
/// otherwise, with the workspace each needs.
template <typename Pass>
std::vector<Candidate> candidates(cudnnHandle_t h, ConvDescs& descs, const kernels::PlanKey& key,
                                  const ConvProblem& pr, bool deterministic) {
  if (std::optional<std::vector<Candidate>> hit = plan_cache().find(key)) return *hit;
  typename Pass::Perf perf[Pass::kCount];
  int returned = 0;
  // What the heuristic offers depends on the descriptor's math type: ask with the widest allowed
  // one (Tensor Cores for f16/bf16, as the benchmark path and PyTorch do), not whatever math the
  // last candidate of an earlier pass on these descriptors left there.
  descs.set_math(query_math(pr.dtype, descs.tf32));
  PRECIS_CUDNN_CHECK(Pass::query(h, descs, &returned, perf), "choosing the ", Pass::name(), " algorithm of ",
                     kernels::describe(pr));
  std::vector<Candidate> found;
  for (int i = 0; i < returned; ++i) {
    const auto& r = perf[i];
    if (r.status != CUDNN_STATUS_SUCCESS || !math_allowed(pr.dtype, descs.tf32, r.mathType)) continue;
    if (deterministic && r.determinism != CUDNN_DETERMINISTIC) continue;
    Candidate c{static_cast<int>(r.algo), run_math(pr.dtype, descs.tf32, r.mathType), 0};
    descs.set_math(c.math);
    if (Pass::workspace(h, descs, c.algo, &c.workspace) != CUDNN_STATUS_SUCCESS) continue;
    found.push_back(c);
  }
  PRECIS_CHECK_T(NotImplementedError, !found.empty(), "conv2d: cuDNN offers no ",
                 deterministic ? "deterministic " : "", Pass::name(), " algorithm for ", kernels::describe(pr),
                 deterministic ? "; kernels::set_conv_deterministic(false) allows non-deterministic ones" : "",
                 "; or run this convolution on the CPU");
  return plan_cache().insert(key, found);
}

/// With PRECIS_CUDNN_BENCHMARK=1: the heuristic's candidates re-ordered by cuDNN's timing of
/// them on these operands (cudnnFind*AlgorithmEx, which writes the pass's output; the call that
/// follows overwrites it), with the same filters, planned once per key. The timing gets a
/// workspace as large as the largest candidate's, from the caching allocator; when that cannot
/// be had, or nothing timed passes the filters, the heuristic order stays.
template <typename Pass>
std::vector<Candidate> benchmarked(cudnnHandle_t h, ConvDescs& descs, const kernels::PlanKey& key,
                                   const ConvProblem& pr, bool deterministic, const std::vector<Candidate>& heuristic,
                                   const std::vector<const void*>& pointers, const Device& device) {
  if (std::optional<std::vector<Candidate>> hit = benchmark_cache().find(key)) return *hit;
  size_t ws_bytes = 0;
  for (const Candidate& c : heuristic) ws_bytes = std::max(ws_bytes, c.workspace);
  Tensor workspace;
  if (ws_bytes > 0) {
    try {
      workspace = empty({static_cast<int64_t>(ws_bytes)}, {.dtype = DType::boolean, .device = device});
    } catch (const OutOfMemoryError&) {
      return heuristic;  // not cached: a later call with more free memory times it
    }
  }
  typename Pass::Perf perf[Pass::kCount];
  int returned = 0;
  descs.set_math(query_math(pr.dtype, descs.tf32));
  PRECIS_CUDNN_CHECK(Pass::find(h, descs, pointers, &returned, perf,
                                workspace.defined() ? workspace.data_ptr() : nullptr, ws_bytes),
                     "timing the ", Pass::name(), " algorithms of ", kernels::describe(pr));
  std::vector<Candidate> timed;
  for (int i = 0; i < returned; ++i) {  // fastest first
    const auto& r = perf[i];
    if (r.status != CUDNN_STATUS_SUCCESS || !math_allowed(pr.dtype, descs.tf32, r.mathType) || r.memory > ws_bytes)
      continue;
    if (deterministic && r.determinism != CUDNN_DETERMINISTIC) continue;
    timed.push_back(Candidate{static_cast<int>(r.algo), run_math(pr.dtype, descs.tf32, r.mathType), r.memory});
  }
  return benchmark_cache().insert(key, timed.empty() ? heuristic : timed);
}

/// Runs `call(candidate, workspace pointer)` with the first candidate whose workspace can be had
/// and that cuDNN accepts for these operands; throws the last failure otherwise.
template <typename Pass, typename Call>
void run_pass(cudnnHandle_t h, ConvDescs& descs, const ConvProblem& pr, int device_index,
              std::initializer_list<const void*> pointers, const Device& device, Call&& call) {
  const bool deterministic = kernels::conv_deterministic();
  const kernels::PlanKey key = kernels::conv_plan_key(
      std::is_same_v<Pass, ForwardPass> ? ConvPass::forward
      : std::is_same_v<Pass, BackwardDataPass> ? ConvPass::backward_data
                                                : ConvPass::backward_filter,
      pr, device_index, kernels::common_alignment(pointers), deterministic, descs.tf32);
  std::vector<Candidate> list = candidates<Pass>(h, descs, key, pr, deterministic);
  if (benchmark_enabled())
    list = benchmarked<Pass>(h, descs, key, pr, deterministic, list, std::vector<const void*>(pointers), device);
  std::string failures;
  for (const Candidate& c : list) {
    Tensor workspace;
    if (c.workspace > 0) {
      try {
        workspace = empty({static_cast<int64_t>(c.workspace)}, {.dtype = DType::boolean, .device = device});
      } catch (const OutOfMemoryError& e) {  // a slower algorithm with less workspace may fit
        failures += precis::detail::str_cat("; algorithm ", c.algo, " needs ", c.workspace, " bytes: ", e.what());
        continue;
      }
    }
    descs.set_math(c.math);
    const cudnnStatus_t status = call(c, workspace.defined() ? workspace.data_ptr() : nullptr);
    if (status == CUDNN_STATUS_SUCCESS) return;
    if (CUDNN_STATUS_CATEGORY(status) != CUDNN_STATUS_NOT_SUPPORTED)
      throw_cudnn_error(status, "cudnnConvolution*", __FILE__, __LINE__,
                        precis::detail::str_cat("the ", Pass::name(), " pass (algorithm ", c.algo, ") of ",
                                                kernels::describe(pr), " on ", device.str()));
    failures += precis::detail::str_cat("; algorithm ", c.algo, ": ", cudnnGetErrorString(status));
  }
  // Every candidate refused (not supported) or wanted more workspace than there is: as when
  // cuDNN lists none, NotImplementedError, so a channels-last pass retries on NCHW copies.
  throw NotImplementedError(precis::detail::str_cat("conv2d: no cuDNN ", Pass::name(), " algorithm ran for ",
                                                    kernels::describe(pr), " on ", device.str(), failures));
}

/// The layout every operand is dense in (NCHW preferred when both fit), or a ShapeError: the
/// functional code passes contiguous or channels-last operands only.
ConvLayout common_layout(const char* op, std::initializer_list<const Tensor*> operands) {
  for (ConvLayout layout : {ConvLayout::nchw, ConvLayout::nhwc}) {
    bool all = true;
    for (const Tensor* t : operands)
      if (t->defined() && !kernels::conv_is_dense(t->sizes(), t->strides(), layout)) all = false;
    if (all) return layout;
  }
  std::string got;
  for (const Tensor* t : operands)
    if (t->defined()) {
      got += ' ';
      got += t->describe();
    }
  throw ShapeError(precis::detail::str_cat(op, ": the cuDNN kernel takes operands that are all contiguous (NCHW) or "
                                           "all channels-last (NHWC); got", got));
}

void check_device(const char* op, const Device& device, std::initializer_list<const Tensor*> operands) {
  std::string got;
  bool ok = device.is_cuda();
  for (const Tensor* t : operands) {
    if (!t->defined()) continue;
    got += ' ';
    got += t->describe();
    if (t->device() != device) ok = false;
  }
  PRECIS_CHECK_DEVICE(ok, op, ": the cuDNN kernel needs every operand on ", device.str(), "; got", got);
}

// Scalars for cuDNN's blending: double for f64 operands, float otherwise.
struct Blend {
  float f;
  double d;
  const void* ptr(DType t) const { return t == DType::f64 ? static_cast<const void*>(&d) : &f; }
};
constexpr Blend kOne{1.0f, 1.0}, kZero{0.0f, 0.0};

/// out += bias broadcast over (N, H, W), in place, by the add kernel (fp32 math, one rounding;
/// any layout): cuDNN's fused bias forward exists for one algorithm only.
void add_bias(const Tensor& out, const Tensor& bias) {
  const Tensor b = bias.view({1, bias.size(0), 1, 1}).expand(out.sizes());
  kernel<kernels::BinaryKernel>(OpId::add, DeviceType::cuda, out.dtype())(out, out, b, 1.0);
}

void zero(const Tensor& t) {
  if (t.numel() == 0) return;
  PRECIS_CUDA_CHECK(cudaMemsetAsync(t.data_ptr(), 0, static_cast<size_t>(t.numel()) * t.element_size(),
                                    device_stream(t.device().index)),
                    "zeroing ", t.describe());
}

void conv2d_kernel(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p) {
  check_device("conv2d", out.device(), {&out, &x, &w, &bias});
  PRECIS_CHECK_DTYPE(x.dtype() == out.dtype() && w.dtype() == out.dtype() && (!bias.defined() || bias.dtype() == out.dtype()),
                     "conv2d: the cuDNN kernel expects one dtype; got out ", out.describe(), ", x ", x.describe(),
                     ", w ", w.describe());
  PRECIS_CHECK_SHAPE(!bias.defined() || bias.is_contiguous(), "conv2d: bias must be contiguous, got ", bias.describe());
  const ConvLayout layout = common_layout("conv2d", {&out, &x, &w});
  const ConvProblem pr = kernels::make_conv_problem(x.sizes(), w.sizes(), p, x.dtype(), layout);
  PRECIS_CHECK_SHAPE(out.sizes() == Shape({pr.n, pr.o, pr.ho, pr.wo}), "conv2d: the output is ", out.describe(),
                     " but ", kernels::describe(pr), " makes (", pr.n, ", ", pr.o, ", ", pr.ho, ", ", pr.wo, ")");
  if (out.numel() == 0) return;
  const int index = out.device().index;
  DeviceGuard guard(index);
  if (x.numel() == 0 || w.numel() == 0) {  // an empty sum per output: zeros (+ bias)
    zero(out);
    if (bias.defined()) add_bias(out, bias);
    return;
  }
  cudnnHandle_t h = cudnn_handle(index);
  ConvDescs descs(pr, uses_tf32(OpId::conv2d, DeviceType::cuda, pr.dtype));
  const DType t = out.dtype();
  run_pass<ForwardPass>(h, descs, pr, index, {x.data_ptr(), w.data_ptr(), out.data_ptr()}, out.device(),
                        [&](const Candidate& c, void* ws) {
                          return cudnnConvolutionForward(h, kOne.ptr(t), descs.x.d, x.data_ptr(), descs.w.d,
                                                         w.data_ptr(), descs.conv.d,
                                                         static_cast<cudnnConvolutionFwdAlgo_t>(c.algo), ws,
                                                         c.workspace, kZero.ptr(t), descs.y.d, out.data_ptr());
                        });
  if (bias.defined()) add_bias(out, bias);
}

void conv2d_backward_kernel(const Tensor& grad_x, const Tensor& grad_w, const Tensor& grad_bias, const Tensor& grad_out,
                            const Tensor& x, const Tensor& w, const Conv2dParams& p) {
  check_device("conv2d_backward", grad_out.device(), {&grad_x, &grad_w, &grad_bias, &grad_out, &x, &w});
  const DType t = grad_out.dtype();
  for (const Tensor* op : {&grad_x, &grad_w, &grad_bias, &x, &w})
    PRECIS_CHECK_DTYPE(!op->defined() || op->dtype() == t, "conv2d_backward: the cuDNN kernel expects one dtype; ",
                       "grad_out is ", grad_out.describe(), ", an operand is ", op->describe());
  PRECIS_CHECK(!grad_bias.defined() || grad_w.defined(),
               "conv2d_backward: grad_bias is computed together with grad_w only");
  PRECIS_CHECK(!grad_x.defined() || w.defined(), "conv2d_backward: grad_x needs the weight");
  PRECIS_CHECK(!grad_w.defined() || x.defined(), "conv2d_backward: grad_w needs the input");
  // The problem's sizes come from whichever of x / grad_x and w / grad_w is given.
  const Tensor& xs = x.defined() ? x : grad_x;
  const Tensor& ws = w.defined() ? w : grad_w;
  PRECIS_CHECK(xs.defined() && ws.defined(), "conv2d_backward: nothing to compute (no grad_x and no grad_w)");
  const ConvLayout layout = common_layout("conv2d_backward", {&grad_out, &grad_x, &grad_w, &x, &w});
  const ConvProblem pr = kernels::make_conv_problem(xs.sizes(), ws.sizes(), p, t, layout);
  PRECIS_CHECK_SHAPE(grad_out.sizes() == Shape({pr.n, pr.o, pr.ho, pr.wo}), "conv2d_backward: grad_out is ",
                     grad_out.describe(), " but ", kernels::describe(pr), " makes (", pr.n, ", ", pr.o, ", ", pr.ho,
                     ", ", pr.wo, ")");
  const int index = grad_out.device().index;
  DeviceGuard guard(index);
  if (grad_bias.defined()) {
    // Σ over (N, H, W) with precis' deterministic reduction (fp32 accumulation, f64 for f64),
    // written into grad_bias viewed in keepdim form.
    PRECIS_CHECK_SHAPE(grad_bias.is_contiguous() && grad_bias.numel() == pr.o, "conv2d_backward: grad_bias must be (",
                       pr.o, ") contiguous, got ", grad_bias.describe());
    kernel<kernels::ReduceKernel>(OpId::sum, DeviceType::cuda, t)(grad_bias.view({1, pr.o, 1, 1}), grad_out,
                                                                   {0, 2, 3});
  }
  const bool empty_sum = grad_out.numel() == 0 || xs.numel() == 0 || ws.numel() == 0;
  if (empty_sum) {
    for (const Tensor* g : {&grad_x, &grad_w})
      if (g->defined()) zero(*g);
    return;
  }
  cudnnHandle_t h = cudnn_handle(index);
  ConvDescs descs(pr, uses_tf32(OpId::conv2d_backward, DeviceType::cuda, pr.dtype));
  if (grad_x.defined()) {
    run_pass<BackwardDataPass>(h, descs, pr, index, {w.data_ptr(), grad_out.data_ptr(), grad_x.data_ptr()},
                               grad_out.device(), [&](const Candidate& c, void* ws_ptr) {
                                 return cudnnConvolutionBackwardData(
                                     h, kOne.ptr(t), descs.w.d, w.data_ptr(), descs.y.d, grad_out.data_ptr(),
                                     descs.conv.d, static_cast<cudnnConvolutionBwdDataAlgo_t>(c.algo), ws_ptr,
                                     c.workspace, kZero.ptr(t), descs.x.d, grad_x.data_ptr());
                               });
  }
  if (grad_w.defined()) {
    run_pass<BackwardFilterPass>(h, descs, pr, index, {x.data_ptr(), grad_out.data_ptr(), grad_w.data_ptr()},
                                 grad_out.device(), [&](const Candidate& c, void* ws_ptr) {
                                   return cudnnConvolutionBackwardFilter(
                                       h, kOne.ptr(t), descs.x.d, x.data_ptr(), descs.y.d, grad_out.data_ptr(),
                                       descs.conv.d, static_cast<cudnnConvolutionBwdFilterAlgo_t>(c.algo), ws_ptr,
                                       c.workspace, kZero.ptr(t), descs.w.d, grad_w.data_ptr());
                                 });
  }
}

// cuDNN offers no deterministic algorithm for some channels-last problems (f64 backward data on
// sm_90, cuDNN 9.19). Those run on NCHW copies, one transpose each way, rather than fail: the
// layout is a speed hint, not a reason to refuse a convolution cuDNN can do in NCHW.
Tensor nchw(const Tensor& t) { return t.defined() ? t.contiguous() : t; }
Tensor nchw_like(const Tensor& t) {
  return t.defined() ? empty(t.sizes(), {.dtype = t.dtype(), .device = t.device()}) : t;
}
void copy_back(Tensor dst, const Tensor& src) {  // a handle: copy_ writes the storage dst shares
  if (dst.defined()) dst.copy_(src);
}

void conv2d_any_layout(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p) {
  try {
    conv2d_kernel(out, x, w, bias, p);
  } catch (const NotImplementedError&) {
    if (common_layout("conv2d", {&out, &x, &w}) != ConvLayout::nhwc) throw;
    const Tensor o = nchw_like(out);
    conv2d_kernel(o, nchw(x), nchw(w), bias, p);
    copy_back(out, o);
  }
}

void conv2d_backward_any_layout(const Tensor& grad_x, const Tensor& grad_w, const Tensor& grad_bias,
                                const Tensor& grad_out, const Tensor& x, const Tensor& w, const Conv2dParams& p) {
  try {
    conv2d_backward_kernel(grad_x, grad_w, grad_bias, grad_out, x, w, p);
  } catch (const NotImplementedError&) {
    if (common_layout("conv2d_backward", {&grad_out, &grad_x, &grad_w, &x, &w}) != ConvLayout::nhwc) throw;
    const Tensor gx = nchw_like(grad_x), gw = nchw_like(grad_w);
    conv2d_backward_kernel(gx, gw, grad_bias, nchw(grad_out), nchw(x), nchw(w), p);
    copy_back(grad_x, gx);
    copy_back(grad_w, gw);
  }
}

}  // namespace

void register_conv_kernels() {
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    register_kernel<kernels::Conv2dKernel>(OpId::conv2d, DeviceType::cuda, dt, &conv2d_any_layout);
    register_kernel<kernels::Conv2dBackwardKernel>(OpId::conv2d_backward, DeviceType::cuda, dt,
                                                   &conv2d_backward_any_layout);
  }
}

}  // namespace precis::cuda

#endif  // PRECIS_HAS_CUDNN
