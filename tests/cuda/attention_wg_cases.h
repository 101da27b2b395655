// What the tests of the Hopper attention kernels share (attention_wg_test.cc: the forward;
// attention_wg_backward_test.cc: the backward): the sm_90 guard, the case type and its parameters, and the
// head-dim-128 shapes both run against the CPU reference.
// Legend: T positions, H query heads, G kv heads, R bias rank, E bias extent.
#pragma once

#include <cmath>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "cuda/harness.h"
#include "ops/attention.h"
#include "ops/cuda/attention_wg.h"

#define QUILL_REQUIRE_SM90()                                                                             \
  do {                                                                                                   \
    QUILL_REQUIRE_GPU();                                                                                 \
    if (!cuda::attn_wg::device_supported()) GTEST_SKIP() << "the wgmma kernels need a compute 9.0 GPU"; \
  } while (0)

namespace quill::test {

constexpr int64_t kWgHeadDim = 128;

struct WgCase {
  std::string name;
  int64_t T, H, G, R, E;
  int64_t window;
  bool log_scaling = false;
  double log_floor = 128000.0;
};
inline void PrintTo(const WgCase& c, std::ostream* os) { *os << c.name; }

inline ops::AttentionParams params_of(const WgCase& c) {
  ops::AttentionParams p;
  p.window = c.window;
  p.scale = 1.0 / std::sqrt(static_cast<double>(kWgHeadDim));  // random q, k: scores of unit size
  p.log_scaling = c.log_scaling;
  p.log_floor = c.log_floor;
  p.log_alpha = 0.1;
  return p;
}

// The head-dim-128 cases of tests/cuda/attention_test.cc, then one tile, no bias, GQA 8, tiles past T, a window
// not a multiple of the tiles, E = 1; `window_one` adds the case where each query sees only itself.
inline std::vector<WgCase> wg_cases(bool window_one) {
  std::vector<WgCase> c = {
      {"T300_window70_E130", 300, 2, 1, 16, 130, 70},
      {"T300_global_E300", 300, 4, 1, 16, 300, 0},
      {"T77_G_eq_H_E_beyond_T_log_scaling", 77, 4, 4, 5, 200, 0, true, 10.0},
      {"T200_window64_E_above_window", 200, 8, 2, 16, 96, 64},
      {"T129_R1_E2_window3", 129, 2, 1, 1, 2, 3},
      {"realistic_local_T1024", 1024, 8, 2, 16, 512, 512},
      {"realistic_global_T1024_log_scaling", 1024, 8, 2, 16, 1024, 0, true, 300.0},
      {"T64_one_tile_no_bias", 64, 1, 1, 0, 4, 0},
      {"T37_gqa8_one_partial_tile", 37, 8, 1, 4, 9, 0},
      {"T250_gqa4_window100_E40", 250, 8, 2, 16, 40, 100},
      {"T130_E1_global", 130, 2, 2, 3, 1, 0},
      {"T513_window511_E512_log_scaling", 513, 4, 2, 16, 512, 511, true, 64.0},
  };
  if (window_one) c.push_back({"T384_window1_copies", 384, 2, 1, 16, 64, 1});
  return c;
}

}  // namespace quill::test
