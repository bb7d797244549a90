#pragma once
// A temporary folder for tests that write files: unique per process and instance, removed with
// everything in it at scope exit.
#include <filesystem>
#include <string>
#include <vector>

namespace precis::testing {

class ScratchDir {
 public:
  /// A fresh empty folder <system temp>/precis-<tag>-<pid>-<n>.
  explicit ScratchDir(const std::string& tag = "test");
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  /// The path of `name` inside the folder.
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  /// The names of what the folder holds, sorted.
  std::vector<std::string> entries() const;

 private:
  std::filesystem::path path_;
};

}  // namespace precis::testing
