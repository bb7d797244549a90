#include "fuzz/common.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>

#include "core/thread_pool.h"

namespace precis::fuzz {

const std::string& write_temp(const uint8_t* data, size_t size, const std::string& suffix) {
  // One file per suffix and process: parallel fuzzing jobs (-jobs=N) never share a file.
  static std::map<std::string, std::string> paths;
  auto it = paths.find(suffix);
  if (it == paths.end()) {
    const char* dir = std::getenv("TMPDIR");
    std::string path = std::string(dir && *dir ? dir : "/tmp") + "/precis-fuzz-" + std::to_string(::getpid()) + suffix;
    it = paths.emplace(suffix, path).first;
  }
  std::ofstream out(it->second, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  out.close();
  if (!out) std::abort();  // the harness itself failed, not the code under test
  return it->second;
}

void init_once() {
  static bool done = [] {
    precis::set_num_threads(1);
    return true;
  }();
  (void)done;
}

}  // namespace precis::fuzz
