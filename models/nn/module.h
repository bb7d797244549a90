#pragma once
// nn::Module: the base of every layer and model. A module owns named parameters and buffers and
// named child modules, and gives them PyTorch-compatible dotted names ("layer1.0.conv1.weight"),
// so checkpoints map 1:1 to PyTorch's state_dict keys.
//
//   class Block : public nn::Module {
//    public:
//     Block(int64_t c) : conv_(add("conv", nn::Conv2d(c, c, 3, {.padding = 1}))),
//                        bn_(add("bn", nn::BatchNorm2d(c))) {}
//     Tensor forward(const Tensor& x) override { return relu(bn_(conv_(x))); }
//    private:
//     nn::Child<nn::Conv2d> conv_;
//     nn::Child<nn::BatchNorm2d> bn_;
//   };
//
// Note [Module tensor slots]: a module's tensors are the module's own data members
// (`Tensor weight;` registered with register_parameter("weight", weight)). The module keeps a
// pointer to each member, so clone() writes the copy's tensor straight into the copy's member (and
// to(dtype) / to(device) convert the member's tensor in place): `weight` always is the registered
// tensor, and there is no second table to go stale.
// A copy or move re-points those pointers at the copy's members: the same distance from the Module
// base, which holds only when the copy has the same class as the original. So every copy is
// checked, and misuse is a precis::Error rather than a write through a stray pointer:
//   - add() and clone<T>() copy a module of exactly class T (typeid) whose registered members lie
//     inside its own sizeof(T) bytes, else StateError (a sliced copy: clone<Base>() of a Derived;
//     a "member" that belongs to another object);
//   - any other copy or move (a user's `Base b = derived;`) remembers the class it was made from,
//     and using its tensors when its own class differs throws StateError.
// Registration itself checks what it can before the object is complete: the member must lie after
// the Module base (a class's own members follow its bases, so put nn::Module before any other base
// that has tensor members) and near it (not a local variable).
// A tensor without a member is registered as an rvalue (register_parameter("w", randn(...)));
// the module then owns its slot and returns a reference to it.
//
// Note [Child handles]: add() returns a std::shared_ptr<M>. Keep it in an nn::Child<M> member:
// clone() relinks Child members to the copy's own children. A std::shared_ptr member also works
// for everything but clone<T>(), which detects it and throws (a copied std::shared_ptr would keep
// pointing at the original's child).
//
// to(dtype) and to(device) convert each tensor in place (TensorImpl::set_data: the same tensor
// object with new data, as PyTorch's module.to() keeps its Parameter objects), so a handle held
// before (an optimizer's, a user's) sees the new dtype and device. load_state_dict copies into the
// existing tensors in place. Both can run at any time; an optimizer converts its state to follow.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tensor/state_dict.h"
#include "tensor/tensor.h"

namespace precis::nn {

class Module;

namespace detail {
/// During clone(): the copy of an original child module (so Child members and shared children
/// point into the copy), or null when not cloning or the module is not part of the cloned tree.
std::shared_ptr<Module> clone_lookup(const Module* original);
}  // namespace detail

/// A typed handle to a child module, kept as a data member: `nn::Child<nn::Conv2d> conv1_;`.
/// Behaves as a std::shared_ptr<M> (->, *, bool) and calls the child's forward with (): `conv1_(x)`.
/// Copying a Child inside Module::clone() points the copy at the cloned child (Note [Child handles]).
template <typename M>
class Child {
 public:
  Child() = default;
  /// Holds `module` (implicit, so that `fc = add("fc", ...)` works).
  Child(std::shared_ptr<M> module) : ptr_(std::move(module)) {}  // NOLINT: implicit from add()
  /// Copies; inside clone() the copy points at the cloned child.
  Child(const Child& other) : ptr_(remap(other.ptr_)) {}
  /// Moves the handle.
  Child(Child&&) noexcept = default;
  /// Copies the handle (shares the child).
  Child& operator=(const Child&) = default;
  /// Moves the handle.
  Child& operator=(Child&&) noexcept = default;
  /// Points the handle at `module`.
  Child& operator=(std::shared_ptr<M> module) { ptr_ = std::move(module); return *this; }

  /// The child module.
  M* operator->() const { return ptr_.get(); }
  /// The child module.
  M& operator*() const { return *ptr_; }
  /// The child module (null when unset).
  M* get() const { return ptr_.get(); }
  /// The shared pointer to the child.
  const std::shared_ptr<M>& ptr() const { return ptr_; }
  /// Whether a child is held.
  explicit operator bool() const { return ptr_ != nullptr; }
  /// The child's forward: `conv1_(x)`, `layer_(x, mask)`.
  template <typename... Args>
  decltype(auto) operator()(Args&&... args) const {
    PRECIS_CHECK(ptr_ != nullptr, "nn::Child: calling an empty child handle (the optional child was never added)");
    return ptr_->forward(std::forward<Args>(args)...);
  }

 private:
  static std::shared_ptr<M> remap(const std::shared_ptr<M>& p) {
    if (!p) return p;
    if (std::shared_ptr<Module> copy = detail::clone_lookup(p.get())) return std::static_pointer_cast<M>(copy);
    return p;
  }
  std::shared_ptr<M> ptr_;
};

/// Missing and unexpected keys of a non-strict load_state_dict (PyTorch's _IncompatibleKeys).
struct LoadResult {
  std::vector<std::string> missing_keys;     ///< the module's keys the dict lacked
  std::vector<std::string> unexpected_keys;  ///< the dict's keys the module does not have
  /// True when the dict matched exactly.
  bool ok() const { return missing_keys.empty() && unexpected_keys.empty(); }
};

/// The base of every layer and model, as torch.nn.Module: registered parameters, buffers and
/// children, traversal, train/eval modes, placement and casting, state_dict and clone.
class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  // Moving re-points the member slots at the new object (Note [Module tensor slots]). Assignment
  // is not supported: a module is built once and then changed through its methods.
  /// Moves the module; its tensor slots point into the new object.
  Module(Module&& other);
  Module& operator=(const Module&) = delete;
  Module& operator=(Module&&) = delete;

  // ---- forward --------------------------------------------------------------------------------
  /// The single-tensor forward pass (layers, Sequential, ResNet). Modules with other inputs
  /// define their own forward overloads; this one then throws NotImplementedError.
  virtual Tensor forward(const Tensor& x);
  /// forward(x), as calling a torch module.
  Tensor operator()(const Tensor& x) { return forward(x); }

  // ---- registration (call from the constructor) -------------------------------------------------
  /// Registers the data member `member` as parameter `name` (Note [Module tensor slots]). Floating
  /// parameters are made to require grad. `member` may be undefined (an absent optional parameter
  /// is simply not registered: PyTorch's bias=False). Returns `member`.
  Tensor& register_parameter(const std::string& name, Tensor& member);
  /// Registers a tensor the module owns (no data member) as parameter `name`; returns its slot.
  Tensor& register_parameter(const std::string& name, Tensor&& value);
  /// Buffers: state that is not trained (running statistics). Persistent buffers are part of
  /// state_dict; non-persistent ones (cached masks) only follow to().
  Tensor& register_buffer(const std::string& name, Tensor& member, bool persistent = true);
  /// Registers a buffer the module owns (no data member); returns its slot.
  Tensor& register_buffer(const std::string& name, Tensor&& value, bool persistent = true);

  /// Registers `module` (moved into a shared_ptr) as child `name` and returns the typed pointer;
  /// keep it in an nn::Child<M> member. Only rvalues: add("conv1", nn::Conv2d(...)) or
  /// add(name, std::move(m)).
  template <typename M>
  std::shared_ptr<std::remove_cvref_t<M>> add(const std::string& name, M&& module) {
    static_assert(!std::is_lvalue_reference_v<M>,
                  "Module::add takes the module by value: write add(\"name\", nn::Conv2d(...)) or "
                  "add(\"name\", std::move(module)). To share an existing module, pass a std::shared_ptr.");
    using T = std::remove_cvref_t<M>;
    static_assert(std::is_base_of_v<Module, T>, "Module::add: the child must derive from nn::Module");
    static_cast<const Module&>(module).check_copy_layout(typeid(T), sizeof(T), "Module::add");
    auto ptr = std::make_shared<T>(std::move(module));
    add_child(name, ptr, &clone_as<T>);
    return ptr;
  }
  /// Registers an existing module (it may be shared with another parent; clone keeps the sharing
  /// within the cloned tree).
  template <typename T>
  std::shared_ptr<T> add(const std::string& name, std::shared_ptr<T> module) {
    static_assert(std::is_base_of_v<Module, T>, "Module::add: the child must derive from nn::Module");
    PRECIS_CHECK(module != nullptr, "Module::add('", name, "'): null module");
    add_child(name, module, &clone_as<T>);
    return module;
  }

  // ---- traversal (PyTorch's order: a module's own tensors, then its children depth-first) ------
  /// Parameters under dotted names; a tensor registered twice (tied weights) appears once, under
  /// its first name, as PyTorch's named_parameters().
  std::vector<std::pair<std::string, Tensor>> named_parameters(bool recurse = true) const;
  /// The tensors of named_parameters(), in the same order.
  std::vector<Tensor> parameters(bool recurse = true) const;
  /// Buffers (persistent or not), deduplicated as named_parameters.
  std::vector<std::pair<std::string, Tensor>> named_buffers(bool recurse = true) const;
  /// The tensors of named_buffers(), in the same order.
  std::vector<Tensor> buffers(bool recurse = true) const;
  /// Direct children in registration order.
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const;
  /// The modules of named_children(), in the same order.
  std::vector<std::shared_ptr<Module>> children() const;
  /// This module (name "") and every descendant, each once, depth-first in registration order.
  /// The root is returned as a non-owning pointer.
  std::vector<std::pair<std::string, Module*>> named_modules();
  /// named_modules() of a const module.
  std::vector<std::pair<std::string, const Module*>> named_modules() const;
  /// torch.nn.Module.apply: calls fn on every descendant (each once, children before their
  /// parent) and then on this module, e.g. to initialise every Linear's weights. Returns *this.
  Module& apply(const std::function<void(Module&)>& fn);

  // ---- modes and placement ----------------------------------------------------------------------
  /// Training mode (BatchNorm batch statistics, dropout on) for this module and its descendants.
  virtual Module& train(bool on = true);
  /// train(false): evaluation mode for this module and its descendants.
  Module& eval() { return train(false); }
  /// Whether this module is in training mode.
  bool is_training() const { return training_; }

  /// Moves every parameter and buffer to `device`, in place: each tensor object stays and holds
  /// its new data (an optimizer built before keeps working). Gradients move too.
  Module& to(Device device);
  /// Casts floating parameters and buffers to `dtype` in place (as to(Device)); integer buffers
  /// are untouched. Modules whose keep_fp32_params() is true (the normalisation layers) keep fp32
  /// tensors when dtype is f16 or bf16: docs/design/precision.md's low-precision model mode. Gradients are cast
  /// too. Tied tensors stay tied (and follow the first module that holds them).
  Module& to(DType dtype);
  /// True for modules whose parameters and buffers stay fp32 in a low-precision model: BatchNorm,
  /// LayerNorm and GroupNorm (their statistics and affine parameters are computed in fp32 anyway;
  /// bf16/f16 weights near 1 would round every small update away).
  virtual bool keep_fp32_params() const { return false; }

  /// Clears the gradients of every parameter: dropped (set_to_none, default) or zeroed in place.
  void zero_grad(bool set_to_none = true);

  // ---- state ------------------------------------------------------------------------------------
  /// Parameters and persistent buffers under their dotted names (tied tensors under every name, as
  /// PyTorch). The tensors are detached handles sharing the module's data: copy them to keep a
  /// snapshot. Save with save_state_dict(path, d) (tensor/state_dict.h).
  StateDict state_dict() const;
  /// Copies `dict` into the module's tensors in place (converting dtype and device; no autograd).
  /// Every problem is reported in one error: missing keys, unexpected keys (strict only) and shape
  /// mismatches (always), each with "did you mean" suggestions among near names, and a hint when
  /// the keys differ by a common prefix ("module."). A tied tensor counts as present when any of
  /// its names is in `dict` (checkpoints that store tied weights once), an optional_state() entry
  /// may be absent, and a 0-d tensor takes a one-element 1-D value (PyTorch's compatibility rules).
  /// Throws ValueError (ShapeError when shapes are the only problem). Non-strict loads return
  /// what was missing or unexpected.
  LoadResult load_state_dict(const StateDict& dict, bool strict = true);

  /// A deep copy (new parameters, buffers and child modules; same names, values, requires_grad,
  /// modes; tied tensors and shared children stay shared within the copy). T is this module's
  /// class (or a base of it). Child members must be nn::Child (Note [Child handles]).
  template <typename T>
  std::shared_ptr<T> clone() const {
    static_assert(std::is_base_of_v<Module, T>, "clone<T>: T must derive from nn::Module");
    static_assert(std::is_copy_constructible_v<T>, "clone<T>: T must be copy-constructible");
    const T* self = dynamic_cast<const T*>(this);
    PRECIS_CHECK(self != nullptr, "clone<T>: this module is a ", type_name(), ", not the T requested");
    check_copy_layout(typeid(T), sizeof(T), "clone<T>");
    CloneSession session(*this);
    auto copy = std::make_shared<T>(*self);
    session.finish(*copy);
    return copy;
  }

  // ---- description ------------------------------------------------------------------------------
  /// The class name ("Conv2d", "BasicBlock"): from the C++ type unless overridden.
  virtual std::string type_name() const;
  /// The arguments shown in str() ("3, 16, kernel_size=[3, 3], stride=[1, 1]").
  virtual std::string extra_repr() const { return ""; }
  /// Names of this module's own state entries a checkpoint may lack: load_state_dict keeps their
  /// values and does not count them missing, even strictly (BatchNorm's num_batches_tracked, which
  /// PyTorch checkpoints before 0.4.1 lack and PyTorch loads alike).
  virtual std::vector<std::string> optional_state() const { return {}; }
  /// A PyTorch-style printout of the module tree.
  std::string str() const;
  /// Number of parameter elements (each tied tensor once).
  int64_t num_parameters() const;

 protected:
  // Copying is how clone() builds the copy (Note [Child handles]); outside clone() a copy shares
  // tensors and children with the original (as copying a Tensor shares data).
  /// Copies for clone(); the copy shares tensors and children until clone() replaces them.
  Module(const Module& other);

 private:
  struct TensorSlot {
    std::string name;
    Tensor* member = nullptr;  // the data member; nullptr: an owned tensor, owned_[owned_index]
    size_t owned_index = 0;
    bool persistent = true;
  };
  struct ChildSlot {
    std::string name;
    std::shared_ptr<Module> module;
    std::shared_ptr<Module> (*clone)(const Module&);
  };
  template <typename T>
  static std::shared_ptr<Module> clone_as(const Module& m) {
    m.check_copy_layout(typeid(T), sizeof(T), "clone");
    return std::make_shared<T>(static_cast<const T&>(m));
  }

  /// Records the original tree's child use counts, sets the thread's clone map; finish() deep-copies
  /// the copy's tensors and checks that no member still points into the original.
  class CloneSession {
   public:
    explicit CloneSession(const Module& original);
    ~CloneSession();
    CloneSession(const CloneSession&) = delete;
    CloneSession& operator=(const CloneSession&) = delete;
    void finish(Module& copy);

   private:
    std::vector<std::pair<std::string, std::shared_ptr<Module>>> originals_;  // every child in the tree
    std::vector<long> counts_;
    void* previous_;
  };

  void add_child(const std::string& name, std::shared_ptr<Module> module, std::shared_ptr<Module> (*clone)(const Module&));
  void check_new_name(const std::string& name, const char* what) const;
  Tensor& register_tensor(std::vector<TensorSlot>& slots, const std::string& name, Tensor* member, Tensor* value,
                          bool persistent, const char* what);
  // Throws StateError unless this module is exactly of class `as` and every member slot lies in its
  // `size` bytes: a copy made as `as` then re-points the slots correctly.
  void check_copy_layout(const std::type_info& as, size_t size, const char* what) const;
  // Throws StateError when this module was copied or moved from another class (a sliced copy).
  void check_not_sliced() const;
  // After a copy or move from `source`: point the member slots at this object's members.
  void repoint_members(const Module& source);
  Tensor& slot_tensor(const TensorSlot& slot);
  const Tensor& slot_tensor(const TensorSlot& slot) const;
  // Calls fn(slot_tensor) for every parameter and buffer slot of every module in the tree.
  template <typename Fn>
  void for_each_tensor_slot(Fn&& fn);
  void collect(std::vector<std::pair<std::string, const Module*>>& out, const std::string& prefix,
               std::vector<const Module*>& seen) const;
  void str_into(std::string& out, int indent) const;
  // (name, live tensor) of every parameter and persistent buffer, all names of tied tensors.
  std::vector<std::pair<std::string, Tensor>> state_entries() const;
  // (qualified name, tensor) of the defined slots in `slots` (params_ or buffers_) of this module,
  // or of every module in the tree when `recurse`; a tensor held in two slots is listed once.
  std::vector<std::pair<std::string, Tensor>> named_slots(std::vector<TensorSlot> Module::*slots, bool recurse) const;

  bool training_ = true;
  std::vector<TensorSlot> params_;
  std::vector<TensorSlot> buffers_;
  std::deque<Tensor> owned_;  // tensors of owned slots (a deque: references stay valid)
  std::vector<ChildSlot> children_;
  // The class of the module this one was copied or moved from (null for an original): the member
  // slots were re-pointed for that class's layout.
  const std::type_info* copied_from_ = nullptr;
};

/// Writes m.str(), the module tree as PyTorch prints it: `std::cout << model`.
std::ostream& operator<<(std::ostream& os, const Module& m);

}  // namespace precis::nn
