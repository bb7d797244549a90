#include "models/train/checkpoint.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <regex>

#include "core/error.h"
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

std::optional<int64_t> step_of(const fs::path& p) {
  static const std::regex kName(R"(step-(\d+)\.safetensors)");
  std::smatch m;
  const std::string name = p.filename().string();
  if (!std::regex_match(name, m, kName)) return std::nullopt;
  return std::stoll(m[1].str());
}

std::string others_hint(const std::string& path) {
  std::string list;
  const fs::path parent = fs::path(path).parent_path();
  for (const std::string& other : list_checkpoints(parent.empty() ? "." : parent.string()))
    if (fs::path(other) != fs::path(path)) list += (list.empty() ? "" : ", ") + other;
  if (list.empty()) return " No other checkpoint is in its folder.";
  return " Other checkpoints in its folder (untouched; resume from one with --resume-from FILE): " + list + ".";
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
  PRECIS_CHECK_T(IOError, !ec, "save_checkpoint: cannot create the checkpoint folder '", dir, "': ", ec.message());
  NamedTensors tensors(state.begin(), state.end());
  metadata[kCrcKey] = std::to_string(checksum(tensors));
  metadata[kCountKey] = std::to_string(tensors.size());
  const std::string path = checkpoint_path(dir, global_step);
  save_safetensors(path, tensors, metadata);
  // Only now that the new file is complete may older ones go.
  std::vector<std::string> all = list_checkpoints(dir);
  for (size_t i = 0; i + static_cast<size_t>(keep) < all.size(); ++i)
    if (fs::path(all[i]) != fs::path(path)) fs::remove(all[i], ec);
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
