#include "parallel/expert_dispatch.h"

#include <numeric>

#include "base/error.h"
#include "base/pass_baton.h"
#include "ops/collective.h"
#include "ops/convert.h"
#include "ops/gather_rows.h"

namespace quill {

ExpertParallel ExpertParallel::of(const Layout& layout) {
  ExpertParallel ep;
  ep.comm = layout.comm(GroupKind::EP);
  ep.size = layout.spec().ep;
  ep.rank = layout.coords().ep;
  return ep;
}

void ExpertParallel::yield_turn() const {
  if (interleave != nullptr) interleave->yield();
}

int64_t DispatchPlan::received_rows() const { return std::accumulate(recv_rows.begin(), recv_rows.end(), int64_t{0}); }

namespace {

// A host I64 tensor through a communicator of either device.
void all_to_all_host(const DeviceContext& ctx, Comm* ep, const Tensor& in, const std::vector<int64_t>& send,
                     const Tensor& out, const std::vector<int64_t>& recv) {
  if (ep->device() == Device::CPU) return ep->all_to_all(in, send, out, recv);
  Tensor din = Tensor::empty(in.shape(), in.dtype(), *ctx.allocator), dout = Tensor::empty(out.shape(), out.dtype(), *ctx.allocator);
  ops::transfer(ctx, in, din);
  ep->all_to_all(din, send, dout, recv);
  ops::transfer(ctx, dout, out);
}

// The regrouping's row indexes (ops::gather_rows): block (source s, local expert e) of n rows starts
// at row `by_source` in the received (source, expert) order and at `by_expert` in (expert, source)
// order. to_expert_order[by_expert + r] = by_source + r, and to_source_order the inverse. Both in one
// host buffer, moved to the device in one transfer (the plan has just synchronised for the counts).
void build_regroup_index(const DeviceContext& ctx, DispatchPlan& p) {
  const int64_t R = p.received_rows();
  if (p.ep == 1 || R == 0) return;
  QUILL_CHECK(R < (int64_t{1} << 31), "expert dispatch: {} received rows exceed the I32 row index", R);
  std::vector<std::vector<int64_t>> by_source(static_cast<size_t>(p.ep), std::vector<int64_t>(p.local_experts));
  int64_t at = 0;
  for (int s = 0; s < p.ep; ++s)
    for (int64_t e = 0; e < p.local_experts; ++e) by_source[s][e] = at, at += p.recv_counts[s][e];
  Tensor host = Tensor::empty({2 * R}, DType::I32);
  int32_t* to_expert = host.data_as<int32_t>();
  int32_t* to_source = to_expert + R;
  at = 0;
  for (int64_t e = 0; e < p.local_experts; ++e)
    for (int s = 0; s < p.ep; ++s)
      for (int64_t r = 0; r < p.recv_counts[s][e]; ++r, ++at) {
        to_expert[at] = static_cast<int32_t>(by_source[s][e] + r);
        to_source[by_source[s][e] + r] = static_cast<int32_t>(at);
      }
  Tensor index = host;
  if (ctx.device != Device::CPU) {
    index = Tensor::empty({2 * R}, DType::I32, *ctx.allocator);
    ops::transfer(ctx, host, index);
  }
  p.to_expert_order = index.rows(0, R);
  p.to_source_order = index.rows(R, 2 * R);
}

std::vector<int64_t> times(const std::vector<int64_t>& rows, int64_t d) {
  std::vector<int64_t> out;
  for (int64_t r : rows) out.push_back(r * d);
  return out;
}

}  // namespace

DispatchPlan plan_dispatch(const DeviceContext& ctx, const std::vector<int64_t>& counts_E, Comm* ep) {
  DispatchPlan p;
  p.ep = ep ? ep->size() : 1;
  p.rank = ep ? ep->rank() : 0;
  p.experts = static_cast<int64_t>(counts_E.size());
  QUILL_CHECK(p.experts % p.ep == 0, "--expert-model-parallel-size {} does not divide the {} routed experts", p.ep,
              p.experts);
  p.local_experts = p.experts / p.ep;
  for (int q = 0; q < p.ep; ++q)
    p.send_rows.push_back(std::accumulate(counts_E.begin() + q * p.local_experts,
                                          counts_E.begin() + (q + 1) * p.local_experts, int64_t{0}));
  // Each peer q gets this rank's counts for q's experts; this rank gets every peer's for its own.
  Tensor send = Tensor::empty({p.experts}, DType::I64), recv = Tensor::empty({p.experts}, DType::I64);
  std::copy(counts_E.begin(), counts_E.end(), send.data_as<int64_t>());
  if (p.ep > 1) {
    const std::vector<int64_t> n(static_cast<size_t>(p.ep), p.local_experts);
    ops::collective(ctx, "ep.counts", send, [&] { all_to_all_host(ctx, ep, send, n, recv, n); });
  } else {
    recv = send;
  }
  for (int q = 0; q < p.ep; ++q)
    p.send_counts.emplace_back(counts_E.begin() + q * p.local_experts, counts_E.begin() + (q + 1) * p.local_experts);
  p.local_counts.assign(static_cast<size_t>(p.local_experts), 0);
  for (int s = 0; s < p.ep; ++s) {
    const int64_t* c = recv.data_as<int64_t>() + s * p.local_experts;
    p.recv_counts.emplace_back(c, c + p.local_experts);
    p.recv_rows.push_back(std::accumulate(c, c + p.local_experts, int64_t{0}));
    for (int64_t e = 0; e < p.local_experts; ++e) p.local_counts[e] += c[e];
  }
  build_regroup_index(ctx, p);
  return p;
}

PendingDispatch start_dispatch_tokens(const DeviceContext& ctx, const DispatchPlan& p, const Tensor& xp, Comm* ep) {
  const int64_t P = std::accumulate(p.send_rows.begin(), p.send_rows.end(), int64_t{0}), D = xp.dim(1);
  QUILL_CHECK(xp.ndim() == 2 && xp.dim(0) == P, "dispatch_tokens: rows {} but the plan sends {}", xp.describe(), P);
  PendingDispatch pending;
  pending.sent = xp;
  if (p.ep == 1) return pending;
  pending.got = Tensor::empty({std::max<int64_t>(p.received_rows(), 1), D}, xp.dtype(), *ctx.allocator);
  ops::collective(ctx, "ep.dispatch", xp, [&] {
    pending.handle = ep->start_all_to_all(xp, times(p.send_rows, D), pending.got, times(p.recv_rows, D));
  });
  return pending;
}

Tensor finish_dispatch_tokens(const DeviceContext& ctx, const DispatchPlan& p, PendingDispatch& pending) {
  if (p.ep == 1) return pending.sent;
  pending.handle->wait();
  const int64_t R = p.received_rows(), D = pending.sent.dim(1);
  Tensor out = Tensor::empty({R, D}, pending.sent.dtype(), *ctx.allocator);
  if (R > 0) ops::gather_rows(ctx, pending.got.rows(0, R), p.to_expert_order, out);
  pending = PendingDispatch{};
  return out;
}

Tensor dispatch_tokens(const DeviceContext& ctx, const DispatchPlan& p, const Tensor& xp, Comm* ep) {
  PendingDispatch pending = start_dispatch_tokens(ctx, p, xp, ep);
  return finish_dispatch_tokens(ctx, p, pending);
}

namespace {

// The local experts' rows [R, D] back in (source rank, its expert order) order, for the return exchange
// (at least one row: an all-to-all-v needs a buffer).
Tensor rows_by_source(const DeviceContext& ctx, const DispatchPlan& p, const Tensor& y) {
  const int64_t R = p.received_rows(), D = y.dim(1);
  QUILL_CHECK(y.ndim() == 2 && y.dim(0) == R, "combine_tokens: rows {} but the plan received {}", y.describe(), R);
  Tensor by_source = Tensor::empty({std::max<int64_t>(R, 1), D}, y.dtype(), *ctx.allocator);
  if (R > 0) ops::gather_rows(ctx, y, p.to_source_order, by_source.rows(0, R));
  return by_source;
}

int64_t rows_sent(const DispatchPlan& p) { return std::accumulate(p.send_rows.begin(), p.send_rows.end(), int64_t{0}); }

}  // namespace

Tensor combine_tokens(const DeviceContext& ctx, const DispatchPlan& p, const Tensor& y, Comm* ep) {
  if (p.ep == 1) return y;
  const int64_t R = p.received_rows(), D = y.dim(1), P = rows_sent(p);
  const Tensor by_source = rows_by_source(ctx, p, y);
  Tensor out = Tensor::empty({std::max<int64_t>(P, 1), D}, y.dtype(), *ctx.allocator);
  ops::collective(ctx, "ep.combine", by_source.rows(0, R),
                  [&] { ep->all_to_all(by_source, times(p.recv_rows, D), out, times(p.send_rows, D)); });
  return P == 0 ? Tensor::empty({0, D}, y.dtype(), *ctx.allocator) : out;
}

PendingDispatch start_combine_tokens(const DeviceContext& ctx, const DispatchPlan& p, const Tensor& y, Comm* ep) {
  PendingDispatch pending;
  if (p.ep == 1) {
    pending.got = y;
    return pending;
  }
  const int64_t R = p.received_rows(), D = y.dim(1);
  pending.sent = rows_by_source(ctx, p, y);
  pending.got = Tensor::empty({std::max<int64_t>(rows_sent(p), 1), D}, y.dtype(), *ctx.allocator);
  ops::collective(ctx, "ep.combine", pending.sent.rows(0, R), [&] {
    pending.handle = ep->start_all_to_all(pending.sent, times(p.recv_rows, D), pending.got, times(p.send_rows, D));
  });
  return pending;
}

Tensor finish_combine_tokens(const DeviceContext& ctx, const DispatchPlan& p, PendingDispatch& pending) {
  if (pending.handle) pending.handle->wait();
  Tensor out = p.ep == 1 || rows_sent(p) > 0
                   ? pending.got
                   : Tensor::empty({0, pending.got.dim(1)}, pending.got.dtype(), *ctx.allocator);
  pending = PendingDispatch{};
  return out;
}

namespace {

// A host I32 index on ctx's device.
Tensor device_index(const DeviceContext& ctx, const std::vector<int32_t>& rows) {
  Tensor host = Tensor::empty({static_cast<int64_t>(rows.size())}, DType::I32);
  std::copy(rows.begin(), rows.end(), host.data_as<int32_t>());
  if (ctx.device == Device::CPU) return host;
  Tensor index = Tensor::empty(host.shape(), DType::I32, *ctx.allocator);
  ops::transfer(ctx, host, index);
  return index;
}

int32_t row32(int64_t row) { return static_cast<int32_t>(row); }

}  // namespace

ChunkedCombine::ChunkedCombine(const DeviceContext& ctx, const DispatchPlan& plan, int chunks, Comm* ep)
    : ctx_(ctx), plan_(plan), ep_(ep), chunks_(chunks) {
  const int64_t El = plan.local_experts;
  QUILL_CHECK(chunks >= 1 && chunks <= El, "--moe-combine-chunks {}: must be between 1 and the {} routed experts each "
              "expert-parallel rank holds", chunks, El);
  for (int c = 0; c <= chunks; ++c) first_expert_.push_back(c * (El / chunks) + std::min<int64_t>(c, El % chunks));
  if (plan.ep == 1) return;
  const int ep_size = plan.ep;
  // The experts' output rows in dispatch_tokens' (local expert, source) order start at by_expert[e][s].
  std::vector<std::vector<int64_t>> by_expert(static_cast<size_t>(El), std::vector<int64_t>(ep_size));
  int64_t at = 0;
  for (int64_t e = 0; e < El; ++e)
    for (int s = 0; s < ep_size; ++s) by_expert[e][s] = at, at += plan.recv_counts[s][e];
  // This rank's own rows in expert order (dispatch_tokens' input) start at home[q][e] (peer q's expert e).
  std::vector<std::vector<int64_t>> home(static_cast<size_t>(ep_size), std::vector<int64_t>(El));
  at = 0;
  for (int q = 0; q < ep_size; ++q)
    for (int64_t e = 0; e < El; ++e) home[q][e] = at, at += plan.send_counts[q][e];
  const int64_t P = at;
  std::vector<int32_t> send_order, home_order(static_cast<size_t>(P));
  int64_t got_at = 0;
  for (int c = 0; c < chunks; ++c) {
    const int64_t e0 = first_expert_[c], e1 = first_expert_[c + 1];
    first_row_.push_back(e0 < El ? by_expert[e0][0] : plan.received_rows());
    send_at_.push_back(static_cast<int64_t>(send_order.size()));
    got_at_.push_back(got_at);
    std::vector<int64_t> send(ep_size, 0), recv(ep_size, 0);
    for (int s = 0; s < ep_size; ++s)  // to each source rank: its rows of these experts, expert by expert
      for (int64_t e = e0; e < e1; ++e)
        for (int64_t r = 0; r < plan.recv_counts[s][e]; ++r, ++send[s]) send_order.push_back(row32(by_expert[e][s] + r));
    for (int q = 0; q < ep_size; ++q)  // from each peer: this rank's rows of its experts e0..e1, in that order
      for (int64_t e = e0; e < e1; ++e)
        for (int64_t r = 0; r < plan.send_counts[q][e]; ++r, ++recv[q]) home_order[home[q][e] + r] = row32(got_at++);
    send_rows_.push_back(send);
    recv_rows_.push_back(recv);
  }
  first_row_.push_back(plan.received_rows());
  if (!send_order.empty()) send_order_ = device_index(ctx, send_order);
  if (P > 0) home_order_ = device_index(ctx, home_order);
  pending_.resize(static_cast<size_t>(chunks));
}

int64_t ChunkedCombine::first_expert(int c) const { return first_expert_.at(static_cast<size_t>(c)); }
int64_t ChunkedCombine::first_row(int c) const {
  return plan_.ep == 1 ? (c == 0 ? 0 : plan_.received_rows()) : first_row_.at(static_cast<size_t>(c));
}

void ChunkedCombine::start(int c, const Tensor& y) {
  y_ = y;
  if (plan_.ep == 1) return;
  const int64_t R = plan_.received_rows(), D = y.dim(1);
  QUILL_CHECK(y.ndim() == 2 && y.dim(0) == R, "combine_tokens: rows {} but the plan received {}", y.describe(), R);
  if (!got_.defined())
    got_ = Tensor::empty({std::max<int64_t>(std::accumulate(plan_.send_rows.begin(), plan_.send_rows.end(), int64_t{0}), 1), D},
                         y.dtype(), *ctx_.allocator);
  const size_t i = static_cast<size_t>(c);
  const std::vector<int64_t>& send = send_rows_[i];
  const std::vector<int64_t>& recv = recv_rows_[i];
  const int64_t n_send = std::accumulate(send.begin(), send.end(), int64_t{0});
  const int64_t n_recv = std::accumulate(recv.begin(), recv.end(), int64_t{0});
  PendingDispatch& p = pending_[i];
  // An all-to-all-v needs buffers of at least one row, also where a chunk moves none.
  p.sent = Tensor::empty({std::max<int64_t>(n_send, 1), D}, y.dtype(), *ctx_.allocator);
  if (n_send > 0) ops::gather_rows(ctx_, y, send_order_.rows(send_at_[i], send_at_[i] + n_send), p.sent.rows(0, n_send));
  p.got = n_recv > 0 ? got_.rows(got_at_[i], got_at_[i] + n_recv)
                     : Tensor::empty({1, D}, y.dtype(), *ctx_.allocator);
  ops::collective(ctx_, "ep.combine", p.sent.rows(0, n_send), [&] {
    p.handle = ep_->start_all_to_all(p.sent, times(send, D), p.got, times(recv, D));
  });
}

Tensor ChunkedCombine::finish() {
  if (plan_.ep == 1) return y_;
  for (PendingDispatch& p : pending_) {
    QUILL_CHECK(p.handle != nullptr, "ChunkedCombine::finish: a chunk was not started");
    p.handle->wait();
  }
  pending_.clear();
  const int64_t P = home_order_.defined() ? home_order_.dim(0) : 0, D = got_.dim(1);
  Tensor out = Tensor::empty({P, D}, got_.dtype(), *ctx_.allocator);
  if (P > 0) ops::gather_rows(ctx_, got_.rows(0, P), home_order_, out);
  got_ = Tensor();
  return out;
}

}  // namespace quill
