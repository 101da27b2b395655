// Opening cuBLASLt at run time (ops/cuda/cublaslt_library.h). Loading the library and resolving its
// functions needs no GPU, so these run everywhere the CUDA backend is built.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <filesystem>

#include "ops/cuda/cublaslt_library.h"
#include "util/test_util.h"

namespace quill::cuda {
namespace {

// (Paths built with fmt: GCC 12 warns falsely, -Wrestrict, on "literal" + std::string.)
std::string in_dir(const char* dir) { return fmt::format("{}/{}", dir, cublaslt_soname()); }

TEST(CublasLtLibrary, SonameFollowsTheHeadersMajorVersion) {
  EXPECT_EQ(cublaslt_soname(), fmt::format("libcublasLt.so.{}", CUBLAS_VER_MAJOR));
  const std::vector<std::string> where = cublaslt_candidates();
  ASSERT_EQ(where.size(), 2u);
  EXPECT_EQ(where[0], cublaslt_soname());
  // The configure-time directory (src/CMakeLists.txt: where CMake found the library), absolute.
  EXPECT_EQ(where[1].front(), '/') << where[1];
  EXPECT_TRUE(where[1].ends_with(in_dir(""))) << where[1];
}

TEST(CublasLtLibrary, LoadsAndResolvesEveryFunction) {
  const CublasLt lt = load_cublaslt();
#define QUILL_EXPECT_RESOLVED(name) EXPECT_NE(lt.name, nullptr) << #name;
  QUILL_CUBLASLT_FUNCTIONS(QUILL_EXPECT_RESOLVED)
#undef QUILL_EXPECT_RESOLVED
  // A call that needs no device: the library's own name of a status.
  const std::string why = lt.cublasLtGetStatusString(CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_NE(why.find("not supported"), std::string::npos) << why;
}

TEST(CublasLtLibrary, TheToolkitPathAloneIsEnough) {
  // The build tree's fallback when the soname is not on the loader's path. A bundle carried to another
  // machine (scripts/gpu-bundle.sh) has no toolkit at the configure-time path: nothing to test there.
  if (!std::filesystem::exists(cublaslt_candidates()[1]))
    GTEST_SKIP() << cublaslt_candidates()[1] << " is not on this machine (a carried bundle)";
  const CublasLt lt = load_cublaslt({in_dir("/nonexistent"), cublaslt_candidates()[1]});
  EXPECT_NE(lt.cublasLtMatmul, nullptr);
}

TEST(CublasLtLibrary, MissingLibraryNamesEveryPlaceTried) {
  test::expect_error([] { load_cublaslt({in_dir("/nonexistent/a"), "/nonexistent/b/libx.so"}); },
                     fmt::format("cannot load cuBLASLt ({})", cublaslt_soname()));
  test::expect_error([] { load_cublaslt({in_dir("/nonexistent/a"), "/nonexistent/b/libx.so"}); },
                     "/nonexistent/b/libx.so");
  test::expect_error([] { load_cublaslt({in_dir("/nonexistent/a")}); }, "LD_LIBRARY_PATH");
}

TEST(CublasLtLibrary, ALibraryWithoutTheFunctionsNamesTheMissingOne) {
  // libm loads, but has none of cuBLASLt's functions: the first one in the table is named.
  test::expect_error([] { load_cublaslt({"libm.so.6"}); }, "cuBLASLt libm.so.6 has no function cublasLtCreate");
}

}  // namespace
}  // namespace quill::cuda
