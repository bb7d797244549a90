// ZeroOptimizer: the pieces of this rank's shard, the gradient statistics recombined in the
// unsharded order, the all-gather after the step and the world-size-free state dict (dist/zero.h).
#include "dist/zero.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "core/grad_mode.h"
#include "ops/contracts/kernels_optim.h"
#include "ops/op_table.h"
#include "optim/clip_grad.h"
#include "tensor/factory.h"

namespace precis::dist {

namespace {

// The state keys of SGD, Adam and AdamW with a tensor of the parameter's shape; "step" is 0-d.
const std::vector<std::string> kShapedKeys = {"master", "momentum_buffer", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"};

// Splits "state.<index>.<key>"; false when `name` is not of that form.
bool parse_state_key(const std::string& name, size_t& index, std::string& key) {
  if (name.rfind("state.", 0) != 0) return false;
  const size_t dot = name.find('.', 6);
  if (dot == std::string::npos || dot == 6) return false;
  index = 0;
  for (size_t c = 6; c < dot; ++c) {
    if (name[c] < '0' || name[c] > '9') return false;
    index = index * 10 + static_cast<size_t>(name[c] - '0');
  }
  key = name.substr(dot + 1);
  return true;
}

}  // namespace

struct ZeroOptimizer::Layout {
  std::vector<ModelParam> params;
  std::vector<Tensor> model_params;
  std::vector<Piece> pieces;
  std::vector<std::vector<Tensor>> piece_groups;
  std::vector<Tensor> shard_params;
  int64_t total_blocks = 0;
};

ZeroOptimizer::Layout ZeroOptimizer::plan(DistributedDataParallel& ddp, std::vector<std::vector<Tensor>> groups) {
  PRECIS_CHECK(!groups.empty(), "ZeroOptimizer: no parameter groups; pass the model's parameters");
  // Which of ddp's parameters each tensor is, before the buckets change.
  std::map<const TensorImpl*, size_t> ddp_index;
  for (size_t i = 0; i < ddp.params_.size(); ++i) ddp_index[ddp.params_[i].tensor.impl()] = i;
  Layout l;
  std::set<const TensorImpl*> seen;
  for (size_t g = 0; g < groups.size(); ++g) {
    PRECIS_CHECK(!groups[g].empty(), "ZeroOptimizer: parameter group ", g, " is empty");
    for (const Tensor& p : groups[g]) {
      PRECIS_CHECK(p.defined(), "ZeroOptimizer: parameter group ", g, " holds an undefined tensor");
      PRECIS_CHECK(ddp_index.count(p.impl()) != 0, "ZeroOptimizer: ", p.describe(), " (group ", g,
                   ") is not a parameter of the DistributedDataParallel that requires grad; shard the parameters "
                   "that DDP reduces (model.parameters() of the model it wraps)");
      PRECIS_CHECK(seen.insert(p.impl()).second, "ZeroOptimizer: ", p.describe(), " appears twice; each parameter "
                   "may be in one group only");
      l.params.push_back(ModelParam{p, g});
      l.model_params.push_back(p);
    }
  }
  ddp.enable_sharding(kShardAlign, nullptr);

  const int64_t rank = ddp.group_->rank();
  l.shard_params.resize(ddp.buckets_.size());
  for (size_t b = 0; b < ddp.buckets_.size(); ++b) {
    const auto& bucket = ddp.buckets_[b];
    const DType dtype = bucket.params.empty() ? bucket.flat.dtype()
                                              : ddp.params_[static_cast<size_t>(bucket.params[0])].tensor.dtype();
    l.shard_params[b] = zeros({bucket.shard.numel()}, {.dtype = dtype, .device = ddp.device_});
  }
  NoGradGuard no_grad;
  l.piece_groups.resize(groups.size());
  for (size_t i = 0; i < l.params.size(); ++i) {
    ModelParam& mp = l.params[i];
    mp.ddp_param = ddp_index.at(mp.tensor.impl());
    const auto& dp = ddp.params_[mp.ddp_param];
    mp.bucket = dp.bucket;
    mp.offset = dp.offset;
    mp.first_block = l.total_blocks;
    const int64_t numel = mp.tensor.numel();
    l.total_blocks += (numel + kShardAlign - 1) / kShardAlign;
    // This rank's block of the bucket, [lo, hi) in the bucket, cut every kShardAlign elements of
    // the parameter (counted from its start: the kernels' blocks).
    const int64_t shard = ddp.buckets_[static_cast<size_t>(mp.bucket)].shard.numel();
    const int64_t lo = std::max(mp.offset, rank * shard), hi = std::min(mp.offset + numel, (rank + 1) * shard);
    const Tensor flat = mp.tensor.detach().reshape({numel});
    for (int64_t at = lo; at < hi;) {
      const int64_t begin = at - mp.offset;
      const int64_t end = std::min(hi - mp.offset, (begin / kShardAlign + 1) * kShardAlign);
      Piece piece{static_cast<int64_t>(i), mp.group, mp.bucket, begin, end - begin, at - rank * shard, Tensor()};
      Tensor buffer = l.shard_params[static_cast<size_t>(mp.bucket)].narrow(0, piece.shard_offset, piece.length);
      buffer.copy_(flat.narrow(0, begin, piece.length));
      piece.tensor = buffer.detach();
      piece.tensor.requires_grad_(true);
      l.piece_groups[mp.group].push_back(piece.tensor);
      l.pieces.push_back(std::move(piece));
      at = mp.offset + end;
    }
  }
  // Every group needs a parameter on every rank: an empty piece stands in (a rank may hold none of
  // a small group, or nothing but padding).
  for (size_t g = 0; g < groups.size(); ++g) {
    if (!l.piece_groups[g].empty()) continue;
    Tensor empty_piece = zeros({0}, {.dtype = groups[g][0].dtype(), .device = ddp.device_});
    empty_piece.requires_grad_(true);
    l.piece_groups[g].push_back(empty_piece);
    l.pieces.push_back(Piece{-1, g, 0, 0, 0, 0, empty_piece});
  }
  // parameters() order (group after group) for the pieces.
  std::vector<Piece> ordered;
  for (size_t g = 0; g < groups.size(); ++g)
    for (const Tensor& t : l.piece_groups[g])
      for (const Piece& p : l.pieces)
        if (p.tensor.is_same(t)) ordered.push_back(p);
  l.pieces = std::move(ordered);
  return l;
}

ZeroOptimizer::ZeroOptimizer(DistributedDataParallel& ddp, std::vector<std::vector<Tensor>> param_groups,
                             const Factory& make)
    : ZeroOptimizer(ddp, plan(ddp, std::move(param_groups)), make) {}

ZeroOptimizer::ZeroOptimizer(DistributedDataParallel& ddp, Layout layout, const Factory& make)
    : Optimizer("ZeRO", layout.piece_groups),
      ddp_(ddp),
      params_(std::move(layout.params)),
      model_params_(std::move(layout.model_params)),
      pieces_(std::move(layout.pieces)),
      shard_params_(std::move(layout.shard_params)) {
  PRECIS_CHECK(make != nullptr, "ZeroOptimizer: the factory is empty; pass a function making the optimizer");
  inner_ = make(groups_);
  PRECIS_CHECK(inner_ != nullptr, "ZeroOptimizer: the factory returned no optimizer");
  bool same = inner_->num_param_groups() == groups_.size();
  for (size_t g = 0; same && g < groups_.size(); ++g) {
    const auto& got = inner_->group_params(g);
    same = got.size() == groups_[g].size();
    for (size_t k = 0; same && k < got.size(); ++k) same = got[k].is_same(groups_[g][k]);
  }
  PRECIS_CHECK(same, "ZeroOptimizer: the factory's ", inner_->name(), " does not hold the pieces it was given, group "
               "for group (", inner_->num_param_groups(), " groups for ", groups_.size(),
               "); build it from its argument, shard_groups[g] for group g");
  name_ = "ZeRO(" + inner_->name() + ")";
  ddp_.after_reduce_ = [this, alive = std::weak_ptr<int>(alive_)] {
    if (!alive.expired()) attach_gradients();
  };
  for (const Tensor& p : model_params_)
    optim::mark_sharded_gradient(p, "clip through the ZeroOptimizer on every rank: opt.clip_grad_norm_(max_norm), "
                                    "or scaler.clip_grad_norm_(opt, max_norm) with a loss scaler; "
                                    "clip_grad_value_(opt.parameters(), v) clips its pieces");
}

ZeroOptimizer::~ZeroOptimizer() {
  for (const Tensor& p : model_params_) optim::unmark_sharded_gradient(p);
}

// After a synced backward: each piece's gradient is its slice of the reduced block (the bucket
// holds f32; a piece of an f16/bf16 parameter gets it rounded, as DDP rounds into .grad). A piece
// of a parameter no rank used (find_unused_parameters) gets none, so the optimizer skips it as
// DDP's unsharded optimizer would.
void ZeroOptimizer::attach_gradients() {
  NoGradGuard no_grad;
  for (const Piece& p : pieces_) {
    if (p.param < 0) {
      p.tensor.set_grad(zeros({0}, {.dtype = p.tensor.dtype(), .device = p.tensor.device()}));
      continue;
    }
    if (!ddp_.params_[params_[static_cast<size_t>(p.param)].ddp_param].reduced) {
      p.tensor.set_grad(Tensor());
      continue;
    }
    Tensor g = ddp_.buckets_[static_cast<size_t>(p.bucket)].shard.narrow(0, p.shard_offset, p.length);
    p.tensor.set_grad(g.dtype() == p.tensor.dtype() ? g.detach() : g.to(p.tensor.dtype()));
  }
}

void ZeroOptimizer::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (const Tensor& p : model_params_) {
    if (set_to_none) p.set_grad(Tensor());
    else if (Tensor g = p.grad(); g.defined()) g.zero_();
  }
  for (const Piece& p : pieces_) p.tensor.set_grad(Tensor());
}

void ZeroOptimizer::step(const optim::StepOptions& options) {
  NoGradGuard no_grad;
  // The pieces start from the parameters as they are now: a checkpoint may have been loaded into
  // the model (or the parameters set otherwise) since the last step's gather.
  for (const Piece& p : pieces_) {
    if (p.param < 0) continue;
    const Tensor& param = params_[static_cast<size_t>(p.param)].tensor;
    Tensor(p.tensor).detach().copy_(param.detach().reshape({param.numel()}).narrow(0, p.begin, p.length));
  }
  inner_->step(options);
  ProcessGroup& group = *ddp_.group_;
  const int64_t world = group.size();
  std::vector<std::vector<size_t>> by_bucket(shard_params_.size());
  for (size_t i = 0; i < params_.size(); ++i) by_bucket[static_cast<size_t>(params_[i].bucket)].push_back(i);
  // Two buckets in flight at a time: bucket b + 1 is gathered while bucket b is copied out, and
  // at most two buckets' worth of gathered parameters exist at once.
  std::vector<Tensor> gathered(shard_params_.size());
  std::vector<std::shared_ptr<Work>> works(shard_params_.size());
  auto launch = [&](size_t b) {
    const Tensor& mine = shard_params_[b];
    gathered[b] = empty({world, mine.numel()}, {.dtype = mine.dtype(), .device = mine.device()});
    works[b] = group.all_gather(mine, gathered[b]);
  };
  if (!shard_params_.empty()) launch(0);
  for (size_t b = 0; b < shard_params_.size(); ++b) {
    if (b + 1 < shard_params_.size()) launch(b + 1);
    works[b]->wait();
    const Tensor all = gathered[b].reshape({gathered[b].numel()});
    for (size_t i : by_bucket[b]) {
      const ModelParam& mp = params_[i];
      Tensor(mp.tensor).detach().reshape({mp.tensor.numel()}).copy_(all.narrow(0, mp.offset, mp.tensor.numel()));
      mp.tensor.bump_version();
    }
    gathered[b] = Tensor();
    works[b].reset();
  }
}

Tensor ZeroOptimizer::state(const Tensor& piece, const std::string& key) const { return inner_->state(piece, key); }

double ZeroOptimizer::combine_blocks(const std::vector<std::pair<int64_t, double>>& local, int64_t block,
                                     double& extra) const {
  NoGradGuard no_grad;
  auto blocks_of = [block](int64_t numel) { return (numel + block - 1) / block; };
  int64_t total_blocks = 0;
  for (const ModelParam& mp : params_) total_blocks += blocks_of(mp.tensor.numel());
  // Each block's entry is nonzero on one rank only, so the sum over the ranks is exact (x + 0 = x).
  Tensor all = zeros({total_blocks + 1}, {.dtype = DType::f64});
  double* v = all.data_ptr<double>();
  for (const auto& [at, value] : local) v[at] = value;
  v[total_blocks] = extra;
  ddp_.group_->all_reduce(all, ReduceOp::sum)->wait();
  extra = v[total_blocks];
  // The unsharded order (ops/cpu/unscale.cpp and clip.cpp, then clip_grad_norm's combination):
  // per parameter its blocks from 0, then the parameters in order from 0.
  double total = 0.0;
  int64_t at = 0;
  for (const ModelParam& mp : params_) {
    double sum = 0.0;
    for (int64_t j = 0; j < blocks_of(mp.tensor.numel()); ++j) sum += v[at++];
    total += sum;
  }
  return total;
}

void ZeroOptimizer::reduce_gradient_stats(const Tensor& found_inf, const Tensor& sq_norms) {
  NoGradGuard no_grad;
  const std::vector<double> local = sq_norms.to(Device::cpu()).to(DType::f64).to_vector<double>();
  std::vector<std::pair<int64_t, double>> blocks;
  size_t k = 0;
  for (const Piece& p : pieces_) {
    if (!p.tensor.grad().defined()) continue;  // the scaler measured the pieces with a gradient
    PRECIS_INTERNAL_ASSERT(k < local.size(), "ZeroOptimizer: more pieces with gradients than squared norms");
    if (p.param >= 0) blocks.emplace_back(params_[static_cast<size_t>(p.param)].first_block + p.begin / kShardAlign, local[k]);
    ++k;
  }
  double found = found_inf.to(Device::cpu()).to(DType::f64).item<double>() != 0.0 ? 1.0 : 0.0;
  const double total = combine_blocks(blocks, kShardAlign, found);
  Tensor(found_inf).copy_(scalar_tensor(found > 0 ? 1.0 : 0.0, {.dtype = DType::f32}).to(found_inf.device()));
  if (sq_norms.numel() == 0) return;
  std::vector<double> out(static_cast<size_t>(sq_norms.numel()), 0.0);
  out[0] = total;
  Tensor(sq_norms).copy_(from_vector<double>(out).to(sq_norms.dtype()).to(sq_norms.device()));
}

Tensor ZeroOptimizer::clip_grad_norm_(double max_norm, double norm_type) {
  PRECIS_CHECK_T(NotImplementedError, norm_type == 2.0, name_, ".clip_grad_norm_: norm_type ", norm_type,
                 " is not supported sharded; only the 2-norm (the loss scaler's and precis-train's --clip)");
  NoGradGuard no_grad;
  constexpr int64_t kClipBlock = kShardAlign / 2;  // ops/cpu/clip.cpp's power-sum block
  std::vector<Tensor> views;
  std::vector<int64_t> at;
  std::vector<Tensor> with_grad;
  for (const Piece& p : pieces_) {
    Tensor g = p.tensor.grad();
    if (!g.defined()) continue;
    with_grad.push_back(p.tensor);
    if (p.param < 0) continue;
    for (int64_t b = 0; b < p.length; b += kClipBlock) {
      views.push_back(g.narrow(0, b, std::min(kClipBlock, p.length - b)));
      at.push_back(static_cast<int64_t>(p.param));
      at.push_back(p.begin + b);
    }
  }
  // Global block index at kClipBlock granularity of each view.
  std::vector<int64_t> first_block(params_.size(), 0);
  for (size_t i = 1; i < params_.size(); ++i)
    first_block[i] = first_block[i - 1] + (params_[i - 1].tensor.numel() + kClipBlock - 1) / kClipBlock;
  std::vector<std::pair<int64_t, double>> blocks;
  if (!views.empty()) {
    Tensor sums = zeros({static_cast<int64_t>(views.size())}, {.dtype = DType::f64, .device = views[0].device()});
    kernel<kernels::GradNormKernel>(OpId::grad_norms, views[0].device().type, DType::f32)(views, 2.0, sums);
    const std::vector<double> s = sums.to(Device::cpu()).to_vector<double>();
    for (size_t k = 0; k < views.size(); ++k)
      blocks.emplace_back(first_block[static_cast<size_t>(at[2 * k])] + at[2 * k + 1] / kClipBlock, s[k]);
  }
  double unused = 0.0;
  const double total = combine_blocks(blocks, kClipBlock, unused);
  if (with_grad.empty()) return scalar_tensor(std::sqrt(total), {.dtype = DType::f32});
  std::vector<double> per_piece(with_grad.size(), 0.0);
  per_piece[0] = total;
  return optim::clip_grad_norm_(with_grad, max_norm, per_piece);
}

StateDict ZeroOptimizer::state_dict() const {
  NoGradGuard no_grad;
  ProcessGroup& group = *ddp_.group_;
  const int64_t world = group.size();
  const StateDict mine = inner_->state_dict();
  StateDict out;
  // Groups: the model's parameter indices, and the wrapped optimizer's options (the same on every rank).
  size_t index = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::string prefix = "param_groups." + std::to_string(g) + ".";
    std::vector<int64_t> ids;
    for (const ModelParam& mp : params_)
      if (mp.group == g) ids.push_back(static_cast<int64_t>(index++));
    for (auto it = mine.lower_bound(prefix); it != mine.end() && it->first.rfind(prefix, 0) == 0; ++it)
      if (it->first != prefix + "params") out[it->first] = it->second;
    out[prefix + "params"] = from_vector<int64_t>(ids);
  }
  // Which model parameter has which state (any rank's piece of it), and its step counter.
  const int64_t nkeys = static_cast<int64_t>(kShapedKeys.size());
  const int64_t nparams = static_cast<int64_t>(params_.size());
  Tensor present = zeros({nparams * (nkeys + 1)}, {.dtype = DType::f32});
  Tensor steps = full({nparams}, -1.0, {.dtype = DType::f32});
  float* pr = present.data_ptr<float>();
  float* st = steps.data_ptr<float>();
  for (size_t j = 0; j < pieces_.size(); ++j) {
    const Piece& p = pieces_[j];
    if (p.param < 0) continue;
    for (int64_t k = 0; k < nkeys; ++k)
      if (mine.count("state." + std::to_string(j) + "." + kShapedKeys[static_cast<size_t>(k)]))
        pr[p.param * (nkeys + 1) + k] = 1.0f;
    auto it = mine.find("state." + std::to_string(j) + ".step");
    if (it != mine.end()) {
      pr[p.param * (nkeys + 1) + nkeys] = 1.0f;
      st[p.param] = it->second.to(Device::cpu()).to(DType::f32).item<float>();
    }
  }
  group.all_reduce(present, ReduceOp::max)->wait();
  group.all_reduce(steps, ReduceOp::max)->wait();
  for (int64_t i = 0; i < nparams; ++i)
    if (pr[i * (nkeys + 1) + nkeys] != 0.0f)
      out["state." + std::to_string(i) + ".step"] = scalar_tensor(st[i], {.dtype = DType::f32});
  // Each present key, bucket by bucket: this rank's pieces in a buffer laid out as its block of
  // the bucket, all-gathered, then cut into the parameters.
  for (int64_t k = 0; k < nkeys; ++k) {
    const std::string& key = kShapedKeys[static_cast<size_t>(k)];
    for (size_t b = 0; b < shard_params_.size(); ++b) {
      bool any = false;
      for (int64_t i = 0; i < nparams; ++i)
        any = any || (params_[static_cast<size_t>(i)].bucket == static_cast<int64_t>(b) && pr[i * (nkeys + 1) + k] != 0.0f);
      if (!any) continue;  // the same decision on every rank: `present` is reduced
      const DType dtype = key == "master" || shard_params_[b].dtype() != DType::f64 ? DType::f32 : DType::f64;
      const int64_t shard = shard_params_[b].numel();
      Tensor buffer = zeros({shard}, {.dtype = dtype, .device = shard_params_[b].device()});
      for (size_t j = 0; j < pieces_.size(); ++j) {
        const Piece& p = pieces_[j];
        if (p.param < 0 || p.bucket != static_cast<int64_t>(b)) continue;
        auto it = mine.find("state." + std::to_string(j) + "." + key);
        if (it != mine.end()) buffer.narrow(0, p.shard_offset, p.length).copy_(it->second.reshape({p.length}));
      }
      Tensor gathered = empty({world, shard}, {.dtype = dtype, .device = buffer.device()});
      group.all_gather(buffer, gathered)->wait();
      const Tensor all = gathered.reshape({world * shard});
      for (int64_t i = 0; i < nparams; ++i) {
        const ModelParam& mp = params_[static_cast<size_t>(i)];
        if (mp.bucket != static_cast<int64_t>(b) || pr[i * (nkeys + 1) + k] == 0.0f) continue;
        out["state." + std::to_string(i) + "." + key] =
            all.narrow(0, mp.offset, mp.tensor.numel()).reshape(mp.tensor.sizes()).clone();
      }
    }
  }
  return out;
}

void ZeroOptimizer::load_state_dict(const StateDict& dict) {
  const std::string owner = name_ + ".load_state_dict";
  check_group_count(dict, owner);
  StateDict inner;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::string prefix = "param_groups." + std::to_string(g) + ".";
    size_t in_group = 0;
    for (const ModelParam& mp : params_) in_group += mp.group == g;
    const Tensor ids = state_tensor(dict, prefix + "params", owner.c_str());
    PRECIS_CHECK(ids.numel() == static_cast<int64_t>(in_group), owner, ": parameter group ", g, " of the state dict has ",
                 ids.numel(), " parameters but this optimizer's model has ", in_group);
    for (auto it = dict.lower_bound(prefix); it != dict.end() && it->first.rfind(prefix, 0) == 0; ++it)
      if (it->first != prefix + "params") inner[it->first] = it->second;
    std::vector<int64_t> piece_ids;  // pieces_ is in parameters() order, group after group
    for (size_t j = 0; j < pieces_.size(); ++j)
      if (pieces_[j].group == g) piece_ids.push_back(static_cast<int64_t>(j));
    inner[prefix + "params"] = from_vector<int64_t>(piece_ids);
  }
  for (const auto& [name, value] : dict) {
    size_t i = 0;
    std::string key;
    if (!parse_state_key(name, i, key)) continue;
    PRECIS_CHECK(i < params_.size(), owner, ": state entry '", name, "' is for parameter ", i, " but the model has ",
                 params_.size(), " parameters");
    const ModelParam& mp = params_[i];
    for (size_t j = 0; j < pieces_.size(); ++j) {
      const Piece& p = pieces_[j];
      if (p.param != static_cast<int64_t>(i)) continue;
      const std::string piece_name = "state." + std::to_string(j) + "." + key;
      if (key == "step") {
        inner[piece_name] = value;
        continue;
      }
      PRECIS_CHECK_SHAPE(value.numel() == mp.tensor.numel(), owner, ": state entry '", name, "' is ", value.describe(),
                         " but parameter ", i, " is ", mp.tensor.describe());
      inner[piece_name] = value.reshape({value.numel()}).narrow(0, p.begin, p.length).clone();
    }
  }
  inner_->load_state_dict(inner);
}

}  // namespace precis::dist
