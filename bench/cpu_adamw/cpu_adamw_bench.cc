// Throughput of the host AdamW (optim/cpu_adamw.h) in GB/s of optimizer state traffic (reads of w,
// g, m, v and writes of w, m, v and the bf16 copy: 30 bytes per element, 22 with bf16 moments) against this machine's
// memcpy bandwidth on the same sizes, at 1..N threads (the copy split over the same threads: the host's
// bandwidth at that thread count, which one thread's memcpy understates on a many-channel server). Not a test: bench/cpu_adamw/README.md.
// Usage: cpu_adamw_bench [elements (default 64 Mi)] [max threads (default all cores)]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "optim/cpu_adamw.h"

int main(int argc, char** argv) {
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : int64_t{1} << 26;
  const int max_threads = argc > 2 ? std::atoi(argv[2]) : quill::hardware_threads();
  std::vector<float> w(n, 0.5f), g(n, 0.01f), m(n, 0.0f), v(n, 0.0f);
  std::vector<uint16_t> out(n);
  std::vector<char> a(static_cast<size_t>(n) * 16, 1), b(static_cast<size_t>(n) * 16, 2);
  auto seconds = [](auto&& fn) {
    double best = 1e30;
    for (int r = 0; r < 5; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      fn();
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
  };
  const double copy_s = seconds([&] { std::memcpy(b.data(), a.data(), a.size()); });
  std::printf("elements %lld; memcpy of %.0f MB: %.1f GB/s (read + write)\n", static_cast<long long>(n), a.size() / 1e6,
              2.0 * a.size() / copy_s / 1e9);
  quill::ops::AdamWStep s;
  s.lr = 1e-4f, s.weight_decay = 0.1f, s.bias_correction1 = 0.1, s.bias_correction2 = 0.05;
  // bf16 moments (--exp-avg-dtype/--exp-avg-sq-dtype bf16): 22 bytes per element instead of 30.
  std::vector<uint16_t> m16(n, 0), v16(n, 0);
  for (bool bf16_moments : {false, true}) {
    const double bytes = bf16_moments ? 22.0 : 30.0;
    for (int t = 1; t <= max_threads; t *= 2) {
      quill::ThreadPool pool(t);
      const double sec = seconds([&] {
        if (bf16_moments)
          quill::adamw_update_host(s, w.data(), g.data(), m16.data(), quill::DType::BF16, v16.data(), quill::DType::BF16,
                                   out.data(), n, pool);
        else
          quill::adamw_update_host(s, w.data(), g.data(), m.data(), v.data(), out.data(), n, pool);
      });
      // memcpy of the same buffers over the same threads, in 64 chunks (read + write counted).
      const size_t chunks = 64, chunk = a.size() / chunks;
      const double copy_t = seconds([&] {
        pool.parallel_for(chunks, [&](size_t i) { std::memcpy(b.data() + i * chunk, a.data() + i * chunk, chunk); });
      });
      std::printf("%s threads %2d: %.3f s per update, %.1f GB/s of state (%.0f B/element), %.0f M elements/s; "
                  "memcpy on %d threads %.1f GB/s\n",
                  bf16_moments ? "bf16 moments" : "fp32 moments", t, sec, bytes * n / sec / 1e9, bytes, n / sec / 1e6, t,
                  2.0 * static_cast<double>(chunk * chunks) / copy_t / 1e9);
      if (t * 2 > max_threads && t != max_threads) t = max_threads / 2;
    }
  }
  return 0;
}
