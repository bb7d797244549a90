#pragma once
// Host-side planning of a 2-D convolution for a library back end (today cuDNN, in
// ops/cuda/conv_cudnn.cpp): memory-layout detection (NCHW or channels-last NHWC), the output
// size, the int32 dims and strides that the back end's descriptors take, and the key under which
// a chosen algorithm is cached. Plain C++ with no back-end header, so the CPU tests check all of
// it (tests/ops/conv_plan_test.cpp) and the back-end file only translates it into calls.
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"
#include "ops/contracts/kernels_conv.h"

namespace precis::kernels {

/// How a 4-D (N, C, H, W) tensor lies in memory. nchw: contiguous; nhwc: channels-last, i.e. the
/// permutation (N, H, W, C) is contiguous (what PyTorch calls torch.channels_last).
enum class ConvLayout : uint8_t { nchw, nhwc };

/// "NCHW" or "NHWC".
const char* conv_layout_name(ConvLayout layout);

/// The layout of a dense 4-D tensor with these sizes and strides, or nullopt when it is neither
/// contiguous nor channels-last (sliced, broadcast, other permutations). A size-1 dim's stride is
/// ignored, as it never moves; a tensor that is both (C = 1, or H = W = 1) is reported as NCHW.
std::optional<ConvLayout> conv_layout_of(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides);

/// Whether a 4-D tensor with these sizes and strides is dense in `layout` (size-1 dims' strides
/// ignored).
bool conv_is_dense(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides, ConvLayout layout);

/// The dense strides of a 4-D (N, C, H, W) tensor in `layout`.
std::array<int64_t, 4> conv_dense_strides(const std::array<int64_t, 4>& sizes, ConvLayout layout);

/// The output height or width of a convolution along one dim (PyTorch's rule), or 0 when the
/// dilated kernel does not fit into the padded input. Arguments as checked by conv2d (no overflow).
int64_t conv2d_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t padding, int64_t dilation);

/// One convolution problem as a back end sees it: all sizes (output included), the geometry, the
/// dtype and the memory layout of the activations and the weight (one layout for all).
struct ConvProblem {
  DType dtype = DType::f32;
  ConvLayout layout = ConvLayout::nchw;
  int64_t n = 0, c = 0, h = 0, w = 0;  // input (N, C, H, W)
  int64_t o = 0, kh = 0, kw = 0;       // weight (O, C / groups, kH, kW)
  int64_t ho = 0, wo = 0;              // output (N, O, Ho, Wo)
  Conv2dParams p;
};

/// The problem for x: (N, C, H, W) and w: (O, C / groups, kH, kW) with p (as checked by conv2d).
/// Throws ShapeError when w.size(1) · groups != C or a size is negative.
ConvProblem make_conv_problem(const std::vector<int64_t>& x_sizes, const std::vector<int64_t>& w_sizes,
                              const Conv2dParams& p, DType dtype, ConvLayout layout);

/// What a 4-D cuDNN-style descriptor takes: int32 dims in (N, C, H, W) order with the strides of
/// the problem's layout, for input, output and weight, plus the convolution's int32 geometry.
struct ConvDescriptorDims {
  std::array<int, 4> x_dims{}, x_strides{};
  std::array<int, 4> y_dims{}, y_strides{};
  std::array<int, 4> w_dims{};  // (O, C / groups, kH, kW); the weight's layout is the problem's
  std::array<int, 2> pad{}, stride{}, dilation{};
  int groups = 1;
};

/// The descriptors' dims of a problem. Throws NotImplementedError naming the problem when a size,
/// stride or element count exceeds int32 (cuDNN's legacy descriptors take int; PyTorch splits the
/// batch in that case, precis does not yet).
ConvDescriptorDims conv_descriptor_dims(const ConvProblem& problem);

/// "conv2d f16 NHWC x (8, 64, 56, 56) w (128, 64, 3, 3) -> (8, 128, 28, 28) stride (2, 2) padding
/// (1, 1) dilation (1, 1) groups 1": for error messages.
std::string describe(const ConvProblem& problem);

/// Whether back ends choose only deterministic algorithms (bit-identical results from run to run;
/// the default, true). false lets them pick faster algorithms that accumulate with atomics (cuDNN's
/// backward-data and backward-filter ALGO_0 and ALGO_3), as torch.backends.cudnn.deterministic =
/// False does. Process-wide; part of every plan key, so changing it re-plans.
bool conv_deterministic();
/// Sets conv_deterministic().
void set_conv_deterministic(bool deterministic);

/// The passes of a convolution that choose an algorithm separately.
enum class ConvPass : uint8_t { forward, backward_data, backward_filter };

/// The largest power of two (at most 256) that divides every address: the alignment the back end
/// may assume. Algorithms can require aligned operands, so it is part of the cache key.
int64_t common_alignment(std::initializer_list<const void*> addresses);

/// A cache key: the problem flattened into integers, with everything else the chosen algorithm
/// depends on (the pass, the device, the operands' alignment, whether only deterministic algorithms
/// may be chosen, whether f32 may compute in TF32). Two keys are equal only when every field is.
using PlanKey = std::vector<int64_t>;

/// The key of `problem` for `pass` on device `device_index`. tf32: the call may use TF32 Tensor
/// Core algorithms (uses_tf32, ops/float32_precision.h), so a plan chosen under one precision
/// setting is never run under the other.
PlanKey conv_plan_key(ConvPass pass, const ConvProblem& problem, int device_index, int64_t alignment,
                      bool deterministic, bool tf32);

/// FNV-1a over the key's integers.
struct PlanKeyHash {
  size_t operator()(const PlanKey& key) const noexcept;
};

/// A thread-safe map from plan keys to chosen algorithms (or anything a back end plans once per
/// problem). Entries are never evicted: a training run meets a fixed set of shapes.
template <typename Value>
class PlanCache {
 public:
  /// The cached value of `key`, or nullopt.
  std::optional<Value> find(const PlanKey& key) const {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = map_.find(key);
    if (it == map_.end()) return std::nullopt;
    return it->second;
  }
  /// Stores `value` unless another thread stored one first; returns the stored one.
  Value insert(const PlanKey& key, const Value& value) {
    std::lock_guard<std::mutex> lock(mutex_);
    return map_.emplace(key, value).first->second;
  }
  /// Number of cached problems.
  size_t size() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return map_.size();
  }

 private:
  mutable std::mutex mutex_;
  std::unordered_map<PlanKey, Value, PlanKeyHash> map_;
};

}  // namespace precis::kernels
