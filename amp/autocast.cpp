// Autocast state, the policy table with its run-time overrides, and the weight-cast cache.
//
// Note [Autocast cache]: inside a region, a Lower op casts the same fp32 parameter to bf16/f16
// on every call (a model uses each weight once per forward, but a loop of micro-batches inside
// one region, or weight sharing, reuses it). The cache keeps the low-precision copy of each fp32
// leaf that requires grad, keyed by (tensor, its version counter, target dtype, grad mode):
//  - an in-place update of the parameter (optimizer step, load_state_dict) bumps its version, so
//    a stale copy is never served;
//  - a copy made under NoGradGuard has no backward node, so it is never served to grad-mode code
//    (and vice versa);
//  - the entry holds a weak reference to the parameter, so a freed tensor's address being reused
//    cannot alias;
//  - the cache is dropped when the outermost Autocast guard of the thread exits.
//
// Note [Autocast in checkpointed regions]: a checkpointed region (autograd/checkpoint.h) runs its
// forward under NoGradGuard and again, from backward, under grad mode; both runs must cast alike,
// and the recomputed graph must join the outer graph where the forward's would have. An
// AutocastRegion (the PrecisionRegion amp gives the checkpoint) does three things:
//  - it captures the thread's settings (each device type's enabled flag, dtype and cache flag, the
//    guard depth, the category overrides, whether fp8 linear layers are on: Fp8Autocast) when the
//    region begins, and the recomputation runs under exactly those, with the backward's own
//    settings set aside and restored after;
//  - an fp32 parameter cast in the region's forward is cast as outside it: under grad mode,
//    through the thread's cache, so the copy is the one the ops before and after the region use
//    (a shared weight's gradient is summed in the copy's dtype as without checkpointing), and the
//    region records the copy. The recomputation is served that same copy, never a new cast: the
//    outer cache may be gone by backward (the region's guard has exited) or hold something else,
//    and a cast made in one run but not the other would make the two graphs differ (PyTorch's
//    process-wide cache does exactly that to selective checkpointing, pytorch/pytorch#193338);
//  - the recomputation has a cache of its own, dropped at its end, and the audit is suspended: it
//    recorded these ops in the forward.
#include "amp/autocast.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "amp/audit.h"
#include "amp/fp8_linear.h"
#include "core/warning.h"
#include "autograd/grad_mode.h"
#include "ops/detail/broadcast.h"
#include "ops/precision.h"

namespace precis::amp {

namespace {

struct DeviceState {
  bool enabled = false;
  DType dtype;
  bool cache = true;
};

struct CacheKey {
  const TensorImpl* impl;
  uint32_t version;
  DType dtype;
  bool grad_mode;
  bool operator==(const CacheKey&) const = default;
};
struct CacheKeyHash {
  size_t operator()(const CacheKey& k) const {
    return std::hash<const void*>()(k.impl) ^ (static_cast<size_t>(k.version) << 8) ^
           (static_cast<size_t>(k.dtype) << 1) ^ static_cast<size_t>(k.grad_mode);
  }
};
struct CacheEntry {
  std::weak_ptr<TensorImpl> source;
  Tensor copy;
};

struct ThreadState {
  DeviceState devices[kNumDeviceTypes] = {{false, DType::bf16, true}, {false, DType::f16, true}};
  int depth = 0;  // open Autocast guards
  std::unordered_map<CacheKey, CacheEntry, CacheKeyHash> cache;
};

thread_local ThreadState t_state;

class AutocastRegion;
thread_local AutocastRegion* t_region = nullptr;  // the innermost checkpointed region on the thread
// A recomputation's category overrides, as they were when its region began (null: the live ones).
thread_local const std::atomic<int8_t>* t_frozen_overrides = nullptr;

// Overrides: category + 1 per (device type, op), 0 (the zero-initialised value) meaning the op
// table's. Atomic: read on every op call under autocast, so no lock; set_category is rare.
std::atomic<int8_t> g_overrides[kNumDeviceTypes][kNumOps];

struct CustomOpInfo {
  std::string name;
  Category category;
};
std::mutex g_custom_mutex;
std::vector<CustomOpInfo>& custom_ops() {
  static std::vector<CustomOpInfo> ops;
  return ops;
}

const char* banned_alternative(OpId op) {
  switch (op) {
    case OpId::binary_cross_entropy:
      return "binary_cross_entropy_with_logits, which takes logits and is stable in low precision";
    default:
      return "an fp32 region (an inner amp::Autocast with enabled=false)";
  }
}

}  // namespace

DType default_autocast_dtype(DeviceType device_type) {
  return device_type == DeviceType::cpu ? DType::bf16 : DType::f16;
}

Autocast::Autocast(DType dtype, DeviceType device_type, bool enabled)
    : Autocast(AutocastOptions{.device_type = device_type, .dtype = dtype, .enabled = enabled}) {}

Autocast::Autocast(const AutocastOptions& o) : device_type_(o.device_type) {
  PRECIS_CHECK_DTYPE(is_low_precision(o.dtype), "Autocast: the autocast dtype must be f16 or bf16, got ",
                     dtype_name(o.dtype));
  DeviceState& s = t_state.devices[static_cast<int>(o.device_type)];
  prev_enabled_ = s.enabled;
  prev_dtype_ = s.dtype;
  prev_cache_ = s.cache;
  s.enabled = o.enabled;
  s.dtype = o.dtype;
  s.cache = o.cache_enabled;
  ++t_state.depth;
  detail::refresh_precision_policy();
}

Autocast::~Autocast() {
  DeviceState& s = t_state.devices[static_cast<int>(device_type_)];
  s.enabled = prev_enabled_;
  s.dtype = prev_dtype_;
  s.cache = prev_cache_;
  if (--t_state.depth == 0) t_state.cache.clear();
  detail::refresh_precision_policy();
}

bool is_autocast_enabled(DeviceType d) { return t_state.devices[static_cast<int>(d)].enabled; }
DType autocast_dtype(DeviceType d) { return t_state.devices[static_cast<int>(d)].dtype; }
bool any_autocast_enabled() {
  if (autograd::in_backward_pass()) return false;
  for (const DeviceState& s : t_state.devices)
    if (s.enabled) return true;
  return false;
}
size_t cache_size() { return t_state.cache.size(); }

Category category(OpId op, DeviceType device_type) {
  const size_t i = static_cast<size_t>(device_type) * kNumOps + static_cast<size_t>(op);
  const int8_t o = t_frozen_overrides != nullptr
                       ? t_frozen_overrides[i].load(std::memory_order_relaxed)
                       : g_overrides[static_cast<int>(device_type)][static_cast<int>(op)].load(std::memory_order_relaxed);
  return o == 0 ? op_info(op).category : static_cast<Category>(o - 1);
}

void set_category(OpId op, Category c, DeviceType device_type) {
  g_overrides[static_cast<int>(device_type)][static_cast<int>(op)].store(static_cast<int8_t>(static_cast<int>(c) + 1));
}

void reset_categories() {
  for (auto& per_device : g_overrides)
    for (auto& o : per_device) o.store(0);
}

CustomOp register_custom_op(const std::string& name, Category category) {
  std::lock_guard<std::mutex> lock(g_custom_mutex);
  custom_ops().push_back({name, category});
  return {static_cast<int>(custom_ops().size()) - 1};
}

namespace {

CustomOpInfo custom_op(CustomOp op) {
  std::lock_guard<std::mutex> lock(g_custom_mutex);
  PRECIS_CHECK(op.id >= 0 && static_cast<size_t>(op.id) < custom_ops().size(), "amp::autocast: CustomOp id ", op.id,
               " was not returned by register_custom_op");
  return custom_ops()[static_cast<size_t>(op.id)];
}

[[noreturn]] void throw_banned(OpId op) {
  throw DTypeError(precis::detail::str_cat(op_name(op), " is not allowed under autocast: it is unsafe in low "
                                           "precision. Use ", banned_alternative(op), "."));
}

[[noreturn]] void throw_banned_custom(const std::string& name) {
  throw DTypeError(precis::detail::str_cat(name, " is registered as Banned under autocast; run it in an "
                                           "fp32 region (an inner amp::Autocast with enabled=false)."));
}

}  // namespace

namespace {
// The thread cache's low-precision copy of the fp32 parameter `t`, made on a miss.
Tensor cache_lookup(const Tensor& t, DType dtype) {
  const CacheKey key{t.impl(), t.version(), dtype, is_grad_enabled()};
  auto it = t_state.cache.find(key);
  if (it != t_state.cache.end()) {
    if (auto src = it->second.source.lock(); src && src.get() == t.impl()) return it->second.copy;
    t_state.cache.erase(it);
  }
  Tensor copy = t.to(dtype);
  t_state.cache[key] = {t.impl_ptr(), copy};
  return copy;
}
// See Note [Autocast in checkpointed regions].
class AutocastRegion final : public PrecisionRegion {
 public:
  AutocastRegion() : devices_(), depth_(t_state.depth), fp8_(is_fp8_autocast_enabled()) {
    std::copy(std::begin(t_state.devices), std::end(t_state.devices), devices_);
    for (int d = 0; d < kNumDeviceTypes; ++d)
      for (int op = 0; op < kNumOps; ++op)
        overrides_[static_cast<size_t>(d) * kNumOps + static_cast<size_t>(op)].store(
            g_overrides[d][op].load(std::memory_order_relaxed), std::memory_order_relaxed);
  }

  void begin_forward() override {
    parent_ = t_region;
    t_region = this;
    mode_ = Mode::forward;
  }
  void end_forward() noexcept override {
    t_region = parent_;
    parent_ = nullptr;
    mode_ = Mode::idle;
  }

  void begin_recompute() override {
    std::copy(std::begin(t_state.devices), std::end(t_state.devices), saved_.devices);
    saved_.depth = t_state.depth;
    saved_.cache = std::move(t_state.cache);
    t_state.cache.clear();
    saved_.region = t_region;
    saved_.overrides = t_frozen_overrides;
    saved_.audit = detail::exchange_audit(nullptr);
    std::copy(std::begin(devices_), std::end(devices_), t_state.devices);
    t_state.depth = depth_;
    t_region = this;
    t_frozen_overrides = overrides_;
    // The backward usually runs outside the forward's Fp8Autocast (docs/fp8.md's loop): without
    // this the recomputation ran the plain GEMM where the forward ran fp8.
    fp8_guard_.emplace(fp8_);
    mode_ = Mode::recompute;
    detail::refresh_precision_policy();
  }
  void end_recompute() noexcept override {
    std::copy(std::begin(saved_.devices), std::end(saved_.devices), t_state.devices);
    t_state.depth = saved_.depth;
    t_state.cache = std::move(saved_.cache);
    t_region = saved_.region;
    t_frozen_overrides = saved_.overrides;
    detail::exchange_audit(saved_.audit);
    fp8_guard_.reset();
    mode_ = Mode::idle;
    detail::refresh_precision_policy();
  }

  // The copy of fp32 parameter `t` for this region's current run.
  Tensor cast(const Tensor& t, DType dtype) {
    if (mode_ == Mode::recompute) {
      for (const Cast& c : casts_)
        if (c.source == t.impl() && c.version == t.version() && c.dtype == dtype) return c.copy;
      // The forward made no such cast: the graphs differ, which the checkpoint reports.
      return cache_lookup(t, dtype);
    }
    Tensor copy;
    if (parent_ != nullptr) {
      copy = parent_->cast(t, dtype);
    } else {
      GradModeGuard grad_mode(true);
      copy = cache_lookup(t, dtype);
    }
    casts_.push_back({t.impl(), t.version(), dtype, copy});
    return copy;
  }

 private:
  enum class Mode { idle, forward, recompute };
  struct Cast {
    const TensorImpl* source;  // alive: the copy's graph holds it
    uint32_t version;
    DType dtype;
    Tensor copy;
  };
  struct Saved {
    DeviceState devices[kNumDeviceTypes];
    int depth = 0;
    std::unordered_map<CacheKey, CacheEntry, CacheKeyHash> cache;
    AutocastRegion* region = nullptr;
    const std::atomic<int8_t>* overrides = nullptr;
    Audit* audit = nullptr;
  };

  DeviceState devices_[kNumDeviceTypes];
  int depth_;
  bool fp8_;                                // Fp8Autocast's state when the region began
  std::optional<Fp8Autocast> fp8_guard_;    // during a recomputation: that state
  std::atomic<int8_t> overrides_[kNumDeviceTypes * kNumOps];
  std::vector<Cast> casts_;
  Mode mode_ = Mode::idle;
  AutocastRegion* parent_ = nullptr;  // the enclosing region during this one's forward
  Saved saved_;
};

// A low-precision copy of `t`, from the region's cache when t is an fp32 leaf parameter.
Tensor cached_cast(const Tensor& t, DType dtype, const DeviceState& s) {
  const bool cacheable = s.cache && t.dtype() == DType::f32 && t.is_leaf() && t.requires_grad();
  if (!cacheable) return t.to(dtype);
  if (t_region != nullptr) return t_region->cast(t, dtype);
  return cache_lookup(t, dtype);
}

std::unique_ptr<PrecisionRegion> make_region() { return std::make_unique<AutocastRegion>(); }
[[maybe_unused]] const bool g_region_factory_installed = (set_precision_region_factory(&make_region), true);
}  // namespace

namespace {

// One input of an op of category c on `device`, as autocast casts it.
Tensor cast_for(Category c, const Tensor& t, DType widest, DeviceType device) {
  if (!t.defined() || !is_floating(t.dtype()) || t.dtype() == DType::f64) return t;
  const DeviceState& s = t_state.devices[static_cast<int>(device)];
  switch (c) {
    case Category::Lower:
      return t.dtype() == s.dtype ? t : cached_cast(t, s.dtype, s);
    case Category::FP32:
      return t.dtype() == DType::f32 ? t : t.to(DType::f32);
    case Category::Promote:
      return t.dtype() == widest || widest == DType::f64 ? t : t.to(widest);
    default:
      return t;
  }
}

}  // namespace

namespace {

// Once per process: an op autocast would run in low precision ran on CUDA tensors while autocast
// was enabled for the CPU only.
void warn_autocast_on_cpu_only() {
  static std::atomic<bool> warned{false};
  if (warned.exchange(true)) return;
  warn("amp::Autocast is enabled for the CPU only, and an op it would run in low precision ran on CUDA tensors, "
       "in their own dtype. Autocast's device type defaults to the CPU; for a model on a GPU write "
       "amp::Autocast(DType::f16, DeviceType::cuda) (or DType::bf16)");
}

// Casts an op's inputs as its category says, when autocast is on for their device. `widest` is the
// Promote dtype: ops' result_type for single ops, plain promotion over the floating inputs for list
// ops (cat, stack), as before the hook existed. With keep_first_narrow (an op whose kernel widens
// its first input itself, PrecisionPolicy::apply_widening_in_kernel), an f16/bf16 first input that
// FP32, or Promote to an fp32 widest dtype, would widen is left as it is; returns true then.
// category_of(device) gives the op's category; banned() throws for a Banned one. Built-in and
// user-defined ops both come through here.
template <typename CategoryOf, typename Banned>
bool cast_inputs(std::span<Tensor> inputs, bool list_op, bool keep_first_narrow, CategoryOf category_of,
                 Banned banned) {
  bool found = false;
  DeviceType device = DeviceType::cpu;
  DType widest = DType::f32;
  std::vector<const Tensor*> ptrs;
  ptrs.reserve(inputs.size());
  for (const Tensor& t : inputs) {
    ptrs.push_back(&t);
    if (!t.defined() || !is_floating(t.dtype())) continue;
    if (!found) device = t.device().type;
    if (list_op) widest = found ? promote_types(widest, t.dtype()) : t.dtype();
    found = true;
  }
  if (!found) return false;
  if (!is_autocast_enabled(device)) {
    // Autocast is on for another device type only (any_autocast_enabled): `Autocast(DType::bf16)`
    // means the CPU, so a GPU model under it silently stays in fp32. Said once per process. (The
    // other way round is deliberate: host-side work inside a GPU region.)
    if (device == DeviceType::cuda && category_of(device) == Category::Lower) warn_autocast_on_cpu_only();
    return false;
  }
  const Category c = category_of(device);
  if (c == Category::Banned) banned();
  if (c == Category::Passthrough) return false;
  if (!list_op) widest = result_type(ptrs, /*floating_only=*/true);
  const bool widens_to_fp32 = c == Category::FP32 || (c == Category::Promote && widest == DType::f32);
  const bool keep_first = keep_first_narrow && widens_to_fp32 && inputs[0].defined() &&
                          is_low_precision(inputs[0].dtype());
  for (size_t i = keep_first ? 1 : 0; i < inputs.size(); ++i) inputs[i] = cast_for(c, inputs[i], widest, device);
  return keep_first;
}

// Lets the thread's audit, if one records, observe a call with its inputs as the op computes on them.
void audit_call(std::string_view name, std::optional<OpId> op, std::span<Tensor> inputs, bool first_widened) {
  if (Audit* a = active_audit()) [[unlikely]] {
    std::vector<const Tensor*> ptrs;
    for (const Tensor& t : inputs) ptrs.push_back(&t);
    // A first input left narrow is computed on in fp32: that is the dtype the op ran in.
    a->observe(name, op, ptrs, first_widened ? std::optional<DType>(DType::f32) : std::nullopt);
  }
}

// The policy the ops see (ops/precision.h): autocast's casts, then the audit's observation of what
// the op will compute on. Installed on a thread while an Autocast guard or an Audit is open there.
class AmpPolicy final : public PrecisionPolicy {
 public:
  void apply(OpId op, std::span<Tensor> inputs) override { run(op, inputs, /*list_op=*/false, false); }
  void apply_list(OpId op, std::span<Tensor> inputs) override { run(op, inputs, /*list_op=*/true, false); }
  bool apply_widening_in_kernel(OpId op, std::span<Tensor> inputs) override {
    return run(op, inputs, /*list_op=*/false, /*keep_first_narrow=*/true);
  }
  Category category(OpId op, DeviceType device) const override {
    return any_autocast_enabled() && is_autocast_enabled(device) ? amp::category(op, device) : Category::Passthrough;
  }

 private:
  static bool run(OpId op, std::span<Tensor> inputs, bool list_op, bool keep_first_narrow) {
    if (inputs.empty()) return false;
    const bool kept = any_autocast_enabled() &&
                      cast_inputs(inputs, list_op, keep_first_narrow, [op](DeviceType d) { return amp::category(op, d); },
                                  [op] { throw_banned(op); });
    audit_call(op_name(op), op, inputs, kept);
    return kept;
  }
};

thread_local AmpPolicy t_policy;

}  // namespace

namespace detail {

void refresh_precision_policy() {
  const bool wanted = t_state.depth > 0 || open_audit() != nullptr;
  set_precision_policy(wanted ? &t_policy : nullptr);
}

void apply_custom(CustomOp op, std::span<Tensor> inputs) {
  const CustomOpInfo info = custom_op(op);
  if (any_autocast_enabled())
    cast_inputs(inputs, /*list_op=*/false, /*keep_first_narrow=*/false, [&info](DeviceType) { return info.category; },
                [&info] { throw_banned_custom(info.name); });
  audit_call(info.name, std::nullopt, inputs, false);
}

}  // namespace detail

}  // namespace precis::amp
