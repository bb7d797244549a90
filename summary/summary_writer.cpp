#include "summary/summary_writer.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/warning.h"
#include "summary/tensorboard.pb.h"
#include "summary/tfrecord.h"

namespace precis::summary {

namespace pb = precis::tensorboard;

namespace {

// The reason of the failed stream operation: streams keep no error code, errno has it.
std::string errno_text() { return errno != 0 ? std::strerror(errno) : "unknown error"; }

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

// PyTorch's default directory: runs/<Mon><DD>_<HH-MM-SS>_<host>.
std::string default_log_dir() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::localtime_r(&t, &tm);
  char stamp[64];
  std::strftime(stamp, sizeof stamp, "%b%d_%H-%M-%S", &tm);
  return "runs/" + std::string(stamp) + "_" + host_name();
}

// Distinguishes writers opened by one process in the same second.
std::atomic<int64_t> g_writers{0};

}  // namespace

struct SummaryWriter::Impl {
  std::string log_dir, path;
  SummaryWriterOptions options;
  std::mutex mu;
  std::ofstream file;
  std::string pending;         // framed records not yet written to the file
  int64_t pending_events = 0;
  bool closed = false;
  std::set<std::string> warned_tags;  // add_histogram's non-finite warning, once per tag
  // The background flush.
  std::condition_variable wake;
  bool stop = false;
  std::thread flusher;

  // Frames `e` and queues it; writes the queue out when max_queue events are pending.
  void write(const pb::Event& e) {
    std::string payload;
    PRECIS_CHECK_T(InternalError, e.SerializeToString(&payload), "SummaryWriter: cannot serialise an event for '",
                   path, "'");
    detail::append_tfrecord(pending, payload);
    if (++pending_events >= options.max_queue) write_out();
  }

  void write_out() {
    if (!file.is_open()) return;
    errno = 0;
    if (!pending.empty()) file.write(pending.data(), static_cast<std::streamsize>(pending.size()));
    file.flush();
    PRECIS_CHECK_T(IOError, file.good(), "writing the TensorBoard events file '", path, "' failed: ", errno_text());
    pending.clear();
    pending_events = 0;
  }

  pb::Event event(int64_t step, std::optional<double> walltime) {
    pb::Event e;
    e.set_wall_time(walltime ? *walltime : now_seconds());
    e.set_step(step);
    return e;
  }

  void check_open(const char* what) {
    PRECIS_CHECK_T(StateError, !closed, "SummaryWriter::", what, ": the writer of '", path,
                   "' is closed; open a new SummaryWriter to write more");
  }
};

SummaryWriter::SummaryWriter(std::string log_dir, SummaryWriterOptions options) : impl_(std::make_unique<Impl>()) {
  PRECIS_CHECK(options.max_queue >= 1, "SummaryWriter: max_queue must be >= 1, got ", options.max_queue);
  PRECIS_CHECK(options.flush_secs > 0 && std::isfinite(options.flush_secs),
               "SummaryWriter: flush_secs must be a positive number of seconds, got ", options.flush_secs);
  PRECIS_CHECK(options.filename_suffix.find('/') == std::string::npos,
               "SummaryWriter: filename_suffix '", options.filename_suffix, "' must not contain '/'");
  Impl& m = *impl_;
  m.log_dir = log_dir.empty() ? default_log_dir() : std::move(log_dir);
  m.options = std::move(options);
  std::error_code ec;
  std::filesystem::create_directories(m.log_dir, ec);
  PRECIS_CHECK_T(IOError, !ec && std::filesystem::is_directory(m.log_dir), "cannot create the TensorBoard log folder '",
                 m.log_dir, "': ", ec ? ec.message() : std::string("it is not a folder"));
  // TensorBoard reads a folder's files in name order, and a resumed run's purge_step only works
  // when its file comes after the interrupted run's: the numbers are zero-padded, or writer 10 of a
  // process sorts before its writer 9 within the same second.
  char stamp[32], ids[48];
  std::snprintf(stamp, sizeof stamp, "events.out.tfevents.%010lld.", static_cast<long long>(std::time(nullptr)));
  std::snprintf(ids, sizeof ids, ".%07lld.%06lld", static_cast<long long>(::getpid()),
                static_cast<long long>(g_writers++));
  m.path = (std::filesystem::path(m.log_dir) / (stamp + host_name() + ids + m.options.filename_suffix)).string();
  errno = 0;
  m.file.open(m.path, std::ios::binary | std::ios::trunc);
  PRECIS_CHECK_T(IOError, m.file.is_open(), "cannot create the TensorBoard events file '", m.path, "': ", errno_text());

  // TensorBoard reads the version from the first record; a purge_step START follows at once.
  pb::Event version = m.event(0, std::nullopt);
  version.set_file_version("brain.Event:2");
  m.write(version);
  if (m.options.purge_step) {
    pb::Event start = m.event(*m.options.purge_step, std::nullopt);
    start.mutable_session_log()->set_status(pb::SessionLog::START);
    m.write(start);
  }
  m.write_out();

  m.flusher = std::thread([&m] {
    std::unique_lock<std::mutex> lock(m.mu);
    const auto period = std::chrono::duration<double>(m.options.flush_secs);
    while (!m.stop) {
      if (m.wake.wait_for(lock, period, [&m] { return m.stop; })) break;
      try {
        m.write_out();
      } catch (const Error& e) {
        // The next add_* or flush() reports it to the caller; here there is no one to throw to.
        std::fprintf(stderr, "precis: %s\n", e.what());
      }
    }
  });
}

SummaryWriter::~SummaryWriter() {
  try {
    close();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "precis: SummaryWriter: closing '%s' failed: %s\n", impl_->path.c_str(), e.what());
  }
}

void SummaryWriter::add_scalar(const std::string& tag, double value, int64_t global_step,
                               std::optional<double> walltime) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->check_open("add_scalar");
  pb::Event e = impl_->event(global_step, walltime);
  pb::Summary::Value* v = e.mutable_summary()->add_value();
  v->set_tag(tag);
  v->set_simple_value(static_cast<float>(value));
  impl_->write(e);
}

void SummaryWriter::add_histogram(const std::string& tag, const Tensor& values, int64_t global_step, int64_t bins,
                                  std::optional<double> walltime) {
  PRECIS_CHECK(bins >= 1, "SummaryWriter::add_histogram('", tag, "'): bins must be >= 1, got ", bins);
  PRECIS_CHECK(values.defined(), "SummaryWriter::add_histogram('", tag, "'): the tensor is undefined");
  PRECIS_CHECK_DTYPE(values.is_floating_point(), "SummaryWriter::add_histogram('", tag,
                     "'): values must be floating point, got ", dtype_name(values.dtype()), " of shape ",
                     shape_str(values.shape()), "; convert with .to(DType::f32)");
  // The host copy is made before taking the lock: it may wait for a device.
  const Tensor host = values.detach().cpu().to(DType::f64).contiguous();
  const double* x = host.data_ptr<double>();
  const int64_t n = host.numel();
  double lo = INFINITY, hi = -INFINITY, sum = 0, sum_sq = 0;
  int64_t finite = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) continue;
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
    sum += x[i];
    sum_sq += x[i] * x[i];
    ++finite;
  }
  std::vector<double> counts(static_cast<size_t>(bins), 0.0), limits(static_cast<size_t>(bins));
  // Equal-width buckets over [lo, hi]; all values equal: one bucket of width 0 holds them.
  const double width = (hi - lo) / static_cast<double>(bins);
  for (int64_t b = 0; b < bins; ++b) limits[b] = b + 1 == bins ? hi : lo + width * static_cast<double>(b + 1);
  for (int64_t i = 0; i < n && finite > 0; ++i) {
    if (!std::isfinite(x[i])) continue;
    int64_t b = width > 0 ? static_cast<int64_t>((x[i] - lo) / width) : 0;
    counts[static_cast<size_t>(std::clamp<int64_t>(b, 0, bins - 1))] += 1;
  }

  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->check_open("add_histogram");
  if (finite < n && impl_->warned_tags.insert(tag).second)
    warn(::precis::detail::str_cat("SummaryWriter::add_histogram('", tag, "', step ", global_step, "): ", n - finite, " of ",
                         n, " values are not finite; the histogram leaves them out"));
  if (finite == 0) return;
  pb::Event e = impl_->event(global_step, walltime);
  pb::Summary::Value* v = e.mutable_summary()->add_value();
  v->set_tag(tag);
  pb::HistogramProto* h = v->mutable_histo();
  h->set_min(lo);
  h->set_max(hi);
  h->set_num(static_cast<double>(finite));
  h->set_sum(sum);
  h->set_sum_squares(sum_sq);
  for (int64_t b = 0; b < bins; ++b) {
    h->add_bucket_limit(limits[b]);
    h->add_bucket(counts[b]);
  }
  impl_->write(e);
}

void SummaryWriter::add_text(const std::string& tag, const std::string& text, int64_t global_step,
                             std::optional<double> walltime) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->check_open("add_text");
  pb::Event e = impl_->event(global_step, walltime);
  pb::Summary::Value* v = e.mutable_summary()->add_value();
  v->set_tag(tag);
  v->mutable_metadata()->mutable_plugin_data()->set_plugin_name("text");
  pb::TensorProto* t = v->mutable_tensor();
  t->set_dtype(pb::DT_STRING);
  t->mutable_tensor_shape()->add_dim()->set_size(1);
  t->add_string_val(text);
  impl_->write(e);
}

void SummaryWriter::flush() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->write_out();
}

void SummaryWriter::close() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->closed) return;
    impl_->closed = true;
    impl_->stop = true;
  }
  impl_->wake.notify_all();
  if (impl_->flusher.joinable()) impl_->flusher.join();
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->write_out();
  impl_->file.close();
}

const std::string& SummaryWriter::log_dir() const { return impl_->log_dir; }
const std::string& SummaryWriter::file_path() const { return impl_->path; }

}  // namespace precis::summary
