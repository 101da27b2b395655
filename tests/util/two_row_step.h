// One optimizer step's passes over two rows of one length, the loss normalised over both rows' targets as
// training does: the gradients zeroed first and settled after. Returns the sum of the two rows' losses. For the
// whole-model tests that compare two paths (or one path twice).
#pragma once

#include <cstdint>

#include "model/inkling_model.h"
#include "model/param_placement.h"
#include "util/random_row.h"

namespace quill::test {

inline double two_row_step(InklingModel& model, ParamTable& params, const DeviceContext& ctx, const Row& a,
                           const Row& b) {
  const int64_t T = static_cast<int64_t>(a.tokens.size());
  const double scale = 1.0 / static_cast<double>(InklingModel::supervised_targets(a.mask.data(), T) +
                                                 InklingModel::supervised_targets(b.mask.data(), T));
  zero_grads(params, ctx);
  double loss = model.train_row(a.tokens.data(), a.mask.data(), T, scale).loss_sum;
  loss += model.train_row(b.tokens.data(), b.mask.data(), T, scale).loss_sum;
  settle_grads(params, ctx);
  return loss;
}

// Over two random rows (seeds 1 and 2, supervised after `prompt` positions).
inline double two_row_step(InklingModel& model, ParamTable& params, const DeviceContext& ctx, int64_t T, int64_t vocab,
                           int64_t prompt) {
  auto supervised = [prompt](int64_t t) { return t > prompt; };
  return two_row_step(model, params, ctx, random_row(T, vocab, 1, supervised), random_row(T, vocab, 2, supervised));
}

}  // namespace quill::test
