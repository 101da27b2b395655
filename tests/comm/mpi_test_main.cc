// main() of the comm tests under mpirun: MPI up, gtest on every rank (rank 0 prints progress, the
// others print only their failures), and the exit status is nonzero on every rank if any rank
// failed, so mpirun and CTest see one verdict.
#include <gtest/gtest.h>

#include <cstdio>

#include "comm/distributed.h"
#include "mpi_test_env.h"

namespace quill::test {

namespace {
MpiComm* g_world = nullptr;  // test harness only
Distributed* g_distributed = nullptr;

class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_, r.file_name() ? r.file_name() : "?", r.line_number(),
                 r.summary());
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed()) std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", rank_, info.test_suite_name(), info.name());
  }

 private:
  int rank_;
};
}  // namespace

MpiComm& mpi_world() { return *g_world; }
Distributed& mpi_distributed() { return *g_distributed; }

}  // namespace quill::test

int main(int argc, char** argv) {
  quill::CommOptions options;
  options.timeout_s = 30;  // a desynchronised test ends with a message, well inside CTest's limit
  std::unique_ptr<quill::Distributed> dist = quill::init_distributed(&argc, &argv, options);
  quill::test::g_world = &dist->world();
  quill::test::g_distributed = dist.get();
  ::testing::InitGoogleTest(&argc, argv);
  if (dist->rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new quill::test::FailurePrinter(dist->rank()));
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  quill::Tensor verdict = quill::Tensor::empty({1}, quill::DType::I32);
  *verdict.data_as<int32_t>() = failed;
  dist->world().all_reduce(verdict, quill::ReduceOp::Max);
  const int any_failed = *verdict.data_as<int32_t>();
  if (dist->rank() == 0 && any_failed && !failed) std::fprintf(stderr, "another rank failed (see its [rank N] lines)\n");
  return any_failed;
}
