// The thread pool (the data build, the CPU optimizer): every index once, reuse across loops, the first error.
#include <gtest/gtest.h>

#include <atomic>

#include "base/error.h"
#include "base/thread_pool.h"

namespace quill {
namespace {

TEST(ThreadPool, EveryIndexOnceAcrossManyLoops) {
  ThreadPool pool(4);
  EXPECT_EQ(pool.threads(), 4);
  for (size_t n : {0u, 1u, 3u, 1000u, 17u}) {
    std::vector<std::atomic<int>> hits(n);
    pool.parallel_for(n, [&](size_t i) { hits[i]++; });
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << i;
  }
}

TEST(ThreadPool, RethrowsTheErrorOfTheSmallestIndex) {
  ThreadPool pool(8);
  for (int round = 0; round < 20; ++round) {
    try {
      pool.parallel_for(2000, [](size_t i) {
        if (i == 700 || i == 1500 || i == 1999) QUILL_FAIL("index {}", i);
      });
      ADD_FAILURE() << "expected a quill::Error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("index 700"), std::string::npos) << e.what();
    }
  }
  std::atomic<int> after{0};
  pool.parallel_for(10, [&](size_t) { after++; });  // still usable
  EXPECT_EQ(after.load(), 10);
}

TEST(ThreadPool, FreeFunction) {
  std::atomic<size_t> sum{0};
  parallel_for(100, 0, [&](size_t i) { sum += i; });
  EXPECT_EQ(sum.load(), 4950u);
  EXPECT_GE(hardware_threads(), 1);
}

}  // namespace
}  // namespace quill

namespace quill {
namespace {

// The shared pool is the same pool (the same worker threads) from one lease to the next, so the
// workers' thread-local caches stay warm; a lease taken while another is held gets a private pool
// instead of waiting (no deadlock when a parallel loop starts another).
TEST(SharedThreadPool, ReusedAcrossLeasesAndPrivateWhenNested) {
  ThreadPool* pool_a = nullptr;
  std::atomic<int> calls{0};
  {
    SharedThreadPool lease(3);
    pool_a = &lease.pool();
    EXPECT_EQ(lease.pool().threads(), 3);
    lease.pool().parallel_for(64, [&](size_t) { ++calls; });
    std::atomic<int> inner_calls{0};
    lease.pool().parallel_for(2, [&](size_t) {
      SharedThreadPool nested(2);
      EXPECT_NE(&nested.pool(), pool_a);
      nested.pool().parallel_for(4, [&](size_t) { ++inner_calls; });
    });
    EXPECT_EQ(inner_calls.load(), 8);
  }
  {
    SharedThreadPool lease(3);
    EXPECT_EQ(&lease.pool(), pool_a);  // the same pool object: the same worker threads
    lease.pool().parallel_for(64, [&](size_t) { ++calls; });
  }
  EXPECT_EQ(calls.load(), 128);
  SharedThreadPool other(2);
  EXPECT_EQ(other.pool().threads(), 2);
}

}  // namespace
}  // namespace quill
