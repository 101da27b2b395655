#include "parallel/sp_halo.h"

#include <algorithm>

#include "base/error.h"
#include "ops/collective.h"
#include "ops/convert.h"
#include "ops/elementwise.h"

namespace quill {

namespace {

struct HaloGeometry {
  int64_t H, Tc, C;
  int rank, ranks;
  // Position p of the row (before this rank's chunk): its owner's rank, and the row of that owner's
  // contribution (the last min(H, Tc) rows of its chunk, aligned at the end of H rows) that holds it.
  int owner(int64_t p) const { return static_cast<int>(p / Tc); }
  int64_t contribution_row(int64_t p) const { return H - ((owner(p) + 1) * Tc - p); }
};

HaloGeometry geometry(const Tensor& t, int64_t rows_besides_halo, int64_t kernel, Comm* tp, const char* what) {
  QUILL_CHECK(kernel >= 1, "{}: kernel {} must be at least 1", what, kernel);
  QUILL_CHECK(t.ndim() == 2, "{}: expected a [T, C] tensor, got {}", what, t.describe());
  HaloGeometry g{kernel - 1, rows_besides_halo, t.dim(1), tp ? tp->rank() : 0, tp ? tp->size() : 1};
  QUILL_CHECK(g.Tc >= 1, "{}: an empty sequence chunk", what);
  return g;
}

// A tensor of t's dtype, not zeroed: the callers zero only the rows nothing else writes.
Tensor like(const DeviceContext& ctx, const Tensor& t, const Shape& shape) {
  return Tensor::empty(shape, t.dtype(), *ctx.allocator);
}

// A halo of zeros: the positions before the row's first.
Tensor zeros_like_halo(const DeviceContext& ctx, const Tensor& chunk, const HaloGeometry& g) {
  Tensor halo = like(ctx, chunk, {g.H, g.C});
  ops::zero(ctx, halo);
  return halo;
}

// Every rank's H rows of `mine`, gathered over tp: [ranks * H, C].
Tensor all_gather_rows(const DeviceContext& ctx, const Tensor& mine, Comm* tp) {
  if (tp == nullptr || tp->size() == 1) return mine;
  // Not zeroed: the gather writes every block (mine is never a block of all, so no in-place gather whose
  // peers' blocks a loopback would leave as they were).
  Tensor all = like(ctx, mine, {mine.dim(0) * tp->size(), mine.dim(1)});
  ops::collective(ctx, "sp.halo_all_gather", all, [&] { tp->all_gather(mine, all); });
  return all;
}

}  // namespace

Tensor gather_halo(const DeviceContext& ctx, const Tensor& chunk, int64_t kernel, Comm* tp) {
  const HaloGeometry g = geometry(chunk, chunk.ndim() == 2 ? chunk.dim(0) : 0, kernel, tp, "gather_halo");
  if (g.H == 0) return like(ctx, chunk, {0, g.C});
  if (g.ranks == 1) return zeros_like_halo(ctx, chunk, g);  // one rank: the row's start, nothing to gather
  // Every rank sends its last H positions (its chunk's own rows when Tc >= H: no copy).
  Tensor mine;
  if (g.Tc >= g.H) {
    mine = chunk.rows(g.Tc - g.H, g.Tc);
  } else {  // a chunk shorter than the halo: its rows at the end, zeros before them
    mine = like(ctx, chunk, {g.H, g.C});
    ops::zero(ctx, mine.rows(0, g.H - g.Tc));
    ops::copy(ctx, chunk, mine.rows(g.H - g.Tc, g.H));
  }
  const Tensor all = all_gather_rows(ctx, mine, tp);
  const int64_t start = g.rank * g.Tc;
  // When Tc >= H the halo is the previous rank's contribution as a whole: a view of the gathered rows. Rank 0's
  // halo is zeros: its own contribution's rows of `all`, zeroed (what it gathered is its own copy), so that every
  // rank keeps the same bytes for it (the memory plan predicts each rank's peak exactly).
  if (g.Tc >= g.H) {
    if (g.rank == 0) {
      ops::zero(ctx, all.rows(0, g.H));
      return all.rows(0, g.H);
    }
    return all.rows((g.rank - 1) * g.H, g.rank * g.H);
  }
  Tensor halo = like(ctx, chunk, {g.H, g.C});
  ops::zero(ctx, halo);  // rows before the sequence stay zero, the others are copied below
  for (int64_t i = 0; i < g.H; ++i) {
    const int64_t p = start - g.H + i;
    if (p < 0) continue;  // before the row's first position: zeros
    const int64_t src = g.owner(p) * g.H + g.contribution_row(p);
    ops::copy(ctx, all.rows(src, src + 1), halo.rows(i, i + 1));
  }
  return halo;
}

void scatter_halo_grad(const DeviceContext& ctx, const Tensor& dchunk, const Tensor& dhalo, int64_t kernel, Comm* tp) {
  const HaloGeometry g = geometry(dchunk, dchunk.ndim() == 2 ? dchunk.dim(0) : 0, kernel, tp, "scatter_halo_grad");
  QUILL_CHECK(dhalo.ndim() == 2 && dhalo.dim(0) == g.H && dhalo.dim(1) == g.C,
              "scatter_halo_grad: expected dhalo [{}, {}], got {}", g.H, g.C, dhalo.describe());
  if (g.H == 0) return;
  const Tensor all = all_gather_rows(ctx, dhalo, tp);
  if (g.Tc >= g.H) {  // only the next rank's halo covers this chunk: its last H rows
    if (g.rank + 1 < g.ranks)
      ops::add_inplace(ctx, dchunk.rows(g.Tc - g.H, g.Tc), all.rows((g.rank + 1) * g.H, (g.rank + 2) * g.H));
    return;
  }
  // Rank r's halo row i is position r*Tc - H + i; the ones that fall in this rank's chunk add here.
  for (int r = g.rank + 1; r < g.ranks; ++r) {
    for (int64_t i = 0; i < g.H; ++i) {
      const int64_t p = r * g.Tc - g.H + i;
      if (p < g.rank * g.Tc || p >= (g.rank + 1) * g.Tc) continue;
      const int64_t row = p - g.rank * g.Tc, src = r * g.H + i;
      ops::add_inplace(ctx, dchunk.rows(row, row + 1), all.rows(src, src + 1));
    }
  }
}

}  // namespace quill
