#include "core/cuda_backend.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <cstdlib>

namespace precis {

namespace {

struct Backend {
  void* handle = nullptr;
  const detail::CudaCoreHooks* hooks = nullptr;
  std::string why;  // the reason it is not loaded
};

#ifdef PRECIS_CUDA_BACKEND_FILE
constexpr const char* kDefaultFile = PRECIS_CUDA_BACKEND_FILE;
constexpr const char* kNeeds = "; it needs " PRECIS_CUDA_BACKEND_NEEDS " on the library path (LD_LIBRARY_PATH or ldconfig)";
#else
// A build without CUDA has no backend of its own, but still loads one named by
// $PRECIS_CUDA_BACKEND: the tests' fake device (tests/support/fake_cuda) runs in every build.
constexpr const char* kDefaultFile = nullptr;
constexpr const char* kNeeds = "";
#endif

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// The path of the object (libprecis.so, or the executable when precis was linked statically) that
// holds this code.
std::string own_object() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&cuda_backend_available), &info) == 0 || info.dli_fname == nullptr) return "";
  return info.dli_fname;
}

Backend load() {
  Backend b;
  const char* env = std::getenv("PRECIS_CUDA_BACKEND");
  const bool named = env != nullptr && *env != '\0';
  if (!named && kDefaultFile == nullptr) {
    b.why = "this precis was built without CUDA (configure with -DPRECIS_CUDA=ON where nvcc is installed)";
    return b;
  }
  const std::string file = kDefaultFile != nullptr ? kDefaultFile : "libprecis_cuda.so";
  const std::string self = own_object();
  const std::string self_name = self.substr(self.find_last_of('/') + 1);
  if (self_name.rfind("libprecis.so", 0) != 0) {
    b.why = "the CUDA backend (" + file + ") works with the shared libprecis.so, and this program links the static "
            "libprecis.a (into " + (self.empty() ? std::string("the executable") : self) +
            "): link precis::precis instead of precis::precis_static to use CUDA";
    return b;
  }
  std::string path;
  if (named) {
    path = env;
    if (!file_exists(path)) {
      b.why = "PRECIS_CUDA_BACKEND=" + path + " names no file; point it at " + file + " or unset it";
      return b;
    }
  } else {
    const std::string beside = self.substr(0, self.find_last_of('/') + 1) + file;
    path = file_exists(beside) ? beside : file;
  }
  // RTLD_NOW: a CUDA library that is missing or too old is found here, with dlerror's reason,
  // rather than as a crash at the first call into it.
  void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* err = ::dlerror();
    b.why = "the CUDA backend " + path + " could not be loaded (" + (err ? err : "unknown reason") + ")" + kNeeds;
    return b;
  }
  using HooksFn = const detail::CudaCoreHooks* (*)();
  auto fn = reinterpret_cast<HooksFn>(::dlsym(h, "precis_cuda_core_hooks"));
  if (fn == nullptr) {
    b.why = path + " is not a precis CUDA backend (it has no precis_cuda_core_hooks)";
    ::dlclose(h);
    return b;
  }
  b.handle = h;
  b.hooks = fn();
  return b;
}

// Loaded once and kept: the backend's allocators and kernels live as long as the process.
const Backend& backend() {
  static const Backend* const b = new Backend(load());
  return *b;
}

}  // namespace

bool cuda_backend_available() { return backend().handle != nullptr; }

std::string cuda_backend_unavailable_reason() { return backend().why; }

namespace detail {

void* cuda_backend_symbol(const char* name) {
  const Backend& b = backend();
  return b.handle == nullptr ? nullptr : ::dlsym(b.handle, name);
}

const CudaCoreHooks* cuda_core_hooks() { return backend().hooks; }

}  // namespace detail
}  // namespace precis
