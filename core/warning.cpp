#include "core/warning.h"

#include <cstdio>
#include <mutex>
#include <set>

namespace precis {
namespace {

std::mutex g_mutex;
WarningHandler g_handler;
std::set<std::string> g_seen;

}  // namespace

void warn(const std::string& message) {
  WarningHandler handler;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (!g_seen.insert(message).second) return;
    handler = g_handler;
  }
  // Called outside the lock so a handler may itself warn or throw.
  if (handler) {
    handler(message);
  } else {
    std::fprintf(stderr, "precis warning: %s\n", message.c_str());
  }
}

WarningHandler set_warning_handler(WarningHandler handler) {
  std::lock_guard<std::mutex> lock(g_mutex);
  WarningHandler previous = std::move(g_handler);
  g_handler = std::move(handler);
  g_seen.clear();
  return previous;
}

}  // namespace precis
