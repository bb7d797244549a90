#pragma once
// File helpers for checkpoint formats: crash-safe whole-file writes and positional reads that
// report every failure as precis::IOError naming the file.
#include <cstdint>
#include <functional>
#include <string>

namespace precis {

/// Receives consecutive chunks of a file's bytes.
using ByteSink = std::function<void(const void* data, size_t n)>;

/// Writes a file through `produce(sink)` so that `path` never holds a partial file: the bytes go
/// to "<path>.tmp.<pid>.<n>" (n distinguishes concurrent writers in one process), which is
/// fsync'ed and renamed over `path`; then the directory is fsync'ed so the rename survives a
/// power loss. When produce or any step throws, the temporary file is removed, `path` is left as
/// it was, and the exception propagates (system errors as IOError). Pieces smaller than 1 MiB are
/// gathered into write calls of up to 1 MiB.
void write_file_atomic(const std::string& path, const std::function<void(const ByteSink&)>& produce);

/// The system calls of a crash-safe write (write_file_atomic, in this order; `write` repeats), and
/// the removal of a superseded file (checkpoint rotation).
enum class FileOp { create, write, fsync, close, rename, open_dir, fsync_dir, remove };
/// "create", "write", ... "remove".
const char* file_op_name(FileOp op);

/// Fault injection, for tests only: when a hook is set, hook(op, path) runs before each FileOp
/// call; a nonzero return (an errno value such as ENOSPC) makes that call fail with it without
/// being made, so the caller's real error handling runs. A hook may also end the process there (a
/// kill at that exact point). Process-wide; returns the previous hook (nullptr removes it).
using FileFaultHook = std::function<int(FileOp op, const std::string& path)>;
FileFaultHook set_file_fault_hook(FileFaultHook hook);
/// The installed hook's answer for (op, path); 0 (go ahead) when none is set.
int file_fault(FileOp op, const std::string& path);

/// What a stat mode describes, for messages: "a directory", "a FIFO (named pipe)", ...
const char* file_kind(unsigned mode);

/// A regular file opened for reading.
class ReadOnlyFile {
 public:
  /// Throws IOError naming the path when it cannot be opened or is not a regular file (saying
  /// what it is instead: a directory, a FIFO, a device, ...).
  explicit ReadOnlyFile(const std::string& path);
  ~ReadOnlyFile();
  ReadOnlyFile(const ReadOnlyFile&) = delete;
  ReadOnlyFile& operator=(const ReadOnlyFile&) = delete;

  /// The size when opened.
  uint64_t size() const { return size_; }
  /// Reads exactly n bytes at `offset`; throws IOError on an error or a short read (the file
  /// shrank since it was opened).
  void read_at(uint64_t offset, void* dst, size_t n) const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

}  // namespace precis
