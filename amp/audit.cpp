#include "amp/audit.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <limits>
#include <sstream>
#include <string_view>

#include "amp/autocast.h"
#include "autograd/grad_mode.h"
#include "ops/functional.h"

namespace precis::amp {

namespace {
thread_local Audit* t_audit = nullptr;
}

Audit* active_audit() { return autograd::in_backward_pass() ? nullptr : t_audit; }
Audit* open_audit() { return t_audit; }

Audit* detail::exchange_audit(Audit* audit) {
  Audit* previous = t_audit;
  t_audit = audit;
  return previous;
}

Audit::Audit() : previous_(t_audit) {
  t_audit = this;
  detail::refresh_precision_policy();
}
Audit::~Audit() {
  t_audit = previous_;
  detail::refresh_precision_policy();
}

void Audit::observe(std::string_view name, std::optional<OpId> op, const std::vector<const Tensor*>& inputs,
                    std::optional<DType> ran_in) {
  // The reductions below are ops themselves: stop recording while they run.
  t_audit = nullptr;
  struct Restore {
    Audit* self;
    ~Restore() { t_audit = self; }
  } restore{this};
  AuditRecord& r = records_[std::string(name)];
  r.op = name;
  ++r.calls;
  bool dtype_seen = false;
  NoGradGuard no_grad;
  for (const Tensor* t : inputs) {
    if (!t->defined() || !t->is_floating_point() || t->numel() == 0) continue;
    if (!dtype_seen) {
      const DType d = ran_in.value_or(t->dtype());
      if (std::find(r.dtypes.begin(), r.dtypes.end(), d) == r.dtypes.end()) r.dtypes.push_back(d);
      if (d == DType::f32) {
        const Float32Precision p = op ? float32_precision(*op, t->device().type) : Float32Precision::ieee;
        if (std::find(r.f32_precisions.begin(), r.f32_precisions.end(), p) == r.f32_precisions.end())
          r.f32_precisions.push_back(p);
      }
      dtype_seen = true;
    }
    double m = max(abs(t->detach())).item<double>();
    if (std::isnan(m)) m = std::numeric_limits<double>::infinity();
    r.max_abs = std::max(r.max_abs, m);
  }
}

std::vector<AuditRecord> Audit::records() const {
  std::vector<AuditRecord> out;
  for (const auto& [name, r] : records_) out.push_back(r);
  return out;
}

std::vector<AuditRecord> Audit::near_fp16_limit(double margin) const {
  std::vector<AuditRecord> out;
  for (const auto& [name, r] : records_)
    if (r.max_abs >= kFp16Max / margin) out.push_back(r);
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.max_abs > b.max_abs; });
  return out;
}

void Audit::observe_fp8(const std::string& operand, const Tensor& x, const Tensor& scale, const Tensor& data,
                        double fp8_max) {
  NoGradGuard no_grad;
  Fp8AuditRecord& r = fp8_[operand];
  r.operand = operand;
  ++r.casts;
  r.elements += x.numel();
  r.last_scale = scale.item<double>();
  if (x.numel() == 0) return;
  auto count = [](const Tensor& mask) { return static_cast<int64_t>(sum(mask.to(DType::f64)).item<double>()); };
  const Tensor xf = x.detach().to(DType::f32);
  const double amax = max(abs(xf)).item<double>();
  r.amax = std::isnan(amax) ? std::numeric_limits<double>::infinity() : std::max(r.amax, amax);
  r.saturated += count(gt(abs(mul(xf, scale.reshape({}))), fp8_max));
  const Tensor nonzero = ne(xf, 0.0);
  r.nonzero += count(nonzero);
  r.flushed += count(mul(nonzero.to(DType::f32), eq(data.to(DType::f32), 0.0).to(DType::f32)));
}

std::vector<Fp8AuditRecord> Audit::fp8_records() const {
  std::vector<Fp8AuditRecord> out;
  for (const auto& [name, r] : fp8_) out.push_back(r);
  return out;
}

std::string Audit::report() const {
  std::ostringstream os;
  os << std::left << std::setw(32) << "op" << std::setw(8) << "calls" << std::setw(16) << "dtypes" << "max |input|\n";
  for (const auto& [name, r] : records_) {
    std::string dts;
    auto add = [&dts](std::string_view name) { dts += (dts.empty() ? "" : ",") + std::string(name); };
    for (DType d : r.dtypes) {
      if (d != DType::f32) {
        add(dtype_name(d));
        continue;
      }
      for (Float32Precision p : r.f32_precisions) add(p == Float32Precision::tf32 ? "tf32" : "f32");
    }
    os << std::setw(32) << name << std::setw(8) << r.calls << std::setw(16) << dts << r.max_abs;
    if (r.max_abs >= kFp16Max / 2) os << "   <-- within 2x of the fp16 maximum (65504): keep this op in fp32 or use bf16";
    os << '\n';
  }
  if (!fp8_.empty()) {
    auto share = [](int64_t part, int64_t whole) { return whole > 0 ? static_cast<double>(part) / whole : 0.0; };
    os << "\n" << std::setw(40) << "fp8 operand" << std::setw(8) << "casts" << std::setw(14) << "amax"
       << std::setw(14) << "last scale" << std::setw(12) << "saturated" << "flushed to 0 (of nonzero)\n";
    for (const auto& [name, r] : fp8_)
      os << std::setw(40) << name << std::setw(8) << r.casts << std::setw(14) << r.amax << std::setw(14)
         << r.last_scale << std::setw(12) << share(r.saturated, r.elements) << share(r.flushed, r.nonzero) << '\n';
  }
  return os.str();
}

}  // namespace precis::amp
