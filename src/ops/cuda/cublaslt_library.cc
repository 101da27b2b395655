// Opening cuBLASLt at run time (cublaslt_library.h says why and where from).
#include "ops/cuda/cublaslt_library.h"

#include <dlfcn.h>

#include "base/error.h"

#ifndef QUILL_CUBLASLT_DIR
#error "QUILL_CUBLASLT_DIR (the toolkit's directory of libcublasLt, src/CMakeLists.txt) is not defined"
#endif

namespace quill::cuda {

namespace {

void* resolve(void* handle, const char* name, const std::string& library) {
  dlerror();
  void* symbol = dlsym(handle, name);
  const char* why = dlerror();
  QUILL_CHECK(symbol != nullptr, "cuBLASLt {} has no function {} ({}); quill was compiled against cuBLASLt {}.{}.{}",
              library, name, why ? why : "a null symbol", CUBLAS_VER_MAJOR, CUBLAS_VER_MINOR, CUBLAS_VER_PATCH);
  return symbol;
}

}  // namespace

std::string cublaslt_soname() { return "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR); }

std::vector<std::string> cublaslt_candidates() {
  return {cublaslt_soname(), std::string(QUILL_CUBLASLT_DIR) + "/" + cublaslt_soname()};
}

CublasLt load_cublaslt(const std::vector<std::string>& candidates) {
  void* handle = nullptr;
  std::string tried, loaded;
  for (const std::string& name : candidates) {
    // RTLD_LOCAL: nothing else resolves symbols against it; RTLD_NODELETE: a later dlclose (none
    // here) or the last backend's end never unloads it, so its initializer runs once a process.
    handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (handle != nullptr) {
      loaded = name;
      break;
    }
    const char* why = dlerror();
    tried += fmt::format("\n  {}: {}", name, why ? why : "not loaded");
  }
  QUILL_CHECK(handle != nullptr,
              "cannot load cuBLASLt ({}), which the CUDA backend needs; tried:{}\n"
              "put the directory that holds it (the CUDA toolkit's lib) on LD_LIBRARY_PATH",
              cublaslt_soname(), tried);
  CublasLt lt;
#define QUILL_CUBLASLT_RESOLVE(name) lt.name = reinterpret_cast<decltype(lt.name)>(resolve(handle, #name, loaded));
  QUILL_CUBLASLT_FUNCTIONS(QUILL_CUBLASLT_RESOLVE)
#undef QUILL_CUBLASLT_RESOLVE
  return lt;
}

}  // namespace quill::cuda
