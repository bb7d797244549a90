#include "tensor/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace precis {

namespace {

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
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw_errno("write failed for", tmp, errno);
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

}  // namespace

void write_file_atomic(const std::string& path, const std::function<void(const ByteSink&)>& produce) {
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) throw_errno("cannot create the temporary file", tmp, errno);
  try {
    produce([&](const void* data, size_t n) { write_all(fd, data, n, tmp); });
    if (::fsync(fd) != 0) throw_errno("fsync failed for", tmp, errno);
    const int rc = ::close(fd);
    fd = -1;
    if (rc != 0) throw_errno("close failed for", tmp, errno);
    if (::rename(tmp.c_str(), path.c_str()) != 0) throw_errno("cannot rename the temporary file to", path, errno);
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  // Make the rename durable. Some file systems cannot fsync a directory (EINVAL): the file itself
  // is complete either way, so only real I/O errors are reported.
  const std::string dir = parent_dir(path);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) throw_errno("cannot open the directory to fsync it:", dir, errno);
  const int rc = ::fsync(dfd);
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
