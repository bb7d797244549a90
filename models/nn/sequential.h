#pragma once
// nn::Sequential (a chain of single-tensor modules, children named "0", "1", ...) and
// nn::ModuleList (an indexed list of modules with no forward of its own), as torch.nn.
#include <memory>
#include <type_traits>
#include <vector>

#include "autograd/checkpoint.h"
#include "models/nn/module.h"

namespace precis::nn {

namespace detail {
/// `m`, the module at index or key `where` of `container`, as M; ValueError naming both when it
/// is another type.
template <typename M, typename Where>
M& module_as(Module& m, const char* container, const Where& where) {
  auto* p = dynamic_cast<M*>(&m);
  PRECIS_CHECK(p != nullptr, container, "::at<T>(", where, "): the module there is a ", m.type_name());
  return *p;
}
}  // namespace detail

/// torch.nn.Sequential: forward(x) feeds x through the children in order, each taking and returning
/// one tensor. Children are named "0", "1", ... as in PyTorch, so state_dict keys match
/// ("features.0.weight").
class Sequential : public Module {
 public:
  Sequential() = default;
  /// nn::Sequential{nn::Conv2d(...), nn::BatchNorm2d(c), nn::ReLU()}: modules by value (rvalues).
  template <typename... M>
    requires(sizeof...(M) >= 1 && (std::is_base_of_v<Module, std::remove_cvref_t<M>> && ...) &&
             !(sizeof...(M) == 1 && (std::is_same_v<std::remove_cvref_t<M>, Sequential> && ...)))
  explicit Sequential(M&&... modules) {
    static_assert((!std::is_lvalue_reference_v<M> && ...),
                  "nn::Sequential takes modules by value: nn::Sequential{nn::Linear(4, 8), std::move(m)}");
    (push_back(std::move(modules)), ...);
  }

  /// Appends a module under the next index; returns the typed pointer.
  template <typename M>
  std::shared_ptr<std::remove_cvref_t<M>> push_back(M&& module) {
    static_assert(!std::is_lvalue_reference_v<M>, "nn::Sequential::push_back takes the module by value (std::move it)");
    auto ptr = add(std::to_string(modules_.size()), std::move(module));
    modules_.push_back(ptr.get());
    return ptr;
  }
  /// Appends an existing module under the next index, shared with whoever else holds it (as
  /// Module::add of a std::shared_ptr); returns it.
  template <typename M>
  std::shared_ptr<M> push_back(std::shared_ptr<M> module) {
    auto ptr = add(std::to_string(modules_.size()), std::move(module));
    modules_.push_back(ptr.get());
    return ptr;
  }

  /// Runs the modules in order, each as its own checkpointed region unless checkpointing is off.
  Tensor forward(const Tensor& x) override;
  /// Activation checkpointing of the children (autograd/checkpoint.h): with mode full or selective
  /// each child's forward is a region whose activations are recomputed in backward. Default: none.
  void set_checkpointing(const autograd::CheckpointOptions& options) { checkpointing_ = options; }
  /// The children's checkpointing options.
  const autograd::CheckpointOptions& checkpointing() const { return checkpointing_; }
  size_t size() const { return modules_.size(); }  ///< Number of modules in the chain.
  bool empty() const { return modules_.empty(); }  ///< Whether the chain has no modules (forward is then the identity).
  /// The module at index i, as its base class (IndexError when i >= size()); it lives as long as
  /// this Sequential holds it. at<M>(i) gives the concrete type.
  Module& operator[](size_t i) const;
  /// The module at i as M (ValueError when it is another type).
  template <typename M>
  M& at(size_t i) const {
    return detail::module_as<M>((*this)[i], "nn::Sequential", i);
  }
  std::string type_name() const override { return "Sequential"; }

  /// Shares the children outside Module::clone (which deep-copies them); see Note [Child handles].
  Sequential(const Sequential& other);
  /// Moves the chain; the children move with it (the same child objects).
  Sequential(Sequential&&) = default;

 private:
  std::vector<Module*> modules_;  // = children() in order; raw pointers for a cheap forward
  autograd::CheckpointOptions checkpointing_{.mode = autograd::CheckpointMode::none};
};

/// torch.nn.ModuleList: modules registered under "0", "1", ... (so their parameters and state_dict
/// keys are the parent's), iterated by the parent's own forward; it has no forward of its own.
class ModuleList : public Module {
 public:
  ModuleList() = default;
  /// Appends a module (moved in) under the next index; returns the typed pointer.
  template <typename M>
  std::shared_ptr<std::remove_cvref_t<M>> push_back(M&& module) {
    static_assert(!std::is_lvalue_reference_v<M>, "nn::ModuleList::push_back takes the module by value (std::move it)");
    auto ptr = add(std::to_string(size_), std::move(module));
    ++size_;
    return ptr;
  }
  size_t size() const { return size_; }  ///< Number of modules.
  /// The module at index i, as its base class (IndexError when i >= size()); it lives as long as
  /// this list holds it. at<M>(i) gives the concrete type.
  Module& operator[](size_t i) const;
  /// The module at i as M (ValueError when it is another type).
  template <typename M>
  M& at(size_t i) const {
    return detail::module_as<M>((*this)[i], "nn::ModuleList", i);
  }
  std::string type_name() const override { return "ModuleList"; }

 private:
  size_t size_ = 0;
};

/// torch.nn.ModuleDict: children under string keys, in insertion order; state_dict names carry the
/// keys ("heads.cls.weight"), so PyTorch checkpoints load. Keys follow the module-name rules (no
/// dots, not empty); inserting a key twice is a ValueError (PyTorch replaces the module).
class ModuleDict : public Module {
 public:
  ModuleDict() = default;
  /// Adds a module (moved in) under `key`; returns the typed pointer.
  template <typename M>
  std::shared_ptr<std::remove_cvref_t<M>> insert(const std::string& key, M&& module) {
    static_assert(!std::is_lvalue_reference_v<M>, "nn::ModuleDict::insert takes the module by value (std::move it)");
    return add(key, std::move(module));
  }
  size_t size() const { return children().size(); }  ///< Number of modules.
  /// Whether a module is held under `key` (PyTorch's `key in d`).
  bool contains(const std::string& key) const;
  /// The keys, in insertion order.
  std::vector<std::string> keys() const;
  /// The module under `key`, as its base class (IndexError naming the keys when there is none).
  Module& operator[](const std::string& key) const;
  /// The module under `key` as M (ValueError when it is another type).
  template <typename M>
  M& at(const std::string& key) const {
    return detail::module_as<M>((*this)[key], "nn::ModuleDict", key);
  }
  std::string type_name() const override { return "ModuleDict"; }
};

}  // namespace precis::nn
