#include "core/strings.h"
#include "models/nn/module.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <numeric>
#include <ostream>
#include <set>
#include <sstream>
#include <string_view>
#include <typeinfo>
#include <unordered_set>

#include "autograd/grad_mode.h"

namespace precis::nn {

namespace {

using CloneMap = std::unordered_map<const Module*, std::shared_ptr<Module>>;
thread_local CloneMap* t_clone_map = nullptr;

// At registration the object is still being built and its size is unknown, so a member is only
// required to lie after the Module base (a class's own members follow its bases) and within this
// bound of it, which turns away a local variable. add() and clone<T>() check the exact extent
// (Note [Module tensor slots]).
constexpr std::ptrdiff_t kMaxMemberOffset = std::ptrdiff_t{1} << 20;

// The readable C++ name of a class.
std::string demangle(const std::type_info& type) {
  int status = 0;
  char* demangled = abi::__cxa_demangle(type.name(), nullptr, nullptr, &status);
  std::string name = (status == 0 && demangled) ? demangled : type.name();
  std::free(demangled);
  return name;
}

std::uintptr_t address(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

// The closest candidate within a third of the name's length (at least 2 edits), or "".
std::string closest(const std::string& name, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = std::max<size_t>(2, name.size() / 3) + 1;
  for (const auto& c : candidates) {
    const size_t d = edit_distance(name, c);
    if (d < best_d) { best_d = d; best = c; }
  }
  return best;
}

std::string join_name(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

// A common leading component that, removed from every checkpoint key, would match the model
// (a checkpoint saved from a wrapper: "module.", "model.", "bert.").
std::string prefix_hint(const std::vector<std::string>& unexpected, const std::set<std::string>& expected) {
  if (unexpected.empty()) return "";
  const auto dot = unexpected[0].find('.');
  if (dot == std::string::npos) return "";
  const std::string prefix = unexpected[0].substr(0, dot + 1);
  size_t hits = 0;
  for (const auto& k : unexpected) {
    if (k.rfind(prefix, 0) != 0) return "";
    hits += expected.count(k.substr(prefix.size()));
  }
  if (hits == 0) return "";
  return "\n  hint: the checkpoint's keys carry the prefix '" + prefix +
         "'; strip it (state_subset(dict, \"" + prefix + "\")) before loading";
}

}  // namespace

namespace detail {
std::shared_ptr<Module> clone_lookup(const Module* original) {
  if (t_clone_map == nullptr) return nullptr;
  auto it = t_clone_map->find(original);
  return it == t_clone_map->end() ? nullptr : it->second;
}
}  // namespace detail

// ---- construction -------------------------------------------------------------------------------

Module::Module(const Module& other)
    : training_(other.training_), params_(other.params_), buffers_(other.buffers_), owned_(other.owned_),
      copied_from_(&typeid(other)) {
  other.check_not_sliced();  // a copy of a sliced copy would hide the mismatch
  repoint_members(other);
  for (const ChildSlot& c : other.children_) {
    std::shared_ptr<Module> m = c.module;
    if (t_clone_map != nullptr) {
      if (auto it = t_clone_map->find(c.module.get()); it != t_clone_map->end()) {
        m = it->second;
      } else {
        m = c.clone(*c.module);
        t_clone_map->emplace(c.module.get(), m);
      }
    }
    children_.push_back({c.name, std::move(m), c.clone});
  }
}

Module::Module(Module&& other)
    : training_(other.training_), params_(std::move(other.params_)), buffers_(std::move(other.buffers_)),
      owned_(std::move(other.owned_)), children_(std::move(other.children_)), copied_from_(&typeid(other)) {
  other.check_not_sliced();
  repoint_members(other);
}

void Module::repoint_members(const Module& source) {
  // Unsigned arithmetic: a member's distance from the Module base, carried over to this object.
  // Dereferenced only after check_not_sliced() has seen that this object has the source's class.
  const std::uintptr_t from = address(&source), to = address(this);
  for (std::vector<TensorSlot>* slots : {&params_, &buffers_})
    for (TensorSlot& s : *slots)
      if (s.member != nullptr) s.member = reinterpret_cast<Tensor*>(to + (address(s.member) - from));
}

void Module::check_not_sliced() const {
  PRECIS_CHECK_T(StateError, copied_from_ == nullptr || typeid(*this) == *copied_from_, type_name(),
                 ": this module was copied or moved from a ", demangle(*copied_from_),
                 " (a sliced copy), so its registered tensor members are not where they were; copy a module "
                 "only as its own class (clone<", demangle(*copied_from_), ">())");
}

void Module::check_copy_layout(const std::type_info& as, size_t size, const char* what) const {
  check_not_sliced();
  PRECIS_CHECK_T(StateError, typeid(*this) == as, what, ": this module is a ", demangle(typeid(*this)),
                 " but would be copied as a ", demangle(as),
                 ", dropping the members the derived class adds (a sliced copy); copy it as its own class");
  // The complete object: its start (dynamic_cast<const void*>) and, as typeid(*this) == as, sizeof(as).
  const std::uintptr_t start = address(dynamic_cast<const void*>(this)), base = address(this);
  for (const std::vector<TensorSlot>* slots : {&params_, &buffers_})
    for (const TensorSlot& s : *slots) {
      if (s.member == nullptr) continue;
      const std::uintptr_t p = address(s.member);
      const bool inside = p >= start && p + sizeof(Tensor) <= start + size;
      const bool in_base = p + sizeof(Tensor) > base && p < base + sizeof(Module);
      PRECIS_CHECK_T(StateError, inside && !in_base, what, ": ", type_name(), "'s ",
                     slots == &params_ ? "parameter" : "buffer", " '", s.name,
                     "' was registered from a tensor that is not a data member of this ", type_name(),
                     "; register other tensors as rvalues (register_parameter(name, std::move(t))) so the "
                     "module owns them");
    }
}

Tensor Module::forward(const Tensor&) {
  PRECIS_CHECK_T(NotImplementedError, false, type_name(),
                 " has no single-tensor forward(x); call its own forward overload");
  return Tensor();
}

void Module::check_new_name(const std::string& name, const char* what) const {
  PRECIS_CHECK(!name.empty() && name.find('.') == std::string::npos, type_name(), ": ", what, " name '", name,
               "' must be non-empty and contain no '.'");
  auto taken = [&](const std::vector<TensorSlot>& slots) {
    return std::any_of(slots.begin(), slots.end(), [&](const TensorSlot& s) { return s.name == name; });
  };
  const bool child = std::any_of(children_.begin(), children_.end(), [&](const ChildSlot& c) { return c.name == name; });
  PRECIS_CHECK(!taken(params_) && !taken(buffers_) && !child, type_name(), ": cannot register ", what, " '", name,
               "': the name is already taken by a parameter, buffer or child of this module");
}

Tensor& Module::register_tensor(std::vector<TensorSlot>& slots, const std::string& name, Tensor* member, Tensor* value,
                                bool persistent, const char* what) {
  check_new_name(name, what);
  TensorSlot slot{name, nullptr, 0, persistent};
  if (member != nullptr) {
    // Distances as integers: comparing pointers into different objects is unspecified.
    const std::uintptr_t p = address(member), base = address(this);
    PRECIS_CHECK(p >= base + sizeof(Module) && p - base < static_cast<std::uintptr_t>(kMaxMemberOffset), type_name(),
                 ": register_", what, "('", name,
                 "', member) needs a data member of this module, declared in a class that lists nn::Module "
                 "before any other base; for any other tensor pass it as an rvalue (register_", what,
                 "(name, std::move(t))) so the module owns it");
    slot.member = member;
  } else {
    slot.owned_index = owned_.size();
    owned_.push_back(std::move(*value));
  }
  slots.push_back(slot);
  Tensor& t = slot_tensor(slots.back());
  if (&slots == &params_ && t.defined() && t.is_floating_point() && !t.requires_grad()) t.requires_grad_(true);
  return t;
}

Tensor& Module::register_parameter(const std::string& name, Tensor& member) {
  if (!member.defined()) return member;  // an absent optional parameter (bias = false)
  return register_tensor(params_, name, &member, nullptr, true, "parameter");
}
Tensor& Module::register_parameter(const std::string& name, Tensor&& value) {
  PRECIS_CHECK(value.defined(), type_name(), ": register_parameter('", name, "') of an undefined tensor");
  return register_tensor(params_, name, nullptr, &value, true, "parameter");
}
Tensor& Module::register_buffer(const std::string& name, Tensor& member, bool persistent) {
  if (!member.defined()) return member;
  return register_tensor(buffers_, name, &member, nullptr, persistent, "buffer");
}
Tensor& Module::register_buffer(const std::string& name, Tensor&& value, bool persistent) {
  PRECIS_CHECK(value.defined(), type_name(), ": register_buffer('", name, "') of an undefined tensor");
  return register_tensor(buffers_, name, nullptr, &value, persistent, "buffer");
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> module,
                       std::shared_ptr<Module> (*clone)(const Module&)) {
  check_new_name(name, "child module");
  PRECIS_CHECK(module.get() != this, type_name(), ": a module cannot be its own child ('", name, "')");
  children_.push_back({name, std::move(module), clone});
}

Tensor& Module::slot_tensor(const TensorSlot& slot) {
  if (slot.member == nullptr) return owned_[slot.owned_index];
  check_not_sliced();
  return *slot.member;
}
const Tensor& Module::slot_tensor(const TensorSlot& slot) const {
  if (slot.member == nullptr) return owned_[slot.owned_index];
  check_not_sliced();
  return *slot.member;
}

// ---- traversal ----------------------------------------------------------------------------------

void Module::collect(std::vector<std::pair<std::string, const Module*>>& out, const std::string& prefix,
                     std::vector<const Module*>& seen) const {
  if (std::find(seen.begin(), seen.end(), this) != seen.end()) return;
  seen.push_back(this);
  out.emplace_back(prefix, this);
  for (const ChildSlot& c : children_) c.module->collect(out, join_name(prefix, c.name), seen);
}

std::vector<std::pair<std::string, const Module*>> Module::named_modules() const {
  std::vector<std::pair<std::string, const Module*>> out;
  std::vector<const Module*> seen;
  collect(out, "", seen);
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out;
  for (auto& [name, m] : static_cast<const Module*>(this)->named_modules())
    out.emplace_back(name, const_cast<Module*>(m));  // the tree is ours: this call is non-const
  return out;
}

Module& Module::apply(const std::function<void(Module&)>& fn) {
  std::unordered_set<const Module*> seen;
  std::function<void(Module&)> visit = [&](Module& m) {
    if (!seen.insert(&m).second) return;  // a shared child once, as named_modules lists it
    for (const auto& child : m.children()) visit(*child);
    fn(m);
  };
  visit(*this);
  return *this;
}

std::ostream& operator<<(std::ostream& os, const Module& m) { return os << m.str(); }

namespace {
std::vector<Tensor> tensors_of(const std::vector<std::pair<std::string, Tensor>>& named) {
  std::vector<Tensor> out;
  out.reserve(named.size());
  for (const auto& [name, t] : named) out.push_back(t);
  return out;
}
}  // namespace

std::vector<std::pair<std::string, Tensor>> Module::named_slots(std::vector<TensorSlot> Module::*slots,
                                                                bool recurse) const {
  std::vector<std::pair<std::string, Tensor>> out;
  std::unordered_set<const TensorImpl*> seen;
  auto modules = recurse ? named_modules() : std::vector<std::pair<std::string, const Module*>>{{"", this}};
  for (const auto& [prefix, m] : modules)
    for (const TensorSlot& s : m->*slots) {
      const Tensor& t = m->slot_tensor(s);
      if (t.defined() && seen.insert(t.impl()).second) out.emplace_back(join_name(prefix, s.name), t);
    }
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters(bool recurse) const {
  return named_slots(&Module::params_, recurse);
}

std::vector<Tensor> Module::parameters(bool recurse) const { return tensors_of(named_parameters(recurse)); }

std::vector<std::pair<std::string, Tensor>> Module::named_buffers(bool recurse) const {
  return named_slots(&Module::buffers_, recurse);
}

std::vector<Tensor> Module::buffers(bool recurse) const { return tensors_of(named_buffers(recurse)); }

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_children() const {
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> out;
  for (const ChildSlot& c : children_) out.emplace_back(c.name, c.module);
  return out;
}

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (const ChildSlot& c : children_) out.push_back(c.module);
  return out;
}

template <typename Fn>
void Module::for_each_tensor_slot(Fn&& fn) {
  for (auto& [prefix, m] : named_modules()) {
    for (const TensorSlot& s : m->params_) fn(*m, m->slot_tensor(s));
    for (const TensorSlot& s : m->buffers_) fn(*m, m->slot_tensor(s));
  }
}

// ---- modes and placement ------------------------------------------------------------------------

Module& Module::train(bool on) {
  training_ = on;
  for (ChildSlot& c : children_) c.module->train(on);
  return *this;
}

namespace {
// Converts the tensor of a slot to convert(t) in place (TensorImpl::set_data): the TensorImpl stays,
// so every handle to it (an optimizer's, a user's) sees the new dtype or device, as PyTorch's
// module.to() keeps its Parameter objects. The gradient is converted too. A tensor in several slots
// (tied) is one TensorImpl, converted at its first slot. A slot holding a non-leaf (computed by a
// recorded op, so a graph refers to its dtype) is replaced by a new leaf instead.
template <typename Convert>
void convert_slot(Tensor& t, Convert&& convert) {
  Tensor n = convert(t.detach());
  Tensor g = t.grad();
  if (!t.is_leaf()) {
    if (t.requires_grad()) n.requires_grad_(true);
    t = n;
  } else {
    t.impl()->set_data(*n.impl());
  }
  if (g.defined()) t.set_grad(convert(g));
}
}  // namespace

Module& Module::to(Device device) {
  NoGradGuard no_grad;
  for_each_tensor_slot([&](Module&, Tensor& t) {
    if (!t.defined() || t.device() == device) return;
    convert_slot(t, [&](const Tensor& x) { return x.to(device); });
  });
  return *this;
}

Module& Module::to(DType dtype) {
  PRECIS_CHECK_DTYPE(is_floating(dtype), type_name(), ".to(", dtype_name(dtype),
                     "): modules convert to a floating dtype (f32, f64, f16, bf16)");
  NoGradGuard no_grad;
  std::unordered_set<const TensorImpl*> done;  // a tied tensor follows its first slot's module
  for_each_tensor_slot([&](Module& m, Tensor& t) {
    if (!t.defined() || !t.is_floating_point() || !done.insert(t.impl()).second) return;
    const DType target = (m.keep_fp32_params() && is_low_precision(dtype)) ? DType::f32 : dtype;
    if (t.dtype() == target) return;
    convert_slot(t, [&](const Tensor& x) { return x.to(target); });
  });
  return *this;
}

void Module::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (Tensor& p : parameters()) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (set_to_none) p.set_grad(Tensor());
    else g.zero_();
  }
}

// ---- state --------------------------------------------------------------------------------------

std::vector<std::pair<std::string, Tensor>> Module::state_entries() const {
  std::vector<std::pair<std::string, Tensor>> out;
  // Recurse without deduplicating modules: a shared child appears under every path (PyTorch).
  std::function<void(const Module&, const std::string&)> rec = [&](const Module& m, const std::string& prefix) {
    for (const TensorSlot& s : m.params_)
      if (const Tensor& t = m.slot_tensor(s); t.defined()) out.emplace_back(join_name(prefix, s.name), t);
    for (const TensorSlot& s : m.buffers_)
      if (const Tensor& t = m.slot_tensor(s); t.defined() && s.persistent) out.emplace_back(join_name(prefix, s.name), t);
    for (const ChildSlot& c : m.children_) rec(*c.module, join_name(prefix, c.name));
  };
  rec(*this, "");
  return out;
}

StateDict Module::state_dict() const {
  StateDict out;
  for (const auto& [name, t] : state_entries()) out[name] = t.detach();
  return out;
}

namespace {
// A one-element 1-D value for a 0-d tensor: PyTorch's load accepts it (0-d tensors were saved so
// before PyTorch 0.4).
bool one_element_for_0d(const Tensor& value, const Tensor& own) {
  return own.dim() == 0 && value.dim() == 1 && value.numel() == 1;
}
}  // namespace

LoadResult Module::load_state_dict(const StateDict& dict, bool strict) {
  const StateDict own = state_dict();
  // A tied tensor (one TensorImpl under several names) is loaded when any of its names is present:
  // checkpoints that store tied weights once (Hugging Face) load strictly.
  std::unordered_map<const TensorImpl*, std::vector<std::string>> aliases;
  std::map<std::string, const TensorImpl*> impl_of;
  for (const auto& [name, t] : state_entries()) {
    aliases[t.impl()].push_back(name);
    impl_of[name] = t.impl();
  }
  auto present = [&](const std::string& key) {
    for (const auto& alias : aliases[impl_of[key]])
      if (dict.count(alias)) return true;
    return false;
  };
  LoadResult result;
  std::vector<std::string> shape_errors;
  std::vector<std::string> own_keys, dict_keys;
  for (const auto& [k, t] : own) own_keys.push_back(k);
  for (const auto& [k, t] : dict) dict_keys.push_back(k);
  std::set<std::string> optional;
  for (const auto& [prefix, m] : named_modules())
    for (const auto& name : m->optional_state()) optional.insert(prefix.empty() ? name : prefix + "." + name);
  for (const auto& k : own_keys)
    if (!present(k) && !optional.count(k)) result.missing_keys.push_back(k);
  for (const auto& k : dict_keys)
    if (!own.count(k)) result.unexpected_keys.push_back(k);
  for (const auto& [k, t] : own) {
    auto it = dict.find(k);
    if (it == dict.end()) continue;
    PRECIS_CHECK(it->second.defined(), type_name(), ".load_state_dict: entry '", k, "' is an undefined tensor");
    if (it->second.sizes() != t.sizes() && !one_element_for_0d(it->second, t))
      shape_errors.push_back(k + ": checkpoint " + shape_str(it->second.sizes()) + ", model " + shape_str(t.sizes()));
  }
  const bool fail = !shape_errors.empty() || (strict && !result.ok());
  if (fail) {
    std::ostringstream msg;
    msg << type_name() << ".load_state_dict" << (strict ? " (strict)" : "") << ": ";
    std::vector<std::string> counts;
    if (strict && !result.missing_keys.empty())
      counts.push_back(std::to_string(result.missing_keys.size()) + " missing key" +
                       (result.missing_keys.size() > 1 ? "s" : ""));
    if (strict && !result.unexpected_keys.empty())
      counts.push_back(std::to_string(result.unexpected_keys.size()) + " unexpected key" +
                       (result.unexpected_keys.size() > 1 ? "s" : ""));
    if (!shape_errors.empty())
      counts.push_back(std::to_string(shape_errors.size()) + " shape mismatch" + (shape_errors.size() > 1 ? "es" : ""));
    for (size_t i = 0; i < counts.size(); ++i) msg << (i ? ", " : "") << counts[i];
    if (strict) {
      for (const auto& k : result.missing_keys) {
        msg << "\n  missing in the checkpoint: " << k;
        if (auto c = closest(k, result.unexpected_keys); !c.empty()) msg << " (did you mean '" << c << "'?)";
      }
      for (const auto& k : result.unexpected_keys) {
        msg << "\n  unexpected (not in the model): " << k;
        if (auto c = closest(k, result.missing_keys); !c.empty()) msg << " (did you mean '" << c << "'?)";
      }
    }
    for (const auto& s : shape_errors) msg << "\n  shape mismatch: " << s;
    if (strict) msg << prefix_hint(result.unexpected_keys, std::set<std::string>(own_keys.begin(), own_keys.end()));
    if (strict && !result.ok())
      msg << "\n  (load_state_dict(dict, /*strict=*/false) loads the matching keys and returns the others)";
    // Shapes are the only problem when nothing is missing or unexpected, or when those do not count.
    if (!strict || result.ok()) PRECIS_CHECK_SHAPE(false, msg.str());
    PRECIS_CHECK(false, msg.str());
  }
  NoGradGuard no_grad;
  // In module order, as PyTorch copies: a tied tensor whose names hold different values in the
  // dict ends with the value of its last name in that order (name order would pick another).
  for (const auto& [k, t] : state_entries()) {
    auto it = dict.find(k);
    if (it == dict.end()) continue;
    Tensor dst = t;
    dst.copy_(one_element_for_0d(it->second, t) ? it->second.reshape({}) : it->second);
  }
  return result;
}

// ---- clone --------------------------------------------------------------------------------------

Module::CloneSession::CloneSession(const Module& original) : previous_(t_clone_map) {
  std::vector<const Module*> seen;
  std::function<void(const Module&, const std::string&)> rec = [&](const Module& m, const std::string& prefix) {
    for (const ChildSlot& c : m.children_) {
      if (std::find(seen.begin(), seen.end(), c.module.get()) != seen.end()) continue;
      seen.push_back(c.module.get());
      originals_.emplace_back(join_name(prefix, c.name), c.module);
      rec(*c.module, join_name(prefix, c.name));
    }
  };
  rec(original, "");
  for (const auto& o : originals_) counts_.push_back(o.second.use_count());
  t_clone_map = new CloneMap();
}

Module::CloneSession::~CloneSession() {
  if (t_clone_map != previous_) {
    delete t_clone_map;
    t_clone_map = static_cast<CloneMap*>(previous_);
  }
}

void Module::CloneSession::finish(Module& copy) {
  delete t_clone_map;
  t_clone_map = static_cast<CloneMap*>(previous_);
  for (size_t i = 0; i < originals_.size(); ++i) {
    PRECIS_CHECK_T(StateError, originals_[i].second.use_count() == counts_[i], "clone<", copy.type_name(),
                   ">: the copy still points at the original's child module '", originals_[i].first,
                   "' (and so would share its parameters). Keep child modules in nn::Child<M> members, which "
                   "clone relinks; a std::shared_ptr member cannot be redirected.");
  }
  NoGradGuard no_grad;
  // Old tensor -> its copy; holding the old tensors keeps their addresses from being reused.
  std::unordered_map<const TensorImpl*, std::pair<Tensor, Tensor>> memo;
  copy.for_each_tensor_slot([&](Module&, Tensor& t) {
    if (!t.defined()) return;
    if (auto it = memo.find(t.impl()); it != memo.end()) { t = it->second.second; return; }
    Tensor n = t.detach().clone();
    if (t.requires_grad()) n.requires_grad_(true);
    memo.emplace(t.impl(), std::make_pair(t, n));
    t = n;
  });
}

// ---- description --------------------------------------------------------------------------------

std::string Module::type_name() const {
  std::string name = demangle(typeid(*this));
  // Drop namespaces (but not inside template arguments).
  const auto angle = name.find('<');
  const auto colon = name.rfind("::", angle == std::string::npos ? std::string::npos : angle);
  if (colon != std::string::npos) name = name.substr(colon + 2);
  return name;
}

void Module::str_into(std::string& out, int indent) const {
  out += type_name() + "(" + extra_repr();
  if (!children_.empty()) {
    out += "\n";
    for (const ChildSlot& c : children_) {
      out += std::string(indent + 2, ' ') + "(" + c.name + "): ";
      c.module->str_into(out, indent + 2);
      out += "\n";
    }
    out += std::string(indent, ' ');
  }
  out += ")";
}

std::string Module::str() const {
  std::string out;
  str_into(out, 0);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const auto& [name, t] : named_parameters()) n += t.numel();
  return n;
}

}  // namespace precis::nn
