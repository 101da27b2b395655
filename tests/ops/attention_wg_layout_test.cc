// The arithmetic of the Hopper attention forward that needs no GPU (src/ops/cuda/attention_wg_layout.h):
// wgmma descriptor fields against values derived by hand from the PTX ISA's bit layout, the TMA
// 128-byte swizzle against its address-bit definition, the banded bias layout (every slot written
// exactly once, every biased pair inside the band, the TMA box model equal to the slot formula), and
// the tile schedule (it covers every allowed pair; the "no mask" and "no bias" shortcuts are exact).
#include "ops/cuda/attention_wg_layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace quill::cuda::attn_wg {
namespace {

uint64_t field(uint64_t desc, int lo, int bits) { return (desc >> lo) & ((1ull << bits) - 1); }

TEST(AttentionWgLayout, KMajorDescriptorFields) {
  // A K tile at shared address 0x1A400, k-step 3 (32 * 3 bytes in): start 0x1A460.
  const uint64_t d = k_major_desc(0x1A460);
  EXPECT_EQ(field(d, 0, 14), 0x1A460u >> 4);  // start address >> 4
  EXPECT_EQ(field(d, 14, 2), 0u);
  EXPECT_EQ(field(d, 16, 14), 1u);            // LBO: unused for swizzled K-major, "1"
  EXPECT_EQ(field(d, 30, 2), 0u);
  EXPECT_EQ(field(d, 32, 14), 1024u >> 4);    // SBO: 8 rows of 128 bytes
  EXPECT_EQ(field(d, 46, 3), 0u);
  EXPECT_EQ(field(d, 49, 3), 0u);             // base offset: boxes are 1024-aligned
  EXPECT_EQ(field(d, 52, 10), 0u);
  EXPECT_EQ(field(d, 62, 2), 1u);             // 128-byte swizzle
}

TEST(AttentionWgLayout, MnMajorDescriptorFields) {
  const uint64_t d = mn_major_desc(0x12000 + 3 * 2048);
  EXPECT_EQ(field(d, 0, 14), (0x12000u + 3 * 2048) >> 4);
  EXPECT_EQ(field(d, 16, 14), 8192u >> 4);    // LBO: head-dim columns 0-63 -> 64-127 (the second box)
  EXPECT_EQ(field(d, 32, 14), 1024u >> 4);    // SBO: 8 key rows of 128 bytes
  EXPECT_EQ(field(d, 62, 2), 1u);
  EXPECT_EQ(field(mn_major_desc(0, 16), 16, 14), 1u);
}

TEST(AttentionWgLayout, DescriptorEncodeMatchesPtxDefinition) {
  // matrix-descriptor-encode(x) = (x & 0x3FFFF) >> 4, for every 16-byte-aligned shared address.
  for (uint32_t a = 0; a < (1u << 18); a += 16) {
    ASSERT_EQ(field(make_desc(a, 0, 0, Swizzle::kNone), 0, 14), (a & 0x3FFFFu) >> 4) << a;
  }
  EXPECT_EQ(make_desc(0, 0, 0, Swizzle::k64B) >> 62, 2u);
  EXPECT_EQ(make_desc(0, 0, 0, Swizzle::k32B) >> 62, 3u);
  EXPECT_EQ(field(make_desc(0, 0, 0, Swizzle::kNone, 7), 49, 3), 7u);
}

TEST(AttentionWgLayout, Swizzle128IsTheTmaAddressXor) {
  // TMA SWIZZLE_128B (1024-byte-aligned box): byte address bits 4-6 are XORed with bits 7-9.
  auto model = [](uint32_t logical) { return logical ^ (((logical >> 7) & 7u) << 4); };
  for (uint32_t row = 0; row < 64; ++row) {
    for (uint32_t b = 0; b < 128; ++b) ASSERT_EQ(swizzle128(row, b), model(row * 128 + b)) << "row " << row << " byte " << b;
    // A row stays inside its own 128 bytes (the permutation moves 16-byte chunks within the row).
    for (uint32_t b = 0; b < 128; ++b) EXPECT_EQ(swizzle128(row, b) / 128, row);
  }
}

// The key rows a warp's ldmatrix or the wgmma unit reads in one phase land in 8 distinct 16-byte bank
// groups: chunk c of rows r .. r+7 maps to 8 different chunk positions.
TEST(AttentionWgLayout, Swizzle128SpreadsEightRowsOverAllChunks) {
  for (uint32_t chunk = 0; chunk < 8; ++chunk)
    for (uint32_t r0 = 0; r0 < 64; r0 += 8) {
      std::vector<int> seen(8, 0);
      for (uint32_t r = r0; r < r0 + 8; ++r) ++seen[(swizzle128(r, 16 * chunk) % 128) / 16];
      EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; })) << chunk << " " << r0;
    }
}

struct BandCase {
  int64_t T, E;
};

TEST(AttentionWgLayout, BandWriterCoversEverySlotOnce) {
  for (const BandCase c : {BandCase{37, 50}, BandCase{300, 7}, BandCase{129, 2}, BandCase{64, 1}, BandCase{200, 96},
                           BandCase{1024, 512}}) {
    const int64_t H = 2;
    std::vector<int> owners(static_cast<size_t>(band_floats(c.T, H, c.E)), 0);
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < band_t_extent(c.T, c.E); ++t)
        for (int64_t u = band_u_first(); u < band_u_first() + band_u_count(c.E); ++u) {
          const int64_t slot = band_slot(c.T, c.E, h, t, t - u);
          if (slot < 0) continue;
          ASSERT_LT(slot, static_cast<int64_t>(owners.size()));
          ++owners[static_cast<size_t>(slot)];
        }
    for (size_t i = 0; i < owners.size(); ++i)
      ASSERT_EQ(owners[i], 1) << "T=" << c.T << " E=" << c.E << ": slot " << i << " written " << owners[i] << " times";
  }
}

TEST(AttentionWgLayout, EveryBiasedPairHasABandSlotAndTheTmaBoxFindsIt) {
  for (const BandCase c : {BandCase{37, 50}, BandCase{300, 7}, BandCase{200, 96}, BandCase{333, 130}}) {
    const int64_t h = 2;  // of H = 3: the head offset must not disturb the rest
    // Pairs with a distance in [0, E) are inside the band.
    for (int64_t t = 0; t < c.T; ++t)
      for (int64_t s = std::max<int64_t>(0, t - c.E + 1); s <= t; ++s)
        ASSERT_GE(band_slot(c.T, c.E, h, t, s), 0) << t << " " << s;
    // The producer's box for query rows tw .. tw+63 and key block a starts at row i0 = tw - 32a; its
    // element (r, b) is band[h][a][i0 + r][b] when 0 <= i0 + r < I (else TMA fills zero): that must be
    // the pair (tw + r, 32a + b)'s slot whenever the pair has one.
    for (int tw = 0; tw < c.T; tw += kWgRows)
      for (int64_t a = 0; a < band_blocks(c.T); ++a)
        for (int r = 0; r < kWgRows; ++r)
          for (int b = 0; b < 32; ++b) {
            const int64_t i = tw - 32 * a + r;
            const int64_t via_box = (i >= 0 && i < band_rows(c.E)) ? band_index(c.T, c.E, h, a, i, b) : -1;
            ASSERT_EQ(via_box, band_slot(c.T, c.E, h, tw + r, 32 * a + b)) << tw << " " << a << " " << r << " " << b;
          }
  }
}

bool allowed(int t, int s, int T, int window) { return t < T && s >= 0 && s <= t && (window == 0 || t - s < window); }

// The tile schedule of a CTA with N-key tiles covers every allowed pair, and its last tile is needed.
template <int N>
void check_schedule() {
  for (int T : {1, 37, 63, 64, 65, 127, 128, 129, 300, 700})
    for (int window : {0, 1, 2, 5, 63, 64, 70, 128, 200, 512}) {
      const int w = window >= T ? 0 : window;  // make_problem's normalisation
      for (int t0 = 0; t0 < T; t0 += kBlockM) {
        const int first = first_key_tile<N>(t0, w), n = key_tile_count<N>(t0, T, w);
        ASSERT_EQ(first % N, 0);
        ASSERT_GE(n, 1);
        for (int t = t0; t < std::min(t0 + kBlockM, T); ++t)
          for (int s = 0; s <= t; ++s)
            if (allowed(t, s, T, w)) {
              ASSERT_TRUE(s >= first && s < first + n * N) << "N=" << N << " T=" << T << " window=" << w << " t=" << t
                                                           << " s=" << s;
            }
        // The last tile is needed: some row of the CTA has an allowed key in it.
        bool used = false;
        const int last = first + (n - 1) * N;
        for (int t = t0; t < std::min(t0 + kBlockM, T) && !used; ++t)
          for (int s = last; s < last + N && !used; ++s) used = allowed(t, s, T, w);
        EXPECT_TRUE(used) << "N=" << N << " T=" << T << " window=" << w << " t0=" << t0;
      }
    }
}

// With N-key tiles: "fully allowed" is exact, and a tile without a bias load has no pair closer than E.
template <int N>
void check_shortcuts() {
  for (int T : {37, 64, 129, 300})
    for (int window : {0, 5, 64, 70})
      for (int E : {1, 7, 64, 96, 130})
        for (int t0 = 0; t0 < T; t0 += kBlockM)
          for (int s0 = 0; s0 < T; s0 += N) {
            bool any_close = false;
            for (int cons = 0; cons < kConsumers; ++cons) {
              const int tw = t0 + kWgRows * cons;
              bool all = true;
              for (int t = tw; t < tw + kWgRows; ++t)
                for (int s = s0; s < s0 + N; ++s) {
                  all = all && allowed(t, s, T, window);
                  any_close = any_close || (t - s >= 0 && t - s < E);
                }
              ASSERT_EQ(wg_tile_fully_allowed<N>(tw, s0, T, window), all) << N << " " << T << " " << window << " " << tw
                                                                           << " " << s0;
            }
            // No bias tile only when every pair's distance is outside [0, E) (a bias of exactly zero).
            if (!cta_tile_has_bias<N>(t0, s0, E)) {
              ASSERT_FALSE(any_close) << N << " " << T << " " << E << " " << t0 << " " << s0;
            }
          }
}

TEST(AttentionWgLayout, TileScheduleCoversEveryAllowedPair) { check_schedule<kBlockN>(); }
TEST(AttentionWgLayout, ShortcutsAreExact) { check_shortcuts<kBlockN>(); }

TEST(AttentionWgLayout, SharedMemoryPlanFitsAndAligns) {
  EXPECT_LE(kSmemBytes, kSmemLimit);
  EXPECT_EQ(kSmemQ % 1024, 0);
  EXPECT_EQ(kSmemK % 1024, 0);
  EXPECT_EQ(kSmemV % 1024, 0);
  EXPECT_EQ(kSmemBias % 1024, 0);
  EXPECT_EQ(kSmemBarriers % 8, 0);
  EXPECT_EQ(kTileBytes, kWgRows * kD * 2);
  EXPECT_EQ(kBiasTileBytes, kWgRows * kBlockN * 4);
}

}  // namespace
}  // namespace quill::cuda::attn_wg
