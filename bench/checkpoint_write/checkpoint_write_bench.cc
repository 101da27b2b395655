// Not a test: MB/s of writing a checkpoint-sized safetensors file (write, fsync, rename) with 1 and
// with several writer threads, for bench/checkpoint_write/run.sh, which compares it with dd on the
// same disk. Each thread count is timed twice: as written before, and hashing the file's SHA-256 while
// writing it (what a training checkpoint's shard does: train/checkpoint_identity.h).
//   checkpoint_write_bench DIR MEGABYTES THREADS...
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "io/safetensors.h"

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s DIR MEGABYTES THREADS...\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const int64_t megabytes = std::atoll(argv[2]);
  // 64 MiB tensors, as a model's large matrices; values do not matter to the disk.
  const int64_t per_tensor = int64_t{16} << 20;  // floats
  std::vector<std::pair<std::string, quill::Tensor>> tensors;
  for (int64_t done = 0, i = 0; done < megabytes * 1000000; done += per_tensor * 4, ++i) {
    quill::Tensor t = quill::Tensor::empty({per_tensor}, quill::DType::F32);
    float* p = t.data_as<float>();
    for (int64_t k = 0; k < per_tensor; ++k) p[k] = static_cast<float>(k ^ i);
    tensors.emplace_back("t" + std::to_string(i), t);
  }
  const double bytes = static_cast<double>(tensors.size()) * per_tensor * 4;
  for (int a = 3; a < argc; ++a) {
    const int threads = std::atoi(argv[a]);
    for (const bool hash : {false, true}) {
      const std::string path = dir + "/bench-" + std::to_string(threads) + ".safetensors";
      std::string sha256;
      const auto start = std::chrono::steady_clock::now();
      quill::write_safetensors(path, tensors, {}, threads, hash ? &sha256 : nullptr);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::printf("threads %d: %.0f MB in %.2f s = %.0f MB/s (write, fsync, rename%s)\n", threads, bytes / 1e6, s,
                  bytes / 1e6 / s, hash ? ", SHA-256 while writing" : "");
      std::fflush(stdout);
      std::filesystem::remove(path);
    }
  }
  return 0;
}
