#include "models/nn/sequential.h"

namespace precis::nn {

Sequential::Sequential(const Sequential& other) : Module(other), checkpointing_(other.checkpointing_) {
  // The copy's children may be clones (Module::clone): point at this module's own children.
  for (const auto& c : children()) modules_.push_back(c.get());
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  if (checkpointing_.mode == autograd::CheckpointMode::none) {
    for (Module* m : modules_) y = m->forward(y);
    return y;
  }
  for (Module* m : modules_) y = autograd::checkpoint(checkpointing_, [m](const Tensor& in) { return m->forward(in); }, y);
  return y;
}

Module& Sequential::operator[](size_t i) const {
  PRECIS_CHECK_INDEX(i < modules_.size(), "nn::Sequential: index ", i, " is out of range for ", modules_.size(),
                     " modules");
  return *modules_[i];
}

Module& ModuleList::operator[](size_t i) const {
  PRECIS_CHECK_INDEX(i < size_, "nn::ModuleList: index ", i, " is out of range for ", size_, " modules");
  return *children()[i];
}

bool ModuleDict::contains(const std::string& key) const {
  for (const auto& [name, child] : named_children())
    if (name == key) return true;
  return false;
}

std::vector<std::string> ModuleDict::keys() const {
  std::vector<std::string> out;
  for (const auto& [name, child] : named_children()) out.push_back(name);
  return out;
}

Module& ModuleDict::operator[](const std::string& key) const {
  Module* found = nullptr;
  for (const auto& [name, child] : named_children())
    if (name == key) found = child.get();
  const auto listed = [this] {
    std::string known;
    for (const std::string& k : keys()) known += (known.empty() ? "" : ", ") + k;
    return known.empty() ? std::string("(none)") : known;
  };
  PRECIS_CHECK_INDEX(found != nullptr, "nn::ModuleDict: no module under the key \"", key, "\"; the keys are: ",
                     listed());
  return *found;
}

}  // namespace precis::nn
