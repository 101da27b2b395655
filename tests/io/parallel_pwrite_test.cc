// The multi-threaded file writer behind checkpoint writing: ranges handed over in any order land at
// their offsets whatever the thread count, and a write error names the file.
#include "io/parallel_pwrite.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "base/file_util.h"
#include "io/io_test_util.h"
#include "io/safetensors.h"
#include "util/test_util.h"

namespace quill {
namespace {

using test::ScratchDir;

TEST(ParallelPwrite, RangesInAnyOrderLandAtTheirOffsets) {
  ScratchDir s;
  std::mt19937 rng(7);
  std::string expect(3'000'000, '\0');
  for (char& c : expect) c = static_cast<char>(rng());
  // 300 ranges of random lengths, written in a shuffled order.
  std::vector<size_t> cuts(299);
  for (size_t& c : cuts) c = rng() % expect.size();
  cuts.push_back(0);
  cuts.push_back(expect.size());
  std::sort(cuts.begin(), cuts.end());
  std::vector<size_t> order(cuts.size() - 1);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  for (int threads : {1, 4}) {
    const std::string path = fmt::format("{}/out{}", s.path(), threads);
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_GE(fd, 0);
    auto data = std::make_shared<std::string>(expect);
    {
      ParallelFileWriter w(fd, path, threads, 100'000);  // a small bound: the producer waits for the disk
      for (size_t k : order) w.write(cuts[k], data->data() + cuts[k], cuts[k + 1] - cuts[k], data);
      w.finish();
    }
    ::close(fd);
    EXPECT_TRUE(read_file(path) == expect) << threads << " threads";
  }
}

TEST(ParallelPwrite, AWriteErrorNamesTheFile) {
  const int fd = ::open("/dev/full", O_WRONLY);
  if (fd < 0) GTEST_SKIP() << "no /dev/full";
  auto data = std::make_shared<std::string>(1 << 20, 'x');
  ParallelFileWriter w(fd, "/dev/full", 4);
  for (int i = 0; i < 8; ++i) w.write(static_cast<uint64_t>(i) << 20, data->data(), data->size(), data);
  try {
    w.finish();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/dev/full: write failed (No space left on device)"), std::string::npos)
        << e.what();
  }
  ::close(fd);
}

TEST(ParallelPwrite, SafetensorsAreTheSameBytesWhateverTheThreadCount) {
  ScratchDir s;
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (int i = 0; i < 20; ++i)
    tensors.emplace_back("t" + std::to_string(i), test::random_tensor({1000 + 37 * i}, DType::F32, static_cast<uint64_t>(i)));
  write_safetensors(s.path() + "/one.safetensors", tensors, {}, 1);
  write_safetensors(s.path() + "/eight.safetensors", tensors, {}, 8);
  EXPECT_TRUE(read_file(s.path() + "/one.safetensors") == read_file(s.path() + "/eight.safetensors"));
}

}  // namespace
}  // namespace quill
