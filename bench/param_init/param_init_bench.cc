// Not a test: how long one rank's parameter table takes to make (ParamTable::for_config: the fp32 values and
// gradients, zeros) and to fill with random weights (init_random), the first two steps of `quill train`'s
// start-up ("random weights (host)"), for world rank 0 of a layout simulated in one process.
//   param_init_bench CONFIG [TP EP DP PP [PP_LAYERS]]   (default 4 8 2 1: the seed's TP4 SP EP8 DP2, one stage;
//   the seed's rank 0: 4 8 2 4 12,10,10,10)
// Prints the values held, both times, and the process's peak RSS is what /usr/bin/time -f %M reports.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <sstream>
#include <string>

#include "comm/loopback_comm.h"
#include "model/config.h"
#include "model/params.h"
#include "parallel/layout.h"

namespace {
int run(int argc, char** argv) {
  using namespace quill;
  if (argc < 2) {
    std::fprintf(stderr, "usage: param_init_bench CONFIG [TP EP DP PP [PP_LAYERS]]\n");
    return 2;
  }
  const InklingConfig config = load_inkling_config(argv[1]);
  LayoutSpec spec;
  spec.tp = argc > 2 ? std::atoi(argv[2]) : 4;
  spec.sequence_parallel = spec.tp > 1;
  spec.ep = argc > 3 ? std::atoi(argv[3]) : 8;
  spec.dp = argc > 4 ? std::atoi(argv[4]) : 2;
  spec.pp = argc > 5 ? std::atoi(argv[5]) : 1;
  if (argc > 6) {
    std::stringstream layers(argv[6]);
    for (std::string n; std::getline(layers, n, ',');) spec.pp_layers.push_back(std::stoll(n));
  }
  LoopbackComm world(spec.world(), 0, "world", make_host_loopback_mover());
  const Layout layout = Layout::create(spec, config.num_layers, &world);
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  ParamTable table = ParamTable::for_config(config, layout);
  const auto t1 = Clock::now();
  table.init_random(1, 0.02);
  const auto t2 = Clock::now();
  int64_t values = 0;
  for (const Param& p : table.params()) values += p.value.numel();
  std::printf("%s, %s, rank 0: %.3f G values; for_config %.2f s, init_random %.2f s\n", argv[1], spec.describe().c_str(),
              static_cast<double>(values) / 1e9, std::chrono::duration<double>(t1 - t0).count(),
              std::chrono::duration<double>(t2 - t1).count());
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "param_init_bench: %s\n", e.what());
    return 1;
  }
}
