// When the Hopper attention backward (ops/cuda/attention_wg_backward.cu) gives each query head CTAs of its own, in
// one place for the kernel's launch and for the memory plan (plan/activation_trace.cc), which counts the partials.
//
// The backward's CTA owns a 128-key tile of one kv head and walks every query tile that sees those keys, for
// every query head of the kv head's group (dK and dV accumulate over them in registers). Under causal masking
// key tile j sees T / 64 - 2 j query tiles, so the first CTA has twice the mean's steps, and with fewer CTAs
// than twice the multiprocessors the grid's time is that longest CTA's: at a TP4 rank's 8 query / 2 kv heads and
// T = 8,192, 128 CTAs on 132 multiprocessors, half of the work's time idle. Split per query head, the grid has
// H / G times the CTAs, each writing its query head's dK and dV partials in fp32 ([T, H, 128] each), summed over
// the group's heads in head order by a second kernel: 2 T H 128 x 4 bytes more written and read. Measured on an
// H100 (bench/results/2026-12-06-h100-seed-ops/, attention_bench, T = 8,192, a global layer): 8 q / 2 kv heads
// 3.373 -> 2.234 ms (-34%), and the slice's 32 / 8 heads, balanced before, 8.938 -> 8.447 ms (-5.5%: the shorter
// CTAs fill the grid's tail). So every layer with grouped queries splits.
#pragma once

#include <cstdint>

namespace quill::attention_head_split {

inline constexpr int64_t kKeysPerCta = 128;  // attention_wg_bwd_layout.h kKeys (asserted there)

// Whether a global (unwindowed) layer of H query and G kv heads runs one query head per CTA.
inline bool per_query_head(int64_t H, int64_t G) { return H > G; }

// The fp32 partials' bytes (dK and dV per query head) when it does.
inline int64_t partial_bytes(int64_t T, int64_t H, int64_t head_dim) { return 2 * T * H * head_dim * 4; }

}  // namespace quill::attention_head_split
