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
  const std::string self = own_object();
  const std::string self_name = self.substr(self.find_last_of('/') + 1);
  if (self_name.rfind("libprecis.so", 0) != 0) {
    b.why = "the CUDA backend (" PRECIS_CUDA_BACKEND_FILE ") works with the shared libprecis.so, and this program "
            "links the static libprecis.a (into " + (self.empty() ? std::string("the executable") : self) +
            "): link precis::precis instead of precis::precis_static to use CUDA";
    return b;
  }
  std::string path;
  if (const char* env = std::getenv("PRECIS_CUDA_BACKEND"); env != nullptr && *env != '\0') {
    path = env;
    if (!file_exists(path)) {
      b.why = "PRECIS_CUDA_BACKEND=" + path + " names no file; point it at " PRECIS_CUDA_BACKEND_FILE
              " or unset it";
      return b;
    }
  } else {
    const std::string beside = self.substr(0, self.find_last_of('/') + 1) + PRECIS_CUDA_BACKEND_FILE;
    path = file_exists(beside) ? beside : PRECIS_CUDA_BACKEND_FILE;
  }
  // RTLD_NOW: a CUDA library that is missing or too old is found here, with dlerror's reason,
  // rather than as a crash at the first call into it.
  void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* err = ::dlerror();
    b.why = "the CUDA backend " + path + " could not be loaded (" + (err ? err : "unknown reason") +
            "); it needs " PRECIS_CUDA_BACKEND_NEEDS " on the library path (LD_LIBRARY_PATH or ldconfig)";
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
#else
Backend load() {
  Backend b;
  b.why = "this precis was built without CUDA (configure with -DPRECIS_CUDA=ON where nvcc is installed)";
  return b;
}
#endif

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
