// DistributedDataParallel: the construction checks, the buckets, the hooks and the end-of-backward
// finish (dist/ddp.h says what and why; docs/distributed.md the order of events).
#include "dist/ddp.h"

#include <algorithm>
#include <sstream>

#include "amp/grad_scaler.h"
#include "autograd/engine.h"
#include "core/grad_mode.h"
#include "ops/functional.h"
#include "tensor/factory.h"

namespace precis::dist {

namespace {

std::string shape_str(const Tensor& t) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < t.sizes().size(); ++i) os << (i ? ", " : "") << t.sizes()[i];
  os << "]";
  return os.str();
}

// One line per tensor: what must agree across ranks.
std::string describe_entry(const char* kind, const std::string& name, const Tensor& t) {
  return std::string(kind) + " '" + name + "' " + shape_str(t) + " " + std::string(dtype_name(t.dtype())) +
         (t.requires_grad() ? " requires_grad" : "");
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream is(s);
  for (std::string line; std::getline(is, line);) out.push_back(line);
  return out;
}

// The first difference between rank 0's list and another's, as a sentence.
std::string first_difference(const std::vector<std::string>& ref, const std::vector<std::string>& other, int rank) {
  const size_t n = std::min(ref.size(), other.size());
  for (size_t i = 0; i < n; ++i)
    if (ref[i] != other[i])
      return "entry " + std::to_string(i) + " is " + other[i] + " on rank " + std::to_string(rank) + " but " + ref[i] +
             " on rank 0";
  if (other.size() > ref.size())
    return "rank " + std::to_string(rank) + " has " + std::to_string(other.size() - ref.size()) +
           " more, the first being " + other[n] + " (rank 0 has " + std::to_string(ref.size()) + " entries)";
  return "rank " + std::to_string(rank) + " lacks " + ref[n] + " and " + std::to_string(ref.size() - n - 1) +
         " more that rank 0 has";
}

// The gradient's values / n into the bucket at `offset`, in the bucket's dtype (f32 or f64): the
// op table's division on any device (an IEEE division by an exact integer, so the same bits on
// the CPU and on a GPU).
void copy_divided(const Tensor& grad, const Tensor& flat, int64_t offset, int n) {
  const int64_t count = grad.numel();
  flat.narrow(0, offset, count).copy_(div(grad.reshape({count}).to(flat.dtype()), static_cast<double>(n)));
}

// Broadcasts `tensors` from rank 0 with one collective per (device, dtype): each group is packed
// into one flat tensor, sent, and unpacked (copies of one dtype, so bit for bit). Fewer, larger
// messages than one collective per tensor (a ResNet has ~100 parameters and buffers).
void broadcast_coalesced(ProcessGroup& group, const std::vector<Tensor>& tensors) {
  NoGradGuard no_grad;
  std::vector<std::pair<std::pair<std::string, DType>, std::vector<Tensor>>> groups;
  for (const Tensor& t : tensors) {
    const auto key = std::make_pair(t.device().str(), t.dtype());
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == key; });
    if (it == groups.end()) groups.push_back({key, {t}});
    else it->second.push_back(t);
  }
  std::vector<Tensor> flats;
  std::vector<std::shared_ptr<Work>> works;
  for (const auto& [key, members] : groups) {
    std::vector<Tensor> pieces;
    for (const Tensor& t : members) pieces.push_back(t.detach().reshape({t.numel()}));
    Tensor flat = pieces.size() == 1 ? pieces[0].clone() : cat(pieces, 0);
    works.push_back(group.broadcast(flat, 0));
    flats.push_back(flat);
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    works[g]->wait();
    int64_t offset = 0;
    for (const Tensor& t : groups[g].second) {
      Tensor(t).detach().copy_(flats[g].narrow(0, offset, t.numel()).reshape(t.sizes()));
      t.bump_version();
      offset += t.numel();
    }
  }
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<ProcessGroup> group, NamedTensors named_parameters,
                                                 NamedTensors named_buffers, DistributedDataParallelOptions options)
    : group_(std::move(group)), buffers_(std::move(named_buffers)), options_(options) {
  PRECIS_CHECK(group_ != nullptr, "DistributedDataParallel: the process group is null; pass dist::init_process_group()");
  PRECIS_CHECK(options_.bucket_cap_mb > 0 && options_.first_bucket_cap_mb > 0,
               "DistributedDataParallel: bucket_cap_mb (", options_.bucket_cap_mb, ") and first_bucket_cap_mb (",
               options_.first_bucket_cap_mb, ") must be positive");
  if (!named_parameters.empty() && named_parameters.front().second.defined())
    device_ = named_parameters.front().second.device();
  auto check_tensor = [this](const char* kind, const std::string& name, const Tensor& t) {
    PRECIS_CHECK(t.defined(), "DistributedDataParallel: ", kind, " '", name, "' is undefined");
    PRECIS_CHECK_DEVICE(t.device() == device_, "DistributedDataParallel: ", kind, " '", name, "' is ", t.describe(),
                        " but the first parameter is on ", device_.str(), "; one replica lives on one device");
    PRECIS_CHECK_DEVICE(t.device().is_cpu() || nccl_available(), "DistributedDataParallel: ", kind, " '", name,
                        "' is ", t.describe(), "; CUDA tensors need the NCCL backend, which this build lacks "
                        "(configure with PRECIS_CUDA and NCCL found)");
    PRECIS_CHECK(t.is_contiguous(), "DistributedDataParallel: ", kind, " '", name, "' (", t.describe(),
                 ") is not contiguous; collectives write dense storage in place");
  };
  for (const auto& [name, t] : named_parameters) check_tensor("parameter", name, t);
  for (const auto& [name, t] : buffers_) check_tensor("buffer", name, t);
  verify_same_everywhere(named_parameters, buffers_);

  {  // Every replica starts from rank 0's values: one broadcast per dtype.
    std::vector<Tensor> all;
    for (const auto& [name, t] : named_parameters) all.push_back(t);
    for (const auto& [name, t] : buffers_) all.push_back(t);
    broadcast_coalesced(*group_, all);
  }
  for (auto& [name, t] : named_parameters)
    if (t.requires_grad()) params_.push_back(Param{name, t});
  build_buckets(options_);
  for (size_t i = 0; i < params_.size(); ++i)
    params_[i].hook = params_[i].tensor.register_post_accumulate_grad_hook(
        [this, i](const Tensor&) { on_gradient(static_cast<int64_t>(i)); });
}

DistributedDataParallel::~DistributedDataParallel() {
  for (auto& p : params_)
    if (p.hook >= 0) p.tensor.remove_hook(p.hook);
  for (auto& b : buckets_)
    if (b.work) {
      try {
        b.work->wait();
      } catch (...) {  // a destructor cannot report it; the failed collective ends the job anyway
      }
    }
  if (flag_work_) {
    try {
      flag_work_->wait();
    } catch (...) {
    }
  }
}

void DistributedDataParallel::verify_same_everywhere(const NamedTensors& params, const NamedTensors& buffers) {
  std::string desc;
  for (const auto& [name, t] : params) desc += describe_entry("parameter", name, t) + "\n";
  for (const auto& [name, t] : buffers) desc += describe_entry("buffer", name, t) + "\n";
  const int world = group_->size();
  // Round 1: (count, hash) of every rank, fixed size, so a mismatch cannot hang a collective.
  Tensor mine = zeros({2}, {.dtype = DType::i64});
  mine.data_ptr<int64_t>()[0] = static_cast<int64_t>(params.size() + buffers.size());
  mine.data_ptr<int64_t>()[1] = static_cast<int64_t>(fnv1a(desc));
  Tensor all = zeros({world, 2}, {.dtype = DType::i64});
  group_->all_gather(mine, all)->wait();
  const int64_t* a = all.data_ptr<int64_t>();
  bool same = true;
  for (int r = 1; r < world; ++r) same = same && a[2 * r] == a[0] && a[2 * r + 1] == a[1];
  if (same) return;
  // Round 2 (every rank saw the same round 1, so all take it): the descriptions themselves.
  Tensor len = zeros({1}, {.dtype = DType::i64});
  len.data_ptr<int64_t>()[0] = static_cast<int64_t>(desc.size());
  Tensor lens = zeros({world, 1}, {.dtype = DType::i64});
  group_->all_gather(len, lens)->wait();
  int64_t longest = 0;
  for (int r = 0; r < world; ++r) longest = std::max(longest, lens.data_ptr<int64_t>()[r]);
  const int64_t words = (longest + 7) / 8 + 1;
  Tensor text = zeros({words}, {.dtype = DType::i64});
  std::copy(desc.begin(), desc.end(), reinterpret_cast<char*>(text.data_ptr()));
  Tensor texts = zeros({world, words}, {.dtype = DType::i64});
  group_->all_gather(text, texts)->wait();
  auto text_of = [&](int r) {
    const char* p = reinterpret_cast<const char*>(texts.data_ptr<int64_t>() + r * words);
    return std::string(p, static_cast<size_t>(lens.data_ptr<int64_t>()[r]));
  };
  const auto ref = split_lines(text_of(0));
  std::string msg = "DistributedDataParallel: the ranks do not have the same parameters and buffers (names, shapes, "
                    "dtypes, order): ";
  int reported = 0;
  for (int r = 1; r < world && reported < 3; ++r) {
    const auto other = split_lines(text_of(r));
    if (other == ref) continue;
    msg += (reported++ ? "; " : "") + first_difference(ref, other, r);
  }
  throw ValueError(msg + ". Every rank must build the same model (same configuration and code) before wrapping it");
}

void DistributedDataParallel::build_buckets(const DistributedDataParallelOptions& o) {
  const double mib = 1024.0 * 1024.0;
  double bytes = 0;
  DType bucket_dtype = DType::f32;
  DType bucket_param_dtype = DType::f32;
  std::vector<int64_t> sizes;
  for (int64_t i = static_cast<int64_t>(params_.size()) - 1; i >= 0; --i) {  // reverse registration order
    Param& p = params_[static_cast<size_t>(i)];
    const DType d = p.tensor.dtype() == DType::f64 ? DType::f64 : DType::f32;
    const double pbytes = static_cast<double>(p.tensor.numel()) * static_cast<double>(element_size(d));
    // The bucket being filled is buckets_.back(); the first one (index 0) has the smaller cap.
    const double cap = (buckets_.size() == 1 ? o.first_bucket_cap_mb : o.bucket_cap_mb) * mib;
    // Sharded, a bucket holds one parameter dtype: its shard of parameters is one tensor to gather.
    const bool start_new = buckets_.empty() || d != bucket_dtype || (bytes > 0 && bytes + pbytes > cap) ||
                           (sharded_ && p.tensor.dtype() != bucket_param_dtype);
    if (start_new) {
      buckets_.emplace_back();
      sizes.push_back(0);
      bytes = 0;
      bucket_dtype = d;
      bucket_param_dtype = p.tensor.dtype();
    }
    Bucket& b = buckets_.back();
    int64_t offset = sizes.back();
    // Sharded: a parameter that would cross a multiple of align_ starts at one, so that shard
    // boundaries (multiples of align_) cut it only at its own multiples of align_.
    if (sharded_ && offset % align_ + p.tensor.numel() > align_) offset = (offset + align_ - 1) / align_ * align_;
    p.bucket = static_cast<int64_t>(buckets_.size()) - 1;
    p.offset = offset;
    sizes.back() = offset + p.tensor.numel();
    bytes += pbytes;
    b.params.push_back(i);
  }
  // The flag travels whether or not a scaler is named: one may scale the losses without being
  // named (GradScaler::last_scaling), and the layout is fixed before the first backward.
  const bool tail = !buckets_.empty() || (o.scaler != nullptr && o.scaler->is_enabled());
  if (tail && buckets_.empty() && !sharded_) {  // no trainable parameter: the flag still travels
    buckets_.emplace_back();
    sizes.push_back(0);
  }
  const int64_t world = group_->size();
  for (size_t k = 0; k < buckets_.size(); ++k) {
    const bool last = k + 1 == buckets_.size();
    DType d = DType::f32;
    if (!buckets_[k].params.empty() && params_[static_cast<size_t>(buckets_[k].params[0])].tensor.dtype() == DType::f64)
      d = DType::f64;
    if (sharded_) {
      const int64_t unit = world * align_;
      const int64_t padded = (sizes[k] + unit - 1) / unit * unit;
      buckets_[k].flat = zeros({padded}, {.dtype = d, .device = device_});
      buckets_[k].shard = zeros({padded / world}, {.dtype = d, .device = device_});
      continue;
    }
    if (last && tail) tail_offset_ = sizes[k];
    buckets_[k].flat = zeros({sizes[k] + (last && tail ? 1 : 0)}, {.dtype = d, .device = device_});
  }
  if (sharded_ && tail) flag_ = zeros({1}, {.dtype = DType::f32, .device = device_});
}

void DistributedDataParallel::enable_sharding(int64_t align, std::function<void()> after_reduce) {
  PRECIS_CHECK_T(StateError, !sharded_, "DistributedDataParallel: a second ZeroOptimizer over the same "
                 "DistributedDataParallel; one optimizer owns the gradient shards");
  PRECIS_CHECK_T(StateError, !pass_active_, "DistributedDataParallel: a ZeroOptimizer was made during backward; "
                 "make it before the first forward");
  PRECIS_CHECK(align >= 1, "DistributedDataParallel: shard alignment ", align, " must be positive");
  sharded_ = true;
  align_ = align;
  after_reduce_ = std::move(after_reduce);
  buckets_.clear();
  tail_offset_ = -1;
  build_buckets(options_);
}

void DistributedDataParallel::reset_pass() {
  for (auto& p : params_) p.ready = false;
  for (auto& b : buckets_) {
    b.pending = static_cast<int64_t>(b.params.size());
    b.work.reset();
  }
  flag_work_.reset();
  next_launch_ = 0;
  pass_active_ = false;
}

void DistributedDataParallel::on_gradient(int64_t index) {
  params_[static_cast<size_t>(index)].used = true;
  if (!sync_) return;
  if (!pass_active_) {
    reset_pass();
    pass_active_ = true;
    autograd::queue_callback([this] { finalize(); });
  }
  Param& p = params_[static_cast<size_t>(index)];
  PRECIS_CHECK_T(StateError, !p.ready, "DistributedDataParallel: the gradient of parameter '", p.name,
                 "' was accumulated twice in one backward pass; each parameter's gradient is reduced once per pass");
  NoGradGuard no_grad;
  Bucket& b = buckets_[static_cast<size_t>(p.bucket)];
  copy_divided(p.tensor.grad(), b.flat, p.offset, group_->size());
  p.ready = true;
  --b.pending;
  launch_ready();
}

void DistributedDataParallel::launch_ready() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
    Bucket& b = buckets_[next_launch_];
    if (next_launch_ + 1 == buckets_.size() && tail_offset_ >= 0) {
      Tensor flag = flag_to_send();
      // A copy on the device (on a GPU, the compute stream): reading the flag with item() would
      // stall backward until the GPU caught up, serialising the overlap the buckets exist for.
      Tensor slot = b.flat.narrow(0, tail_offset_, 1);
      if (flag.defined()) slot.copy_(flag.reshape({1}));
      else slot.zero_();
    }
    if (sharded_) {
      b.work = group_->reduce_scatter(b.flat, b.shard, ReduceOp::sum);
      if (next_launch_ + 1 == buckets_.size() && flag_.defined()) launch_flag();
    } else {
      b.work = group_->all_reduce(b.flat, ReduceOp::sum);
    }
    ++next_launch_;
  }
  for (size_t k = 0; k < next_launch_; ++k) buckets_[k].work->done();  // lets MPI make progress
}

// Sharded, the flag cannot ride in a bucket (each rank would see its shard's slot only): one
// one-element all_reduce, issued right after the last bucket on every rank.
void DistributedDataParallel::launch_flag() {
  Tensor flag = flag_to_send();
  if (flag.defined()) flag_.copy_(flag.reshape({1}));
  else flag_.zero_();
  flag_work_ = group_->all_reduce(flag_, ReduceOp::sum);
}

// The named scaler's flag, else that of the scaler that last scaled a loss on this thread (the
// one whose backward this is); undefined when neither has one. Remembered for finalize().
Tensor DistributedDataParallel::flag_to_send() {
  flag_scaler_ = options_.scaler != nullptr ? options_.scaler : amp::GradScaler::last_scaling();
  return flag_scaler_ != nullptr ? flag_scaler_->loss_nonfinite() : Tensor();
}

// find_unused_parameters: which parameters some rank used since the last synced pass. Issued after
// every bucket (and the sharded flag) on every rank, so the collectives' order agrees.
void DistributedDataParallel::reduce_usage() {
  const int64_t n = static_cast<int64_t>(params_.size());
  Tensor used = zeros({n}, {.dtype = DType::f32});
  for (int64_t i = 0; i < n; ++i) used.data_ptr<float>()[i] = params_[static_cast<size_t>(i)].used ? 1.0f : 0.0f;
  Tensor reduced = used.to(device_);
  group_->all_reduce(reduced, ReduceOp::sum)->wait();
  if (!reduced.device().is_cpu()) reduced = reduced.to(Device::cpu());
  for (int64_t i = 0; i < n; ++i) params_[static_cast<size_t>(i)].reduced = reduced.data_ptr<float>()[i] > 0.0f;
}

void DistributedDataParallel::finalize() {
  NoGradGuard no_grad;
  try {
    std::vector<std::string> unused;
    for (auto& p : params_)
      if (!p.ready) unused.push_back(p.name);
    if (!unused.empty()) {
      if (!options_.find_unused_parameters) {
        for (size_t k = 0; k < next_launch_; ++k) buckets_[k].work->wait();
        std::string names;
        for (size_t i = 0; i < unused.size() && i < 8; ++i) names += (i ? ", '" : "'") + unused[i] + "'";
        if (unused.size() > 8) names += " and " + std::to_string(unused.size() - 8) + " more";
        throw ValueError("DistributedDataParallel: backward produced no gradient for parameter " + names + " on rank " +
                         std::to_string(group_->rank()) +
                         "; its bucket could not be reduced. If the model leaves parameters unused in some steps, "
                         "construct with find_unused_parameters = true; if one is never trained, set its "
                         "requires_grad to false before wrapping");
      }
      for (auto& p : params_) {
        if (p.ready) continue;
        Bucket& b = buckets_[static_cast<size_t>(p.bucket)];
        // Unused in this pass, but a gradient it accumulated in no_sync passes is still this
        // rank's share (PyTorch's reducer reduces an existing .grad, and zeros only a missing one).
        const Tensor g = p.tensor.grad();
        if (g.defined()) copy_divided(g, b.flat, p.offset, group_->size());
        else b.flat.narrow(0, p.offset, p.tensor.numel()).zero_();
        p.ready = true;
        --b.pending;
      }
      launch_ready();
    }
    PRECIS_INTERNAL_ASSERT(next_launch_ == buckets_.size(), "DistributedDataParallel: ", next_launch_, " of ",
                           buckets_.size(), " buckets launched at the end of backward");
    if (options_.find_unused_parameters) reduce_usage();
    for (auto& b : buckets_) b.work->wait();
    const bool set_flag = flag_scaler_ != nullptr && flag_scaler_->loss_nonfinite().defined();
    if (sharded_) {
      if (flag_work_) flag_work_->wait();
      if (flag_.defined() && set_flag) flag_scaler_->set_loss_nonfinite(flag_.clone());
      if (after_reduce_) after_reduce_();
      end_synced_pass();
      return;
    }
    for (auto& p : params_) {
      if (!p.reduced) continue;  // no rank used it: its .grad stays as it was (PyTorch's)
      const Bucket& b = buckets_[static_cast<size_t>(p.bucket)];
      Tensor mean = b.flat.narrow(0, p.offset, p.tensor.numel()).reshape(p.tensor.sizes());
      Tensor g = p.tensor.grad();
      if (!g.defined()) p.tensor.set_grad(mean.to(p.tensor.dtype()).clone());
      else g.copy_(mean);
    }
    if (tail_offset_ >= 0 && set_flag)
      flag_scaler_->set_loss_nonfinite(buckets_.back().flat.narrow(0, tail_offset_, 1).clone());
  } catch (...) {
    end_synced_pass();
    throw;
  }
  end_synced_pass();
}

void DistributedDataParallel::end_synced_pass() {
  for (auto& p : params_) p.used = false;
  flag_scaler_ = nullptr;
  reset_pass();
}

void DistributedDataParallel::pre_forward() {
  if (!options_.broadcast_buffers || buffers_.empty() || group_->size() == 1) return;
  std::vector<Tensor> all;
  for (const auto& [name, t] : buffers_) all.push_back(t);
  broadcast_coalesced(*group_, all);
}

std::vector<std::vector<std::string>> DistributedDataParallel::bucket_parameter_names() const {
  std::vector<std::vector<std::string>> out;
  for (const auto& b : buckets_) {
    out.emplace_back();
    for (int64_t i : b.params) out.back().push_back(params_[static_cast<size_t>(i)].name);
  }
  return out;
}

}  // namespace precis::dist
