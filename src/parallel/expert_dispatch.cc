#include "parallel/expert_dispatch.h"

#include <algorithm>
#include <numeric>
#include <string>

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

// The counts' exchange: a host I64 tensor through a communicator of either device. On a GPU the received counts
// also stay in device memory (*recv_on_device), where the regroup index is built from them.
void exchange_counts(const DeviceContext& ctx, Comm* ep, const Tensor& in, const std::vector<int64_t>& send,
                     const Tensor& out, const std::vector<int64_t>& recv, Tensor* recv_on_device) {
  if (ep->device() == Device::CPU) return ep->all_to_all(in, send, out, recv);
  Tensor din = Tensor::empty(in.shape(), in.dtype(), *ctx.allocator), dout = Tensor::empty(out.shape(), out.dtype(), *ctx.allocator);
  ops::transfer(ctx, in, din);
  ep->all_to_all(din, send, dout, recv);
  ops::transfer(ctx, dout, out);
  *recv_on_device = dout;
}

// The regrouping's row indexes (ops::regroup_index: to expert order, then to source order), I32 on the context's
// device, from the received counts: on a GPU the exchange's device copy of them when there is one, so that the
// index is made on the device in stream order (no host loop and no transfer before the token exchange).
void build_regroup_index(const DeviceContext& ctx, DispatchPlan& p, const Tensor& recv_host, Tensor recv_on_device) {
  const int64_t R = p.received_rows();
  if (p.ep == 1 || R == 0) return;
  QUILL_CHECK(R < (int64_t{1} << 31), "expert dispatch: {} received rows exceed the I32 row index", R);
  const Shape counts_shape{p.ep, p.local_experts};
  Tensor index = Tensor::empty({2 * R}, DType::I32, *ctx.allocator);
  if (ctx.device == Device::CPU) {
    ops::regroup_index(ctx, recv_host.reshape(counts_shape), index);
  } else {
    if (!recv_on_device.defined()) {  // a host communicator beside a GPU context
      recv_on_device = Tensor::empty(recv_host.shape(), DType::I64, *ctx.allocator);
      ops::transfer(ctx, recv_host, recv_on_device);
    }
    ops::regroup_index(ctx, recv_on_device.reshape(counts_shape), index);
  }
  p.to_expert_order = index.rows(0, R);
  p.to_source_order = index.rows(R, 2 * R);
}

std::vector<int64_t> times(const std::vector<int64_t>& rows, int64_t d) {
  std::vector<int64_t> out;
  for (int64_t r : rows) out.push_back(r * d);
  return out;
}

// Each rank's experts: E / ep, refused by name when ep does not divide E.
int64_t local_experts_of(int64_t experts, int ep) {
  QUILL_CHECK(experts % ep == 0, "--expert-model-parallel-size {} does not divide the {} routed experts", ep, experts);
  return experts / ep;
}

// The plan's shape and what this rank sends, from its own counts.
DispatchPlan plan_for(const int64_t* counts_E, int64_t experts, Comm* ep) {
  DispatchPlan p;
  p.ep = ep ? ep->size() : 1;
  p.rank = ep ? ep->rank() : 0;
  p.experts = experts;
  p.local_experts = local_experts_of(experts, p.ep);
  for (int q = 0; q < p.ep; ++q)
    p.send_rows.push_back(std::accumulate(counts_E + q * p.local_experts, counts_E + (q + 1) * p.local_experts,
                                          int64_t{0}));
  return p;
}

// What this rank receives, from every peer's counts for its local experts (host I64 [ep x local experts]); then the
// regroup index (from their device copy when there is one).
void receive_counts(const DeviceContext& ctx, DispatchPlan& p, const Tensor& recv, const Tensor& recv_on_device) {
  p.local_counts.assign(static_cast<size_t>(p.local_experts), 0);
  for (int s = 0; s < p.ep; ++s) {
    const int64_t* c = recv.data_as<int64_t>() + s * p.local_experts;
    p.recv_counts.emplace_back(c, c + p.local_experts);
    p.recv_rows.push_back(std::accumulate(c, c + p.local_experts, int64_t{0}));
    for (int64_t e = 0; e < p.local_experts; ++e) p.local_counts[e] += c[e];
  }
  for (int s = 0; s < p.ep; ++s)
    for (int64_t e = 0; e < p.local_experts; ++e)
      QUILL_CHECK(p.recv_counts[s][e] >= 0, "expert dispatch: rank {} says it sends {} rows to local expert {}", s,
                  p.recv_counts[s][e], e);
  build_regroup_index(ctx, p, recv, recv_on_device);
}

}  // namespace

DispatchPlan plan_dispatch(const DeviceContext& ctx, const std::vector<int64_t>& counts_E, Comm* ep) {
  DispatchPlan p = plan_for(counts_E.data(), static_cast<int64_t>(counts_E.size()), ep);
  // Each peer q gets this rank's counts for q's experts; this rank gets every peer's for its own.
  Tensor send = Tensor::empty({p.experts}, DType::I64), recv = Tensor::empty({p.experts}, DType::I64);
  Tensor recv_on_device;
  std::copy(counts_E.begin(), counts_E.end(), send.data_as<int64_t>());
  if (p.ep > 1) {
    const std::vector<int64_t> n(static_cast<size_t>(p.ep), p.local_experts);
    ops::collective(ctx, "ep.counts", send, [&] { exchange_counts(ctx, ep, send, n, recv, n, &recv_on_device); });
  } else {
    recv = send;
  }
  receive_counts(ctx, p, recv, recv_on_device);
  return p;
}

DispatchPlan plan_dispatch_deferred(const DeviceContext& ctx, const Tensor& plan_2E1, Comm* ep, const Tensor& counts_E,
                                    int64_t* check_word) {
  QUILL_CHECK(plan_2E1.defined() && plan_2E1.ndim() == 1 && plan_2E1.dim(0) % 2 == 1 && plan_2E1.dtype() == DType::I64,
              "expert dispatch: the deferred route plan must be I64 [2E + 1], got {}",
              plan_2E1.defined() ? plan_2E1.describe() : std::string("(undefined)"));
  const int64_t E = plan_2E1.dim(0) / 2;
  QUILL_CHECK(counts_E.defined() && counts_E.shape() == Shape({E}) && counts_E.dtype() == DType::I64 &&
                  counts_E.device() == Device::CPU,
              "expert dispatch: counts_E must be host I64 [{}], got {}", E,
              counts_E.defined() ? counts_E.describe() : std::string("(undefined)"));
  Tensor host = Tensor::empty({2 * E + 1}, DType::I64);
  const int64_t* h = host.data_as<int64_t>();
  // The exchange where the plan is (on a GPU its device; CPU ranks take this path too), then one copy of all three.
  const bool device_exchange = ep != nullptr && ep->size() > 1 && ep->device() == plan_2E1.device();
  if (device_exchange) {
    const Tensor own = plan_2E1.rows(0, E), received = plan_2E1.rows(E + 1, 2 * E + 1);
    const std::vector<int64_t> n(static_cast<size_t>(ep->size()), local_experts_of(E, ep->size()));
    ops::collective(ctx, "ep.counts", own, [&] { ep->all_to_all(own, n, received, n); });
    ops::transfer(ctx, plan_2E1, host);
  } else {
    ops::transfer(ctx, plan_2E1.rows(0, E + 1), host.rows(0, E + 1));
  }
  *check_word = h[E];
  std::copy(h, h + E, counts_E.data_as<int64_t>());
  if (!device_exchange) return plan_dispatch(ctx, std::vector<int64_t>(h, h + E), ep);
  DispatchPlan p = plan_for(h, E, ep);
  receive_counts(ctx, p, host.rows(E + 1, 2 * E + 1), plan_2E1.rows(E + 1, 2 * E + 1));
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

}  // namespace quill
