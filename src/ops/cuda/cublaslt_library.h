// cuBLASLt, loaded when a CUDA backend is first created instead of when the process starts.
//
// Why: libcublasLt's static initializer allocates and touches ~200 MB at load time; linked into
// quill it ran for every command, and was ~80% of a process that does nothing (`quill data build
// --help`: 80-98 ms and 216 MB resident before, bench/tokenizer/results/2026-12-04-local-startup.txt).
// So quill does not link it: the backend opens the library with dlopen and calls it through this
// table of the functions it uses, each with the exact type of its declaration in <cublasLt.h>
// (decltype), so a call through the table is the call the header declares.
//
// Where it comes from: first the library's soname (libcublasLt.so.<CUBLAS_VER_MAJOR>, the major
// version of the headers quill was compiled with), searched as the dynamic loader searched for it
// when quill linked it (LD_LIBRARY_PATH, the executable's RUNPATH, ld.so.cache, the default
// directories); then the same name in the toolkit directory recorded at configure time
// (QUILL_CUBLASLT_DIR), so a build tree runs without LD_LIBRARY_PATH. It stays loaded for the rest
// of the process (RTLD_NODELETE): its initializer runs once however many backends come and go.
#pragma once

#include <cublasLt.h>

#include <string>
#include <vector>

namespace quill::cuda {

// Every cuBLASLt function the CUDA backend calls (grep src/ops/cuda for cublasLt: anything else
// would not link, as quill no longer links the library).
#define QUILL_CUBLASLT_FUNCTIONS(X)        \
  X(cublasLtCreate)                        \
  X(cublasLtDestroy)                       \
  X(cublasLtGetStatusString)               \
  X(cublasLtMatmul)                        \
  X(cublasLtMatmulAlgoConfigGetAttribute)  \
  X(cublasLtMatmulAlgoGetHeuristic)        \
  X(cublasLtMatmulDescCreate)              \
  X(cublasLtMatmulDescDestroy)             \
  X(cublasLtMatmulDescSetAttribute)        \
  X(cublasLtMatmulPreferenceCreate)        \
  X(cublasLtMatmulPreferenceDestroy)       \
  X(cublasLtMatmulPreferenceSetAttribute)  \
  X(cublasLtMatrixLayoutCreate)            \
  X(cublasLtMatrixLayoutDestroy)

// The functions, named as in the header: `lt.cublasLtMatmul(...)` is `cublasLtMatmul(...)`.
struct CublasLt {
#define QUILL_CUBLASLT_MEMBER(name) decltype(&::name) name = nullptr;
  QUILL_CUBLASLT_FUNCTIONS(QUILL_CUBLASLT_MEMBER)
#undef QUILL_CUBLASLT_MEMBER
};

// The library's soname (libcublasLt.so.13 for CUDA 13).
std::string cublaslt_soname();

// Where load_cublaslt() looks, in order: the soname, then QUILL_CUBLASLT_DIR/soname.
std::vector<std::string> cublaslt_candidates();

// Opens the first of `candidates` that loads (dlopen names or paths) and resolves every function.
// An error names each candidate with the loader's reason, or the library and the function it
// lacks. Each call opens it again (a reference count once loaded); nothing is cached here.
CublasLt load_cublaslt(const std::vector<std::string>& candidates = cublaslt_candidates());

}  // namespace quill::cuda
