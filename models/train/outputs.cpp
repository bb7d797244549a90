#include "models/train/outputs.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include "core/error.h"

namespace precis::train {

namespace fs = std::filesystem;

namespace {

[[noreturn]] void refuse(const char* option, const std::string& value, const std::string& what,
                         const std::string& reason, const char* kind) {
  throw IOError(detail::str_cat(option, " ", value, ": cannot ", what, ": ", reason, "; point ", option, " at a ",
                                kind, " this user can write to"));
}

// The folder `dir` of the option's `value` (the value itself, or a file's parent), created.
void require_folder(const char* option, const std::string& dir, const std::string& value, const char* kind) {
  const std::string which = dir == value ? "the folder" : "its folder '" + dir + "'";
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) refuse(option, value, "create " + which, ec.message(), kind);
  if (!fs::is_directory(dir, ec)) refuse(option, value, "use " + which, "it is not a folder", kind);
}

// A file that the run will create in `dir`, created and removed now (O_EXCL: never an existing one).
void probe_folder(const char* option, const std::string& dir) {
  require_folder(option, dir, dir, "folder");
  const std::string probe = (fs::path(dir) / (".precis-write-test." + std::to_string(::getpid()))).string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    const int err = errno;
    refuse(option, dir, "create files in the folder", std::strerror(err), "folder");
  }
  ::close(fd);
  ::unlink(probe.c_str());
}

// A file the run appends to or creates: opened for appending as the run will open it (its data
// untouched), and removed again when this created it.
void probe_file(const char* option, const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) require_folder(option, parent.string(), path, "file");
  std::error_code ec;
  const bool existed = fs::exists(path, ec);
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    refuse(option, path, "open the file for writing", std::strerror(err), "file");
  }
  ::close(fd);
  if (!existed) ::unlink(path.c_str());
}

}  // namespace

void require_writable_outputs(const TrainOptions& o) {
  if (!o.checkpoint_dir.empty()) probe_folder("--checkpoint", o.checkpoint_dir);
  if (!o.tensorboard.empty()) probe_folder("--tensorboard", o.tensorboard);
  if (!o.metrics.empty()) probe_file("--metrics", o.metrics);
  // An existing vocabulary is only read; a missing one is trained and written there.
  std::error_code ec;
  if (o.task == Task::bert_mini && !o.vocab.empty() && !fs::exists(o.vocab, ec)) probe_file("--vocab", o.vocab);
}

}  // namespace precis::train
