#include "models/train/checkpoint.h"

#include <signal.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstdio>
#include <filesystem>
#include <regex>

#include "core/error.h"
#include "tensor/file_io.h"
#include "tensor/safetensors.h"

namespace precis::train {

namespace fs = std::filesystem;

namespace {

constexpr const char* kCrcKey = "precis.crc32";
constexpr const char* kCountKey = "precis.tensors";

// CRC-32 over the tensors' contiguous CPU bytes, in the given order (the order save_safetensors
// writes the header in, which load_safetensors returns).
uint32_t checksum(const NamedTensors& tensors) {
  uLong crc = crc32(0L, Z_NULL, 0);
  for (const auto& [name, t] : tensors) {
    crc = crc32(crc, reinterpret_cast<const Bytef*>(name.data()), static_cast<uInt>(name.size()));
    Tensor c = t.to(Device::cpu()).contiguous();
    const auto* p = static_cast<const Bytef*>(c.data_ptr());
    size_t n = static_cast<size_t>(c.numel()) * c.element_size();
    while (n > 0) {
      const uInt chunk = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
      crc = crc32(crc, p, chunk);
      p += chunk;
      n -= chunk;
    }
  }
  return static_cast<uint32_t>(crc);
}

// The decimal digits as a non-negative int64, or nullopt when they exceed its range.
std::optional<int64_t> parse_digits(const std::string& digits) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return v;
}

// The step in a checkpoint's file name. A name that matches but whose step exceeds int64 was
// not written by save_checkpoint (steps are int64): refusing it, by name, is safer than skipping
// it, which would silently resume from an older checkpoint.
std::optional<int64_t> step_of(const fs::path& p) {
  static const std::regex kName(R"(step-(\d+)\.safetensors)");
  std::smatch m;
  const std::string name = p.filename().string();
  if (!std::regex_match(name, m, kName)) return std::nullopt;
  const std::optional<int64_t> step = parse_digits(m[1].str());
  PRECIS_CHECK_T(IOError, step.has_value(), "'", p.string(), "' is named like a checkpoint but its step ",
                 m[1].str(), " exceeds 9223372036854775807 (int64), so precis did not write it; rename or move it "
                 "out of the checkpoint folder");
  return step;
}

std::string others_hint(const std::string& path) {
  std::string list;
  const fs::path parent = fs::path(path).parent_path();
  for (const std::string& other : list_checkpoints(parent.empty() ? "." : parent.string()))
    if (fs::path(other) != fs::path(path)) list += (list.empty() ? "" : ", ") + other;
  if (list.empty()) return " No other checkpoint is in its folder.";
  return " Other checkpoints in its folder (untouched; resume from one with --resume-from FILE): " + list + ".";
}

// Temporary files that writers killed mid-write left behind ("step-*.safetensors.tmp.<pid>.<n>",
// tensor/file_io.h): never taken for checkpoints (list_checkpoints matches whole names only),
// but they hold disk space. Those of processes that no longer exist are removed.
void remove_stale_temporaries(const std::string& dir) {
  static const std::regex kTemp(R"(step-\d+\.safetensors\.tmp\.(\d+)\.\d+)");
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string name = entry.path().filename().string();
    if (!std::regex_match(name, m, kTemp)) continue;
    // A pid past pid_t's range names no process precis ran: not ours to judge, kept.
    const std::optional<int64_t> pid = parse_digits(m[1].str());
    if (!pid || *pid > INT32_MAX || *pid == static_cast<int64_t>(::getpid()) || *pid <= 0) continue;
    if (::kill(static_cast<pid_t>(*pid), 0) == 0 || errno != ESRCH) continue;  // alive, or not ours to judge
    if (file_fault(FileOp::remove, entry.path().string()) == 0) fs::remove(entry.path(), ec);
  }
}

// Why a save into `dir` may have failed, from the folder's state (the error itself says which
// system call failed and how).
std::string folder_diagnosis(const std::string& dir, uint64_t bytes_needed) {
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) != 0) return "";
  if (st.f_flag & ST_RDONLY) return " The folder is on a read-only file system: point --checkpoint at a writable folder.";
  if (::access(dir.c_str(), W_OK) != 0)
    return " The folder is not writable by this user: fix its permissions or point --checkpoint elsewhere.";
  const uint64_t free_bytes = static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
  if (free_bytes < bytes_needed)
    return " The disk is full: " + std::to_string(free_bytes) + " bytes free, the checkpoint needs about " +
           std::to_string(bytes_needed) + "; free space or point --checkpoint at another disk.";
  return "";
}

uint64_t data_bytes(const NamedTensors& tensors) {
  uint64_t n = 0;
  for (const auto& [name, t] : tensors) n += static_cast<uint64_t>(t.numel()) * t.element_size();
  return n;
}

}  // namespace

std::string checkpoint_path(const std::string& dir, int64_t global_step) {
  char name[64];
  std::snprintf(name, sizeof name, "step-%09lld.safetensors", static_cast<long long>(global_step));
  return (fs::path(dir) / name).string();
}

std::vector<std::string> list_checkpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return {};
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (!entry.is_regular_file()) continue;
    if (auto step = step_of(entry.path())) found.emplace_back(*step, entry.path().string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

std::optional<std::string> latest_checkpoint(const std::string& dir) {
  auto all = list_checkpoints(dir);
  if (all.empty()) return std::nullopt;
  return all.back();
}

std::string save_checkpoint(const std::string& dir, int64_t global_step, const StateDict& state,
                            std::map<std::string, std::string> metadata, int keep) {
  PRECIS_CHECK(keep >= 1, "save_checkpoint: keep must be >= 1 (got ", keep, ")");
  std::error_code ec;
  fs::create_directories(dir, ec);
  PRECIS_CHECK_T(IOError, !ec, "cannot create the checkpoint folder '", dir, "': ", ec.message(),
                 "; point --checkpoint at a folder this user can write to");
  NamedTensors tensors(state.begin(), state.end());
  metadata[kCrcKey] = std::to_string(checksum(tensors));
  metadata[kCountKey] = std::to_string(tensors.size());
  const std::string path = checkpoint_path(dir, global_step);
  remove_stale_temporaries(dir);
  const std::vector<std::string> before = list_checkpoints(dir);
  try {
    save_safetensors(path, tensors, metadata);
  } catch (const IOError& e) {
    // write_file_atomic removed its temporary file and left `path` as it was; say what is usable.
    std::string previous;
    for (auto it = before.rbegin(); it != before.rend() && previous.empty(); ++it)
      if (fs::path(*it) != fs::path(path)) previous = *it;
    const bool renamed = fs::exists(path) && std::find(before.begin(), before.end(), path) == before.end();
    throw IOError(detail::str_cat(
        "cannot write the checkpoint of step ", global_step, " to '", path, "': ", e.what(), ".",
        renamed ? " The file itself is complete (it was renamed into place) but the folder could not be synced, so "
                  "it may not survive a power loss."
                : "",
        folder_diagnosis(dir, data_bytes(tensors)),
        previous.empty() ? " No earlier checkpoint is in '" + dir + "'."
                         : " The previous checkpoint '" + previous + "' is intact: resume from it with --resume."));
  }
  // Only now that the new file is complete may older ones go. A removal that fails (or a kill
  // between removals) leaves an extra old checkpoint, which the next save removes.
  std::vector<std::string> all = list_checkpoints(dir);
  for (size_t i = 0; i + static_cast<size_t>(keep) < all.size(); ++i)
    if (fs::path(all[i]) != fs::path(path) && file_fault(FileOp::remove, all[i]) == 0) fs::remove(all[i], ec);
  return path;
}

Checkpoint load_checkpoint(const std::string& path) {
  PRECIS_CHECK_T(IOError, fs::is_regular_file(path), "cannot resume: checkpoint '", path, "' does not exist.",
                 others_hint(path));
  SafetensorsFile file;
  try {
    file = load_safetensors(path);
  } catch (const Error& e) {
    throw IOError(std::string("cannot resume: checkpoint '") + path + "' is damaged (" + e.what() +
                  "). It was not modified." + others_hint(path));
  }
  auto crc = file.metadata.find(kCrcKey);
  auto count = file.metadata.find(kCountKey);
  PRECIS_CHECK_T(IOError, crc != file.metadata.end() && count != file.metadata.end(), "cannot resume: '", path,
                 "' is a safetensors file but not a precis-train checkpoint (no ", kCrcKey, " metadata).",
                 others_hint(path));
  PRECIS_CHECK_T(IOError, count->second == std::to_string(file.tensors.size()), "cannot resume: checkpoint '", path,
                 "' is damaged: it should hold ", count->second, " tensors but holds ", file.tensors.size(), ".",
                 others_hint(path));
  const std::string actual = std::to_string(checksum(file.tensors));
  PRECIS_CHECK_T(IOError, actual == crc->second, "cannot resume: checkpoint '", path,
                 "' is damaged: its data fails the CRC-32 check (stored ", crc->second, ", computed ", actual,
                 "). It was not modified.", others_hint(path));
  Checkpoint out;
  out.path = path;
  out.metadata = std::move(file.metadata);
  for (auto& [name, t] : file.tensors) out.state.emplace(name, std::move(t));
  return out;
}

}  // namespace precis::train
