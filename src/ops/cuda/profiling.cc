// Per-op CUDA event timing through a wrapping OpTable (profiling.h says how state reaches the wrappers).
#include "ops/cuda/profiling.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <functional>
#include <map>
#include <mutex>
#include <numeric>
#include <type_traits>
#include <utility>

#include "base/timer.h"
#include "ops/comm_profile.h"
#include "ops/cuda/cuda_resources.h"

namespace quill {

namespace {

// The registry must name every OpTable member: each is one function pointer.
constexpr size_t kOps = static_cast<size_t>(OpId::count);
static_assert(sizeof(OpTable) == kOps * sizeof(void (*)()),
              "QUILL_OP_TABLE_ENTRIES (ops/cuda/profiling.h) does not list every OpTable member");

constexpr const char* kOpNames[] = {
#define QUILL_OP_NAME(name) #name,
    QUILL_OP_TABLE_ENTRIES(QUILL_OP_NAME)
#undef QUILL_OP_NAME
};
static_assert(sizeof(kOpNames) / sizeof(kOpNames[0]) == kOps);

// ---- costs ----------------------------------------------------------------------------------------

template <OpId I>
struct OpTag {};

double tb(const Tensor& t) { return static_cast<double>(t.nbytes()); }

template <typename T>
double tensor_bytes(const T& a) {
  if constexpr (std::is_same_v<std::decay_t<T>, Tensor>) return a.defined() ? tb(a) : 0.0;
  else return 0.0;
}

// Default: a memory-bound op touching each tensor argument once.
template <OpId I, typename... T>
OpCost op_cost(OpTag<I>, const T&... a) {
  OpCost c;
  c.bytes = (0.0 + ... + tensor_bytes(a));
  return c;
}

OpCost matmul(double n, double m, double k, double bytes) {
  OpCost c;
  c.kind = OpKind::Matmul;
  c.flops = 2.0 * n * m * k;
  c.bytes = bytes;
  return c;
}

OpCost op_cost(OpTag<OpId::linear_forward>, const Tensor& x_NK, const Tensor& w_MK, const Tensor& y_NM) {
  return matmul(x_NK.dim(0), w_MK.dim(0), x_NK.dim(1), tb(x_NK) + tb(w_MK) + tb(y_NM));
}
OpCost op_cost(OpTag<OpId::linear_backward_input>, const Tensor& dy_NM, const Tensor& w_MK, const Tensor& dx_NK,
               bool accumulate) {
  return matmul(dy_NM.dim(0), w_MK.dim(0), w_MK.dim(1), tb(dy_NM) + tb(w_MK) + tb(dx_NK) * (accumulate ? 2 : 1));
}
OpCost op_cost(OpTag<OpId::linear_backward_weight>, const Tensor& dy_NM, const Tensor& x_NK, const Tensor& dw_MK,
               bool accumulate) {
  return matmul(dy_NM.dim(0), dw_MK.dim(0), dw_MK.dim(1), tb(dy_NM) + tb(x_NK) + tb(dw_MK) * (accumulate ? 2 : 1));
}

// The router's gate GEMMs (ops/router.h): the fp32 GEMM's FLOPs (the bf16 parts' products are 3x that).
OpCost op_cost(OpTag<OpId::router_gate_forward>, const Tensor& x_TD, const Tensor& w_XD, const Tensor& logits_TX) {
  return matmul(x_TD.dim(0), w_XD.dim(0), x_TD.dim(1), tb(x_TD) + tb(w_XD) + tb(logits_TX));
}
OpCost op_cost(OpTag<OpId::router_gate_backward_input>, const Tensor& dlogits_TX, const Tensor& w_XD,
               const Tensor& dx_TD) {
  return matmul(dlogits_TX.dim(0), w_XD.dim(0), w_XD.dim(1), tb(dlogits_TX) + tb(w_XD) + tb(dx_TD));
}
OpCost op_cost(OpTag<OpId::router_gate_backward_weight>, const Tensor& dlogits_TX, const Tensor& x_TD,
               const Tensor& dw_XD, bool accumulate) {
  return matmul(dlogits_TX.dim(0), dw_XD.dim(0), dw_XD.dim(1),
                tb(dlogits_TX) + tb(x_TD) + tb(dw_XD) * (accumulate ? 2 : 1));
}

// Rows the grouped GEMM really multiplies: the sum of the host counts, else every row.
double grouped_rows(const Tensor& rows_P, const Tensor& counts_E) {
  if (counts_E.defined() && counts_E.device() == Device::CPU && counts_E.dtype() == DType::I64) {
    const int64_t* c = counts_E.data_as<int64_t>();
    return static_cast<double>(std::accumulate(c, c + counts_E.numel(), int64_t{0}));
  }
  return static_cast<double>(rows_P.dim(0));
}
double row_fraction(const Tensor& rows_P, double rows) {
  return rows_P.dim(0) > 0 ? rows / static_cast<double>(rows_P.dim(0)) : 0.0;
}

OpCost op_cost(OpTag<OpId::grouped_linear_forward>, const Tensor& x_PK, const Tensor& w_EMK, const Tensor& counts_E,
               const Tensor& y_PM) {
  const double p = grouped_rows(x_PK, counts_E), f = row_fraction(x_PK, p);
  return matmul(p, w_EMK.dim(1), w_EMK.dim(2), f * (tb(x_PK) + tb(y_PM)) + tb(w_EMK));
}
OpCost op_cost(OpTag<OpId::grouped_linear_backward_input>, const Tensor& dy_PM, const Tensor& w_EMK,
               const Tensor& counts_E, const Tensor& dx_PK) {
  const double p = grouped_rows(dy_PM, counts_E), f = row_fraction(dy_PM, p);
  return matmul(p, w_EMK.dim(1), w_EMK.dim(2), f * (tb(dy_PM) + tb(dx_PK)) + tb(w_EMK));
}
OpCost op_cost(OpTag<OpId::grouped_linear_backward_weight>, const Tensor& dy_PM, const Tensor& x_PK,
               const Tensor& counts_E, const Tensor& dw_EMK, bool accumulate) {
  const double p = grouped_rows(dy_PM, counts_E), f = row_fraction(dy_PM, p);
  return matmul(p, dw_EMK.dim(1), dw_EMK.dim(2), f * (tb(dy_PM) + tb(x_PK)) + tb(dw_EMK) * (accumulate ? 2 : 1));
}

OpCost op_cost(OpTag<OpId::grouped_linear_backward_weight_pair>, const Tensor& dy_a_PM, const Tensor& x_a_PK,
               const Tensor& counts_a_E, const Tensor& dy_b_PM, const Tensor& x_b_PK, const Tensor& counts_b_E,
               const Tensor& dw_EMK, bool accumulate) {
  const double pa = grouped_rows(dy_a_PM, counts_a_E), pb = grouped_rows(dy_b_PM, counts_b_E);
  const double fa = row_fraction(dy_a_PM, pa), fb = row_fraction(dy_b_PM, pb);
  return matmul(pa + pb, dw_EMK.dim(1), dw_EMK.dim(2),
                fa * (tb(dy_a_PM) + tb(x_a_PK)) + fb * (tb(dy_b_PM) + tb(x_b_PK)) + tb(dw_EMK) * (accumulate ? 2 : 1));
}

// The FP8 GEMMs: the same FLOPs; bytes of the bf16 operands and outputs (the weight's codes once).
OpCost fp8(OpCost c) {
  c.kind = OpKind::Fp8Matmul;
  return c;
}
double codes_bytes(const ops::Fp8Tensor& w) { return w.codes.defined() ? tb(w.codes) : 0.0; }
OpCost op_cost(OpTag<OpId::fp8_linear_forward>, const Tensor& x_NK, const ops::Fp8Tensor& w_MK, const Tensor& y_NM) {
  return fp8(matmul(x_NK.dim(0), w_MK.codes.dim(0), x_NK.dim(1), tb(x_NK) + codes_bytes(w_MK) + tb(y_NM)));
}
OpCost op_cost(OpTag<OpId::fp8_linear_backward_input>, const Tensor& dy_NM, const ops::Fp8Tensor& w_MK,
               const Tensor& dx_NK, bool accumulate) {
  return fp8(matmul(dy_NM.dim(0), w_MK.codes.dim(0), w_MK.codes.dim(1),
                    tb(dy_NM) + codes_bytes(w_MK) + tb(dx_NK) * (accumulate ? 2 : 1)));
}
OpCost op_cost(OpTag<OpId::fp8_linear_backward_weight>, const Tensor& dy_NM, const Tensor& x_NK, const Tensor& dw_MK,
               bool accumulate) {
  return fp8(matmul(dy_NM.dim(0), dw_MK.dim(0), dw_MK.dim(1), tb(dy_NM) + tb(x_NK) + tb(dw_MK) * (accumulate ? 2 : 1)));
}
OpCost op_cost(OpTag<OpId::fp8_grouped_linear_forward>, const Tensor& x_PK, const ops::Fp8Tensor& w_EMK,
               const Tensor& counts_E, const Tensor& y_PM) {
  const double p = grouped_rows(x_PK, counts_E), f = row_fraction(x_PK, p);
  return fp8(matmul(p, w_EMK.codes.dim(1), w_EMK.codes.dim(2), f * (tb(x_PK) + tb(y_PM)) + codes_bytes(w_EMK)));
}
OpCost op_cost(OpTag<OpId::fp8_grouped_linear_backward_input>, const Tensor& dy_PM, const ops::Fp8Tensor& w_EMK,
               const Tensor& counts_E, const Tensor& dx_PK) {
  const double p = grouped_rows(dy_PM, counts_E), f = row_fraction(dy_PM, p);
  return fp8(matmul(p, w_EMK.codes.dim(1), w_EMK.codes.dim(2), f * (tb(dy_PM) + tb(dx_PK)) + codes_bytes(w_EMK)));
}
OpCost op_cost(OpTag<OpId::fp8_grouped_linear_backward_weight>, const Tensor& dy_PM, const Tensor& x_PK,
               const Tensor& counts_E, const Tensor& dw_EMK, bool accumulate) {
  const double p = grouped_rows(dy_PM, counts_E), f = row_fraction(dy_PM, p);
  return fp8(matmul(p, dw_EMK.dim(1), dw_EMK.dim(2), f * (tb(dy_PM) + tb(x_PK)) + tb(dw_EMK) * (accumulate ? 2 : 1)));
}
OpCost op_cost(OpTag<OpId::fp8_quantize>, const Tensor& x, const ops::Fp8Tensor& out) {
  OpCost c;
  c.bytes = tb(x) + 2 * codes_bytes(out);  // read once; codes and codes_t written
  return c;
}

// (query, key) pairs a causal attention with this window computes: sum over t of min(t + 1, W).
double attention_pairs(int64_t T, int64_t window) {
  const double t = static_cast<double>(T);
  const double w = window <= 0 || window >= T ? t : static_cast<double>(window);
  return w * (w + 1) / 2 + (t - w) * w;
}

OpCost attention_cost(const Tensor& q_THd, const ops::AttentionParams& p, double factor, double bytes) {
  OpCost c;
  c.kind = OpKind::Attention;
  c.flops = factor * 4.0 * attention_pairs(q_THd.dim(0), p.window) * static_cast<double>(q_THd.dim(1)) *
            static_cast<double>(q_THd.dim(2));
  c.bytes = bytes;
  c.note = p.window > 0 ? fmt::format("window={}", p.window) : "causal";
  return c;
}

OpCost op_cost(OpTag<OpId::attention_forward>, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& r,
               const Tensor& table, const ops::AttentionParams& p, const Tensor& out, const Tensor& lse) {
  return attention_cost(q, p, 1.0, tb(q) + tb(k) + tb(v) + tb(r) + tb(table) + tb(out) + tb(lse));
}
OpCost op_cost(OpTag<OpId::attention_backward>, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& r,
               const Tensor& table, const ops::AttentionParams& p, const Tensor& out, const Tensor& lse,
               const Tensor& dout, const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dr,
               const Tensor& dtable) {
  return attention_cost(q, p, 2.5,
                        tb(q) + tb(k) + tb(v) + tb(r) + tb(table) + tb(out) + tb(lse) + tb(dout) + tb(dq) + tb(dk) +
                            tb(dv) + tb(dr) + 2 * tb(dtable));
}

// Outputs that are read and written (accumulated or updated in place) count twice; slices count
// only the slice.
OpCost memory(double bytes) {
  OpCost c;
  c.bytes = bytes;
  return c;
}
OpCost op_cost(OpTag<OpId::add_inplace>, const Tensor& y, const Tensor& x) { return memory(2 * tb(y) + tb(x)); }
OpCost op_cost(OpTag<OpId::scale_inplace>, const Tensor& y, double) { return memory(2 * tb(y)); }
OpCost op_cost(OpTag<OpId::adamw_update>, const Tensor& value, const Tensor& grad, const Tensor& m, const Tensor& v,
               const Tensor& compute, const ops::AdamWStep&) {
  return memory(2 * (tb(value) + tb(m) + tb(v)) + tb(grad) + (compute.defined() ? tb(compute) : 0.0));
}
OpCost op_cost(OpTag<OpId::embedding_backward>, const Tensor& ids_T, const Tensor& dout_TD, const Tensor& dtable_VD) {
  // Only the looked-up rows of the table are read and written.
  const double row = dtable_VD.dim(0) > 0 ? tb(dtable_VD) / static_cast<double>(dtable_VD.dim(0)) : 0.0;
  return memory(tb(ids_T) + tb(dout_TD) + 2 * row * static_cast<double>(ids_T.numel()));
}
OpCost op_cost(OpTag<OpId::embedding_forward>, const Tensor& table_VD, const Tensor& ids_T, const Tensor& out_TD) {
  (void)table_VD;  // only the looked-up rows are read: as many bytes as the output (same dtype)
  return memory(tb(ids_T) + 2 * tb(out_TD));
}
OpCost op_cost(OpTag<OpId::embedding_backward_shard>, const Tensor& ids_T, const Tensor& dout_TD, int64_t, int64_t,
               const Tensor& dtable_VD) {
  return op_cost(OpTag<OpId::embedding_backward>{}, ids_T, dout_TD, dtable_VD);
}
OpCost op_cost(OpTag<OpId::embedding_forward_shard>, const Tensor& table_VD, const Tensor& ids_T, int64_t, int64_t,
               const Tensor& out_TD) {
  return op_cost(OpTag<OpId::embedding_forward>{}, table_VD, ids_T, out_TD);
}
// A collective's row: its label, and the bytes each rank moves.
OpCost op_cost(OpTag<OpId::collective>, const char* label, const Tensor& moved, const std::function<void()>&) {
  OpCost c = memory(moved.defined() ? tb(moved) : 0.0);
  c.op = label;
  return c;
}
OpCost op_cost(OpTag<OpId::get_columns>, const Tensor&, int64_t, const Tensor& out_Nw) { return memory(2 * tb(out_Nw)); }
OpCost op_cost(OpTag<OpId::set_columns>, const Tensor&, int64_t, const Tensor& v_Nw) { return memory(2 * tb(v_Nw)); }
OpCost op_cost(OpTag<OpId::zero>, const Tensor& t) { return memory(tb(t)); }

// ---- signatures -----------------------------------------------------------------------------------

std::string lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

template <typename T>
void append_signature(std::string& out, const T& a) {
  if constexpr (std::is_same_v<std::decay_t<T>, Tensor>) {
    if (!out.empty()) out += ' ';
    if (!a.defined()) {
      out += "-";
      return;
    }
    if (a.device() == Device::CPU) out += "host:";
    out += lower(dtype_name(a.dtype()));
    out += '[';
    for (int i = 0; i < a.ndim(); ++i) out += (i ? "," : "") + std::to_string(a.dim(i));
    out += ']';
  } else if constexpr (std::is_same_v<std::decay_t<T>, ops::Fp8Tensor>) {
    if (!out.empty()) out += ' ';
    out += "e4m3[";
    for (int i = 0; a.codes.defined() && i < a.codes.ndim(); ++i) out += (i ? "," : "") + std::to_string(a.codes.dim(i));
    out += ']';
  }
}

}  // namespace

const char* op_name(OpId id) { return kOpNames[static_cast<size_t>(id)]; }

// ---- the profiler's state ------------------------------------------------------------------------

struct OpProfiler::Impl final : CommSpanListener {
  // Timing events reused across profiles: take() hands out the next one, rewind() starts over.
  struct EventPool {
    std::vector<cudaEvent_t> events;
    size_t next = 0;
    cudaEvent_t take() {
      if (next == events.size()) {
        cudaEvent_t e = nullptr;
        QUILL_CUDA_CHECK(cudaEventCreate(&e));
        events.push_back(e);
      }
      return events[next++];
    }
    void rewind() { next = 0; }
    ~EventPool() {
      for (cudaEvent_t e : events) cudaEventDestroy(e);
    }
  };
  cudaStream_t stream = nullptr;
  int device = 0;
  int depth = 0;
  int64_t nested = 0;
  int64_t step = -1;
  EventPool pool;  // the ops' start and stop events
  cudaEvent_t step_start = nullptr, step_stop = nullptr;
  Timer host;
  struct Record {
    OpId id;
    std::string signature;
    OpCost cost;
    cudaEvent_t start, stop;
  };
  std::vector<Record> records;

  size_t start(OpId id, std::string signature, OpCost cost) {
    Record r{id, std::move(signature), std::move(cost), pool.take(), pool.take()};
    QUILL_CUDA_CHECK(cudaEventRecord(r.start, stream));
    records.push_back(std::move(r));
    outer = records.size() - 1;
    return outer;
  }
  void stop(size_t record) {
    QUILL_CUDA_CHECK(cudaEventRecord(records[record].stop, stream));
    outer = kNone;
  }

  // The communicators' spans (base/comm_timeline.h), while recording: events on their streams, owned
  // by the outermost op running when the span began. Their own event pool and a lock: a communicator
  // may be driven from another host thread than the ops.
  static constexpr size_t kNone = static_cast<size_t>(-1);
  size_t outer = kNone;
  std::atomic<bool> listening{false};
  struct Span {
    size_t owner;
    CommSpanInfo info;
    cudaEvent_t begin, end;
  };
  std::mutex span_mu;
  std::vector<Span> spans;
  EventPool span_pool;
  void span_begin(void* comm_stream, const CommSpanInfo& info) override {
    if (!listening) return;
    std::lock_guard<std::mutex> lock(span_mu);
    Span sp{outer, info, span_pool.take(), nullptr};
    QUILL_CUDA_CHECK(cudaEventRecord(sp.begin, static_cast<cudaStream_t>(comm_stream)));
    spans.push_back(std::move(sp));
  }
  void span_end(void* comm_stream) override {
    if (!listening) return;
    std::lock_guard<std::mutex> lock(span_mu);
    for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
      if (it->end != nullptr) continue;
      it->end = span_pool.take();
      QUILL_CUDA_CHECK(cudaEventRecord(it->end, static_cast<cudaStream_t>(comm_stream)));
      return;
    }
  }
  // Milliseconds from the step's start to `e` (waits for it).
  double at(cudaEvent_t e) const {
    QUILL_CUDA_CHECK(cudaEventSynchronize(e));
    float ms = 0;
    QUILL_CUDA_CHECK(cudaEventElapsedTime(&ms, step_start, e));
    return ms;
  }
  std::vector<CommProfileRow> comm_rows();
};

// The compute stream counts as busy inside the records that enqueued no collective (comm_profile.h).
std::vector<CommProfileRow> OpProfiler::Impl::comm_rows() {
  std::lock_guard<std::mutex> lock(span_mu);
  if (spans.empty()) return {};
  std::vector<bool> enqueued(records.size(), false);
  for (const Span& sp : spans)
    if (sp.owner != kNone) enqueued[sp.owner] = true;
  std::vector<TimeSpan> busy;
  for (size_t i = 0; i < records.size(); ++i)
    if (records[i].id != OpId::collective && !enqueued[i]) busy.push_back({at(records[i].start), at(records[i].stop)});
  const BusyTimeline compute(std::move(busy));
  std::vector<CommSpanTimes> times;
  for (const Span& sp : spans) {
    if (sp.end == nullptr) continue;  // cannot happen: a communicator closes every span it opens
    std::string label;
    if (sp.owner != kNone) {
      const Record& r = records[sp.owner];
      label = r.cost.op.empty() ? op_name(r.id) : r.cost.op;
    }
    times.push_back({std::move(label), sp.info, at(sp.begin), at(sp.end)});
  }
  spans.clear();
  span_pool.rewind();
  return comm_profile_rows(times, compute);
}

namespace {

// One wrapper per OpTable member: Wrapper<type>::call<member, id>.
template <typename Fn>
struct Wrapper;

template <typename R, typename... A>
struct Wrapper<R (*)(const DeviceContext&, A...)> {
  using Fn = R (*)(const DeviceContext&, A...);

  template <Fn OpTable::*Member, OpId Id>
  static R call(const DeviceContext& ctx, A... args) {
    // Only a ProfilingOpTable holds this function, and ops call it through ctx.cuda_ops.
    const auto* table = static_cast<const ProfilingOpTable*>(ctx.cuda_ops);
    const Fn inner = table->inner->*Member;
    OpProfiler& profiler = *table->profiler;
    if (!profiler.recording()) return inner(ctx, args...);
    OpProfiler::Impl& impl = profiler.impl();
    if (impl.depth > 0) {
      ++impl.nested;
      return inner(ctx, args...);
    }
    OpCost cost = op_cost(OpTag<Id>{}, args...);
    std::string signature;
    (append_signature(signature, args), ...);
    if (!cost.note.empty()) signature += " " + cost.note;
    const size_t record = impl.start(Id, std::move(signature), std::move(cost));
    struct Depth {
      int& d;
      explicit Depth(int& depth) : d(depth) { ++d; }
      ~Depth() { --d; }
    } depth(impl.depth);
    if constexpr (std::is_void_v<R>) {
      inner(ctx, args...);
      impl.stop(record);
    } else {
      R result = inner(ctx, args...);
      impl.stop(record);
      return result;
    }
  }
};

void wrap_table(ProfilingOpTable& t, const OpTable& inner) {
#define QUILL_OP_WRAP(name)                                                                               \
  t.name = inner.name == nullptr                                                                          \
               ? nullptr                                                                                  \
               : &Wrapper<decltype(OpTable::name)>::template call<&OpTable::name, OpId::name>;
  QUILL_OP_TABLE_ENTRIES(QUILL_OP_WRAP)
#undef QUILL_OP_WRAP
}

}  // namespace

OpProfiler::OpProfiler(const DeviceContext& ctx) : inner_(ctx), table_(new ProfilingOpTable), impl_(new Impl) {
  QUILL_CHECK(ctx.device == Device::CUDA && ctx.cuda != nullptr && ctx.cuda_ops != nullptr,
              "OpProfiler: needs a CUDA context with the backend's op table");
  table_->profiler = this;
  table_->inner = ctx.cuda_ops;
  wrap_table(*table_, *ctx.cuda_ops);
  impl_->stream = stream_of(ctx);
  impl_->device = ctx.cuda->device;
  QUILL_CUDA_CHECK(cudaEventCreate(&impl_->step_start));
  QUILL_CUDA_CHECK(cudaEventCreate(&impl_->step_stop));
  timeline_ = ctx.cuda->comm_timeline;
  if (timeline_) timeline_->listen(impl_.get());
}

OpProfiler::~OpProfiler() {
  if (timeline_ && timeline_->listener() == impl_.get()) timeline_->listen(nullptr);
  if (impl_->step_start) cudaEventDestroy(impl_->step_start);
  if (impl_->step_stop) cudaEventDestroy(impl_->step_stop);
}

DeviceContext OpProfiler::context() const {
  DeviceContext ctx = inner_;
  ctx.cuda_ops = table_.get();
  return ctx;
}

void OpProfiler::begin(int64_t step) {
  QUILL_CHECK(!recording_, "OpProfiler::begin: already recording");
  impl_->records.clear();
  impl_->pool.rewind();
  impl_->nested = 0;
  impl_->depth = 0;
  impl_->step = step;
  impl_->host.reset();
  impl_->outer = Impl::kNone;
  QUILL_CUDA_CHECK(cudaEventRecord(impl_->step_start, impl_->stream));
  recording_ = true;
  impl_->listening = true;
}

OpProfile OpProfiler::end() {
  QUILL_CHECK(recording_, "OpProfiler::end: not recording");
  recording_ = false;
  impl_->listening = false;
  QUILL_CUDA_CHECK(cudaEventRecord(impl_->step_stop, impl_->stream));
  QUILL_CUDA_CHECK(cudaEventSynchronize(impl_->step_stop));
  OpProfile p;
  p.step = impl_->step;
  p.host_ms = impl_->host.seconds() * 1e3;
  float ms = 0;
  QUILL_CUDA_CHECK(cudaEventElapsedTime(&ms, impl_->step_start, impl_->step_stop));
  p.step_ms = ms;
  p.nested_calls = impl_->nested;
  std::map<std::pair<int, std::string>, OpProfileRow> rows;
  std::map<std::pair<std::string, std::string>, IdleGapRow> gaps;
  cudaEvent_t last_stop = impl_->step_start;  // the stream's last op so far ended here
  std::string last_op = "(step start)";
  for (const Impl::Record& r : impl_->records) {
    const std::string name = r.cost.op.empty() ? op_name(r.id) : r.cost.op;
    QUILL_CUDA_CHECK(cudaEventElapsedTime(&ms, last_stop, r.start));
    IdleGapRow& gap = gaps[{last_op, name}];
    gap.after = last_op;
    gap.before = name;
    ++gap.gaps;
    gap.total_ms += std::max(ms, 0.0f);  // one stream's events complete in order; the clamp is for the timer's rounding
    p.idle_ms += std::max(ms, 0.0f);
    last_stop = r.stop;
    last_op = name;
    QUILL_CUDA_CHECK(cudaEventElapsedTime(&ms, r.start, r.stop));
    OpProfileRow& row = rows[{static_cast<int>(r.id), r.cost.op + " " + r.signature}];
    if (row.calls == 0) {
      row.op = name;
      row.signature = r.signature;
      row.kind = r.cost.kind;
    }
    ++row.calls;
    row.total_ms += ms;
    row.flops += r.cost.flops;
    row.bytes += r.cost.bytes;
    p.ops_ms += ms;
    ++p.calls;
  }
  for (auto& kv : rows) p.rows.push_back(std::move(kv.second));
  std::stable_sort(p.rows.begin(), p.rows.end(),
                   [](const OpProfileRow& a, const OpProfileRow& b) { return a.total_ms > b.total_ms; });
  for (auto& kv : gaps) p.idle_rows.push_back(std::move(kv.second));
  std::stable_sort(p.idle_rows.begin(), p.idle_rows.end(),
                   [](const IdleGapRow& a, const IdleGapRow& b) { return a.total_ms > b.total_ms; });
  p.comm_rows = impl_->comm_rows();
  impl_->records.clear();
  return p;
}

// ---- reports ---------------------------------------------------------------------------------------

namespace {

const char* kind_name(OpKind k) {
  switch (k) {
    case OpKind::Matmul: return "matmul";
    case OpKind::Attention: return "attention";
    case OpKind::Memory: return "memory";
    case OpKind::Fp8Matmul: return "fp8 mm";
  }
  return "?";
}

struct Rate {
  double value = 0;    // TFLOP/s or GB/s
  const char* unit = "";
  double of_ceiling = 0;  // fraction
};

Rate rate_of(OpKind kind, double flops, double bytes, double ms, const Ceilings& c) {
  Rate r;
  if (ms <= 0) return r;
  if (kind == OpKind::Memory) {
    r.value = bytes / (ms * 1e6);
    r.unit = "GB/s";
    r.of_ceiling = c.copy_gbps > 0 ? r.value / c.copy_gbps : 0;
  } else {
    r.value = flops / (ms * 1e9);
    r.unit = "TFLOP/s";
    const double ceiling = kind == OpKind::Fp8Matmul ? c.fp8_matmul_tflops : c.matmul_tflops;
    r.of_ceiling = ceiling > 0 ? r.value / ceiling : 0;
  }
  return r;
}

struct Rollup {
  std::string op;
  OpKind kind = OpKind::Memory;
  int64_t calls = 0;
  double total_ms = 0, flops = 0, bytes = 0;
};

std::vector<Rollup> rollup(const OpProfile& p) {
  std::map<std::string, Rollup> by;
  for (const OpProfileRow& r : p.rows) {
    Rollup& u = by[r.op];
    u.op = r.op;
    u.kind = r.kind;
    u.calls += r.calls;
    u.total_ms += r.total_ms;
    u.flops += r.flops;
    u.bytes += r.bytes;
  }
  std::vector<Rollup> out;
  for (auto& kv : by) out.push_back(kv.second);
  std::stable_sort(out.begin(), out.end(), [](const Rollup& a, const Rollup& b) { return a.total_ms > b.total_ms; });
  return out;
}

std::string clip(const std::string& s, size_t n) { return s.size() <= n ? s : s.substr(0, n - 3) + "..."; }

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    if (static_cast<unsigned char>(ch) < 0x20) {
      out += fmt::format("\\u{:04x}", static_cast<int>(ch));
      continue;
    }
    out += ch;
  }
  return out + "\"";
}

// The largest gaps between outermost calls, by the pair of ops around them (the rest in the JSON).
template <typename Pct>
std::string idle_gap_table(const OpProfile& p, const Pct& pct) {
  constexpr size_t kTop = 12;
  std::string out = fmt::format(
      "\nstream idle between ops: {:.3f} ms = {:.2f}% of the step, before the last op's end (waiting for the host to "
      "issue the next op, or for another stream)\n{:<32} {:<32} {:>6} {:>9} {:>6} {:>8}\n",
      p.idle_ms, pct(p.idle_ms), "after", "before", "gaps", "total ms", "% step", "mean us");
  for (size_t i = 0; i < p.idle_rows.size() && i < kTop; ++i) {
    const IdleGapRow& g = p.idle_rows[i];
    out += fmt::format("{:<32} {:<32} {:>6} {:>9.3f} {:>6.2f} {:>8.1f}\n", clip(g.after, 32), clip(g.before, 32),
                       g.gaps, g.total_ms, pct(g.total_ms), 1e3 * g.total_ms / static_cast<double>(g.gaps));
  }
  return out;
}

}  // namespace

std::string op_profile_table(const OpProfile& p, const Ceilings& c, size_t top) {
  std::string out = fmt::format(
      "per-op profile of step {}: {:.2f} ms on the GPU stream ({:.2f} ms host), ops {:.2f} ms = {:.1f}% of it, "
      "{} calls ({} nested calls folded into their callers)\n",
      p.step, p.step_ms, p.host_ms, p.ops_ms, p.step_ms > 0 ? 100 * p.ops_ms / p.step_ms : 0.0, p.calls,
      p.nested_calls);
  out += fmt::format("ceilings: matmul {:.0f} TFLOP/s, FP8 matmul {:.0f}, copy {:.0f} GB/s (attention is rated against "
                     "matmul)\n", c.matmul_tflops, c.fp8_matmul_tflops, c.copy_gbps);
  const auto pct = [&](double ms) { return p.step_ms > 0 ? 100 * ms / p.step_ms : 0.0; };
  out += fmt::format("{:<32} {:<58} {:>6} {:>9} {:>9} {:>6} {:>9} {:<7} {:>6}\n", "op", "shapes", "calls", "total ms",
                     "mean us", "% step", "achieved", "unit", "% ceil");
  size_t n = 0;
  for (const OpProfileRow& r : p.rows) {
    if (top && n++ >= top) {
      out += fmt::format("... {} more rows in the JSON\n", p.rows.size() - top);
      break;
    }
    const Rate rt = rate_of(r.kind, r.flops, r.bytes, r.total_ms, c);
    out += fmt::format("{:<32} {:<58} {:>6} {:>9.3f} {:>9.1f} {:>6.2f} {:>9.1f} {:<7} {:>6.1f}\n", clip(r.op, 32),
                       clip(r.signature, 58), r.calls, r.total_ms, 1e3 * r.total_ms / r.calls, pct(r.total_ms), rt.value,
                       rt.unit, 100 * rt.of_ceiling);
  }
  out += "\nby op:\n";
  out += fmt::format("{:<32} {:<9} {:>6} {:>9} {:>6} {:>9} {:<7} {:>6}\n", "op", "kind", "calls", "total ms", "% step",
                     "achieved", "unit", "% ceil");
  for (const Rollup& u : rollup(p)) {
    const Rate rt = rate_of(u.kind, u.flops, u.bytes, u.total_ms, c);
    out += fmt::format("{:<32} {:<9} {:>6} {:>9.3f} {:>6.2f} {:>9.1f} {:<7} {:>6.1f}\n", clip(u.op, 32), kind_name(u.kind),
                       u.calls, u.total_ms, pct(u.total_ms), rt.value, rt.unit, 100 * rt.of_ceiling);
  }
  out += fmt::format("{:<32} {:<9} {:>6} {:>9.3f} {:>6.2f}   (the rest: launch gaps, host work, syncs)\n", "(outside ops)",
                     "", "", p.step_ms - p.ops_ms, pct(p.step_ms - p.ops_ms));
  out += idle_gap_table(p, pct);
  out += comm_profile_table(p.comm_rows, p.step_ms);
  return out;
}

std::string op_profile_json(const OpProfile& p, const Ceilings& c) {
  std::string out = "{\n";
  out += fmt::format(
      " \"step\": {},\n \"step_ms\": {:.6f},\n \"host_ms\": {:.6f},\n \"ops_ms\": {:.6f},\n \"calls\": {},\n"
      " \"nested_calls\": {},\n \"ceilings\": {{\"matmul_tflops\": {}, \"copy_gbps\": {}, \"fp8_matmul_tflops\": {}}},\n"
      " \"definitions\": {{\"flops\": \"GEMM 2*M*N*K (grouped: rows = sum of counts); attention 4 * causal-window "
      "(query,key) pairs * heads * head_dim forward, 2.5x backward\", \"bytes\": \"each tensor argument once, "
      "accumulated/in-place outputs twice, slices and gathered rows only as touched\", \"timing\": \"CUDA events "
      "on the context's stream around each outermost op call\"}},\n",
      p.step, p.step_ms, p.host_ms, p.ops_ms, p.calls, p.nested_calls, c.matmul_tflops, c.copy_gbps,
      c.fp8_matmul_tflops);
  out += " \"rows\": [\n";
  for (size_t i = 0; i < p.rows.size(); ++i) {
    const OpProfileRow& r = p.rows[i];
    const Rate rt = rate_of(r.kind, r.flops, r.bytes, r.total_ms, c);
    out += fmt::format(
        "  {{\"op\": {}, \"signature\": {}, \"kind\": \"{}\", \"calls\": {}, \"total_ms\": {:.6f}, \"mean_us\": {:.3f}, "
        "\"flops\": {:.6g}, \"bytes\": {:.6g}, \"achieved\": {:.4f}, \"unit\": \"{}\", \"of_ceiling\": {:.4f}}}{}\n",
        json_string(r.op), json_string(r.signature), kind_name(r.kind), r.calls, r.total_ms,
        1e3 * r.total_ms / r.calls, r.flops, r.bytes, rt.value, rt.unit, rt.of_ceiling, i + 1 < p.rows.size() ? "," : "");
  }
  out += " ],\n \"by_op\": [\n";
  const std::vector<Rollup> ups = rollup(p);
  for (size_t i = 0; i < ups.size(); ++i) {
    const Rollup& u = ups[i];
    const Rate rt = rate_of(u.kind, u.flops, u.bytes, u.total_ms, c);
    out += fmt::format(
        "  {{\"op\": {}, \"kind\": \"{}\", \"calls\": {}, \"total_ms\": {:.6f}, \"flops\": {:.6g}, \"bytes\": {:.6g}, "
        "\"achieved\": {:.4f}, \"unit\": \"{}\", \"of_ceiling\": {:.4f}}}{}\n",
        json_string(u.op), kind_name(u.kind), u.calls, u.total_ms, u.flops, u.bytes, rt.value, rt.unit, rt.of_ceiling,
        i + 1 < ups.size() ? "," : "");
  }
  out += fmt::format(" ],\n \"idle_ms\": {:.6f},\n \"idle_gaps\": [\n", p.idle_ms);
  for (size_t i = 0; i < p.idle_rows.size(); ++i) {
    const IdleGapRow& g = p.idle_rows[i];
    out += fmt::format("  {{\"after\": {}, \"before\": {}, \"gaps\": {}, \"total_ms\": {:.6f}}}{}\n",
                       json_string(g.after), json_string(g.before), g.gaps, g.total_ms,
                       i + 1 < p.idle_rows.size() ? "," : "");
  }
  out += " ],\n \"collectives\": " + comm_profile_json(p.comm_rows) + "\n}\n";
  return out;
}

}  // namespace quill
