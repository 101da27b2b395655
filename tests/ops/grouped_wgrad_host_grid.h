// The weight-gradient kernel's parameter block as the host-side tests of its walk need it (grouped_wgrad_schedule.h
// takes any type with these members): expert e's rows at offset[e] .. offset[e + 1], of a second source at offset_b
// when two_sources, and dw's tiles.
#pragma once

namespace quill::cuda::grouped_wgrad::test {

struct HostGrid {
  const int* offset;
  bool two_sources;
  const int* offset_b;
  int tiles_m, tiles_n;
};

}  // namespace quill::cuda::grouped_wgrad::test
