#include "tensor/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <string>

#include "core/error.h"

namespace precis {

namespace {

std::mutex g_fault_mutex;
FileFaultHook g_fault_hook;
std::atomic<bool> g_fault_set{false};

// Runs `call` unless the fault hook fails `op`: then -1 with errno set, the call not made.
template <typename F>
auto guarded(FileOp op, const std::string& path, F&& call) -> decltype(call()) {
  if (const int err = file_fault(op, path)) {
    errno = err;
    return -1;
  }
  return call();
}

[[noreturn]] void throw_errno(const std::string& what, const std::string& path, int err) {
  throw IOError(detail::str_cat(what, " '", path, "': ", std::strerror(err)));
}

std::string parent_dir(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

void write_all(int fd, const void* data, size_t n, const std::string& tmp) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    // Linux writes at most ~2 GiB per call; loop over partial writes and EINTR.
    const ssize_t w = guarded(FileOp::write, tmp, [&] { return ::write(fd, p, n); });
    if (w < 0) {
      if (errno == EINTR) continue;
      throw_errno("write failed for", tmp, errno);
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

}  // namespace

const char* file_op_name(FileOp op) {
  switch (op) {
    case FileOp::create: return "create";
    case FileOp::write: return "write";
    case FileOp::fsync: return "fsync";
    case FileOp::close: return "close";
    case FileOp::rename: return "rename";
    case FileOp::open_dir: return "open_dir";
    case FileOp::fsync_dir: return "fsync_dir";
    case FileOp::remove: return "remove";
  }
  return "?";
}

FileFaultHook set_file_fault_hook(FileFaultHook hook) {
  std::lock_guard<std::mutex> lock(g_fault_mutex);
  std::swap(hook, g_fault_hook);
  g_fault_set.store(g_fault_hook != nullptr, std::memory_order_release);
  return hook;
}

int file_fault(FileOp op, const std::string& path) {
  if (!g_fault_set.load(std::memory_order_acquire)) return 0;
  FileFaultHook hook;
  {
    std::lock_guard<std::mutex> lock(g_fault_mutex);
    hook = g_fault_hook;
  }
  return hook ? hook(op, path) : 0;
}

void write_file_atomic(const std::string& path, const std::function<void(const ByteSink&)>& produce) {
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  int fd = guarded(FileOp::create, tmp, [&] { return ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666); });
  if (fd < 0) throw_errno("cannot create the temporary file", tmp, errno);
  try {
    // Small pieces (a checkpoint holds hundreds of 0-d and small tensors) are gathered so that a
    // file takes few write calls; pieces of a buffer's size or more go straight through.
    constexpr size_t kBuffer = size_t{1} << 20;
    std::string pending;
    auto flush = [&] {
      write_all(fd, pending.data(), pending.size(), tmp);
      pending.clear();
    };
    produce([&](const void* data, size_t n) {
      if (!pending.empty() && pending.size() + n > kBuffer) flush();
      if (n >= kBuffer) {
        write_all(fd, data, n, tmp);
      } else {
        pending.append(static_cast<const char*>(data), n);
      }
    });
    if (!pending.empty()) flush();
    if (guarded(FileOp::fsync, tmp, [&] { return ::fsync(fd); }) != 0) throw_errno("fsync failed for", tmp, errno);
    // The descriptor is closed either way; an injected failure only changes what is reported.
    const int injected = file_fault(FileOp::close, tmp);
    const int rc = ::close(fd);
    fd = -1;
    if (rc != 0 || injected != 0) throw_errno("close failed for", tmp, injected != 0 ? injected : errno);
    if (guarded(FileOp::rename, path, [&] { return ::rename(tmp.c_str(), path.c_str()); }) != 0)
      throw_errno("cannot rename the temporary file to", path, errno);
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  // Make the rename durable. Some file systems cannot fsync a directory (EINVAL): the file itself
  // is complete either way, so only real I/O errors are reported.
  const std::string dir = parent_dir(path);
  const int dfd = guarded(FileOp::open_dir, dir, [&] { return ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); });
  if (dfd < 0) throw_errno("cannot open the directory to fsync it:", dir, errno);
  const int rc = guarded(FileOp::fsync_dir, dir, [&] { return ::fsync(dfd); });
  const int err = errno;
  ::close(dfd);
  if (rc != 0 && err != EINVAL && err != ENOTSUP) throw_errno("fsync failed for the directory", dir, err);
}

const char* file_kind(unsigned mode) {
  switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a directory";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFIFO: return "a FIFO (named pipe)";
    case S_IFSOCK: return "a socket";
    default: return "not a regular file";
  }
}

ReadOnlyFile::ReadOnlyFile(const std::string& path) : path_(path) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer before the check
  // below could refuse it. It has no effect on reads from the regular files that pass.
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd_ < 0) throw_errno("cannot open", path, errno);
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int err = errno;
    ::close(fd_);
    throw_errno("cannot stat", path, err);
  }
  // A directory "opens" for reading, and its size (or a device's) says nothing of what a read
  // returns: refuse every non-regular file by name before anything trusts st_size.
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    throw IOError(detail::str_cat("'", path, "' is ", file_kind(st.st_mode), ", not a regular file"));
  }
  size_ = static_cast<uint64_t>(st.st_size);
}

ReadOnlyFile::~ReadOnlyFile() {
  if (fd_ >= 0) ::close(fd_);
}

void ReadOnlyFile::read_at(uint64_t offset, void* dst, size_t n) const {
  char* p = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t r = ::pread(fd_, p, n, static_cast<off_t>(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      throw_errno("read failed for", path_, errno);
    }
    if (r == 0)
      throw IOError(detail::str_cat("'", path_, "': unexpected end of file at byte ", offset,
                                    " (was the file truncated while being read?)"));
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
}

}  // namespace precis
