#include "models/tools/fault_inject.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "tensor/file_io.h"

namespace precis::train {

std::string install_fault_injection_from_env() {
  const char* spec = std::getenv("PRECIS_FAULT_INJECT");
  if (spec == nullptr || *spec == '\0') return "";
  static std::atomic<long> count{0};
  const std::string s = spec;
  if (s == "trace") {
    set_file_fault_hook([](FileOp op, const std::string& path) {
      std::fprintf(stderr, "precis-train: file op %ld: %s %s\n", ++count, file_op_name(op), path.c_str());
      return 0;
    });
    return "";
  }
  const size_t at = s.find('@');
  const std::string what = s.substr(0, at == std::string::npos ? 0 : at);
  char* end = nullptr;
  const long n = at == std::string::npos ? 0 : std::strtol(s.c_str() + at + 1, &end, 10);
  const std::map<std::string, int> kErrnos{
      {"ENOSPC", ENOSPC}, {"EIO", EIO}, {"EROFS", EROFS}, {"EACCES", EACCES}, {"EDQUOT", EDQUOT}};
  if (n <= 0 || end == nullptr || *end != '\0' || (what != "kill" && kErrnos.count(what) == 0))
    return "PRECIS_FAULT_INJECT='" + s + "': expected trace, kill@N or ENOSPC@N (EIO, EROFS, EACCES, EDQUOT) with N >= 1";
  const int err = what == "kill" ? 0 : kErrnos.at(what);
  set_file_fault_hook([n, err](FileOp, const std::string&) {
    if (++count != n) return 0;
    if (err == 0) ::kill(::getpid(), SIGKILL);
    return err;
  });
  return "";
}

}  // namespace precis::train
