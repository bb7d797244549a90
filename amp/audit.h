#pragma once
// Audit mode: find the ops whose values approach the fp16 range before training in fp16.
//
//   amp::Audit audit;                      // records on this thread while alive
//   { amp::Autocast ac(DType::bf16); model_forward(x); }
//   for (const auto& line : audit.near_fp16_limit()) std::cout << line.op << " " << line.max_abs << "\n";
//   std::cout << audit.report();
//
// For every op called while the audit is alive (with or without autocast), it records the dtype
// the op ran in (after autocast), for f32 calls whether its GEMM or convolution computed in IEEE
// fp32 or TF32 (ops/float32_precision.h: TF32 only on CUDA, as the settings say), and the largest
// magnitude among its floating inputs. An op's
// output is the next op's input, so a model's intermediate values are all seen; the values that
// reach an op are what must fit its dtype. Recording reads every input once (a reduction per
// input), so audit a few steps, not a whole run.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "ops/float32_precision.h"
#include "ops/op_table.h"
#include "tensor/tensor.h"

namespace precis::amp {

/// What an Audit saw of one op, over all its calls.
struct AuditRecord {
  std::string op;     ///< the op's name: op_name()'s, or a custom op's registered name
  int64_t calls = 0;  ///< calls recorded
  /// dtypes the op ran in (its first floating input's, after autocast).
  std::vector<DType> dtypes;
  /// For its f32 calls: the internal precisions they computed in (float32_precision(OpId,
  /// DeviceType), the function the CUDA kernels ask): tf32 for a CUDA GEMM or convolution whose
  /// family is set to TF32, ieee for every other call. Empty when no call ran in f32.
  std::vector<Float32Precision> f32_precisions;
  /// Largest |x| among the op's floating inputs (NaN/inf count as inf).
  double max_abs = 0.0;
};

/// What an Audit saw of the fp8 casts of one GEMM operand (amp::fp8_scaled_cast: fp8_linear's
/// input, weight and output gradient, backward included), over all its casts: the numbers that say
/// whether a scale fits its tensor.
struct Fp8AuditRecord {
  std::string operand;     ///< "fp8_linear input (M, K)", "... weight (N, K)", "... grad_output (M, N)"
  int64_t casts = 0;       ///< casts recorded
  int64_t elements = 0;    ///< elements cast, over all casts
  int64_t nonzero = 0;     ///< of them, nonzero before the cast
  int64_t saturated = 0;   ///< elements whose |x · scale| exceeded the format's max (clamped to it)
  int64_t flushed = 0;     ///< nonzero elements that became zero (below half the smallest subnormal)
  double amax = 0.0;       ///< largest |x| before scaling (NaN/inf count as inf)
  double last_scale = 0.0; ///< the scale of the last cast
};

/// RAII recorder: while alive, every op called on the constructing thread (outside backward) is
/// recorded (see the file comment). Audits nest: the innermost records, and the outer resumes when
/// it is destroyed, so destroy them in reverse order of construction on the same thread.
class Audit {
 public:
  /// The fp16 maximum, 65504.
  static constexpr double kFp16Max = 65504.0;

  Audit();
  ~Audit();
  Audit(const Audit&) = delete;
  Audit& operator=(const Audit&) = delete;

  /// Every op seen, by name.
  std::vector<AuditRecord> records() const;
  /// Ops whose inputs reached at least kFp16Max / margin (default: within 2x of the fp16 maximum).
  std::vector<AuditRecord> near_fp16_limit(double margin = 2.0) const;
  /// A table of every op (name, calls, dtypes, max |x|), flagging those near the fp16 limit. An
  /// f32 call that computed in TF32 is listed as "tf32" among the dtypes, an IEEE one as "f32".
  /// When fp8 casts were seen, a second table lists them (fp8_records()).
  std::string report() const;
  /// The fp8 operands seen, by name (empty without fp8 casts).
  std::vector<Fp8AuditRecord> fp8_records() const;

  /// Called by amp::fp8_scaled_cast while an Audit is open (backward included; not by users):
  /// x the tensor cast, scale its one-element f32 scale, data the fp8 result. Reads them (a
  /// reduction each).
  void observe_fp8(const std::string& operand, const Tensor& x, const Tensor& scale, const Tensor& data,
                   double fp8_max);

  /// Called by the precision hook of every op, built-in or registered with amp::register_custom_op
  /// (not by users). name: the op's; op: its OpId, none for a custom op (whose f32 calls count as
  /// IEEE). ran_in: the dtype the op computes in when it is not its first floating input's (a
  /// kernel that widens f16/bf16 logits itself).
  void observe(std::string_view name, std::optional<OpId> op, const std::vector<const Tensor*>& inputs,
               std::optional<DType> ran_in = std::nullopt);

 private:
  std::map<std::string, AuditRecord> records_;
  std::map<std::string, Fp8AuditRecord> fp8_;
  Audit* previous_;
};

/// The audit recording on this thread, or null (null while backward runs: backward is not audited).
Audit* active_audit();
/// The innermost Audit open on this thread, backward or not, or null.
Audit* open_audit();

namespace detail {
/// Makes `audit` the thread's open audit and returns the previous one (a checkpoint's
/// recomputation suspends the audit with nullptr and restores it).
Audit* exchange_audit(Audit* audit);
}  // namespace detail

}  // namespace precis::amp
