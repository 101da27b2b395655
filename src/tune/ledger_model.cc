#include "tune/ledger_model.h"

#include <algorithm>
#include <tuple>

#include "base/error.h"
#include "model/params.h"
#include "parallel/grid.h"
#include "parallel/layout.h"
#include "parallel/pipeline_schedule.h"
#include "plan/param_memory.h"

namespace quill::tune {

namespace {

// Rows keyed as CollectiveLedger keys them, each call added `calls` times at once.
class Rows {
 public:
  void add(const std::string& phase, const std::string& group, int size, const char* op, int64_t calls,
           int64_t payload, int64_t sent, int64_t recv) {
    if (calls == 0) return;
    CollectiveRow& r = rows_[{phase, group, op}];
    if (r.calls == 0) r.phase = phase, r.group = group, r.group_size = size, r.op = op;
    r.calls += calls;
    r.payload_bytes += calls * payload;
    r.sent_bytes += calls * sent;
    r.recv_bytes += calls * recv;
  }
  // Calls of different sizes at once: their totals.
  void add_totals(const std::string& phase, const std::string& group, int size, const char* op, int64_t calls,
                  int64_t payload, int64_t sent, int64_t recv) {
    if (calls == 0) return;
    add(phase, group, size, op, 1, payload, sent, recv);
    rows_[{phase, group, op}].calls += calls - 1;
  }
  // The ring collectives as CountingComm counts them (comm/counting_comm.cc), per call.
  void all_reduce(const std::string& phase, const std::string& group, int p, int64_t calls, int64_t bytes) {
    const int64_t wire = ring_all_reduce_bytes(bytes, p);
    add(phase, group, p, "all_reduce", calls, bytes, wire, wire);
  }
  void all_gather(const std::string& phase, const std::string& group, int p, int64_t calls, int64_t whole) {
    const int64_t wire = ring_gather_bytes(whole, p);
    add(phase, group, p, "all_gather", calls, whole, wire, wire);
  }
  void reduce_scatter(const std::string& phase, const std::string& group, int p, int64_t calls, int64_t whole) {
    const int64_t wire = ring_gather_bytes(whole, p);
    add(phase, group, p, "reduce_scatter", calls, whole, wire, wire);
  }
  std::vector<CollectiveRow> take(int64_t step) const {
    std::vector<CollectiveRow> out;
    for (const auto& [key, row] : rows_) {
      out.push_back(row);
      out.back().step = step;
    }
    return out;
  }

 private:
  std::map<std::tuple<std::string, std::string, std::string>, CollectiveRow> rows_;
};

bool frozen(const std::string& name, const std::vector<std::string>& patterns) {
  return std::any_of(patterns.begin(), patterns.end(), [&](const std::string& p) { return name_matches(name, p); });
}

// What every modelled function needs about the rank.
struct RankView {
  LayoutSpec spec;
  GridCoords coords;
  std::vector<int64_t> stage_layers;
  int64_t first = 0, end = 0;  // the stage's layers [first, end)
  int64_t micro_batches = 0;   // per step, this data-parallel rank's rows
  int act = 4;                 // activation element bytes
  std::vector<bool> recomputed;  // per stage layer: its forward runs twice (recompute)
  bool norms_again = false;      // --recompute-modules layernorm: the norms' outputs made again in the backward
  // How many times each stage layer's forward runs per micro-batch: 2 when recomputed, else 1.
  int64_t forwards(int64_t layer) const { return recomputed[static_cast<size_t>(layer - first)] ? 2 : 1; }
};

RankView view_of(const InklingConfig& c, const LayoutSpec& spec, int rank, const LedgerWorkload& w) {
  RankView v;
  v.spec = spec;
  const Grid grid(spec.world(), spec);
  v.coords = grid.coords(rank);
  v.stage_layers = resolve_stage_layers(spec, c.num_layers);
  for (int s = 0; s < v.coords.pp; ++s) v.first += v.stage_layers[static_cast<size_t>(s)];
  v.end = v.first + v.stage_layers[static_cast<size_t>(v.coords.pp)];
  QUILL_CHECK(w.row_tokens >= 2, "--row-tokens {}: a row needs at least 2 tokens", w.row_tokens);
  QUILL_CHECK(w.global_batch % spec.dp == 0, "--global-batch {} does not divide over {} data-parallel ranks",
              w.global_batch, spec.dp);
  QUILL_CHECK(spec.tp == 1 || w.row_tokens % spec.tp == 0,
              "--tensor-model-parallel-size {}: rows of {} tokens do not split into {} equal chunks", spec.tp,
              w.row_tokens, spec.tp);
  v.micro_batches = w.global_batch / spec.dp;
  v.act = w.device == Device::CPU ? 4 : 2;
  v.recomputed.assign(static_cast<size_t>(v.end - v.first), false);
  for (const auto& [b, e] : recompute_groups(w.recompute, v.end - v.first))
    for (int64_t i = b; i < e; ++i) v.recomputed[static_cast<size_t>(i)] = true;
  v.norms_again = w.recompute.selective() && w.recompute.layernorm;
  return v;
}

// A MoE layer's rows (T/tp x top_k) and, under balanced routing, how many of them land on each
// expert-parallel rank's experts from one sender (the loopback's rule for a peer).
int64_t routed_rows(const InklingConfig& c, const LayoutSpec& s, int64_t T) { return T / s.tp * c.num_experts_per_tok; }
int64_t balanced_rows_to(const InklingConfig& c, int ep, int ep_rank, int64_t P) {
  const int64_t E = c.n_routed_experts, El = E / ep;
  int64_t n = 0;
  for (int64_t e = 0; e < El; ++e) {
    const int64_t g = ep_rank * El + e;
    n += P / E + (g < P % E ? 1 : 0);
  }
  return n;
}

int64_t moe_layers_of(const InklingConfig& c, int64_t first, int64_t end) {
  int64_t n = 0;
  for (int64_t i = first; i < end; ++i) n += c.is_moe(i) ? 1 : 0;
  return n;
}

// The MoE layers' forwards per micro-batch on the rank: each MoE layer once, recomputed ones twice.
int64_t moe_forwards(const InklingConfig& c, const RankView& v) {
  int64_t n = 0;
  for (int64_t i = v.first; i < v.end; ++i) n += c.is_moe(i) ? v.forwards(i) : 0;
  return n;
}

// The passes' tensor-, sequence-parallel collectives and the expert count exchanges of the step's
// micro-batches.
void layer_collectives(const InklingConfig& c, const RankView& v, int64_t T, Rows& rows) {
  const LayoutSpec& s = v.spec;
  const int tp = s.tp;
  const int64_t m = v.micro_batches;
  const bool sp = s.sequence_parallel && tp > 1;
  const int64_t D = c.hidden_size, TD = T * D * v.act;
  const std::string P = "passes";
  if (tp > 1) {
    // gather_input and its backward, reduce_output and its backward (parallel/tensor_parallel.cc):
    // SP: all-gather / reduce-scatter of [T, D]; without SP: an all-reduce each way of the reductions.
    // `fwd` forwards (a recomputed layer's twice) and `bwd` backwards of such pairs.
    auto column_row_pairs = [&](int64_t fwd, int64_t bwd) {
      if (sp) {
        rows.all_gather(P, "tp", tp, (fwd + bwd) * m, TD);      // gather_input, reduce_output_backward
        rows.reduce_scatter(P, "tp", tp, (fwd + bwd) * m, TD);  // reduce_output, gather_input_backward
      } else {
        rows.all_reduce(P, "tp", tp, (fwd + bwd) * m, TD);      // reduce_output, gather_input_backward
      }
    };
    int64_t pairs = 0, pairs_fwd = 0, moe = 0, layers_fwd = 0;
    for (int64_t i = v.first; i < v.end; ++i) {
      const int64_t n = c.is_moe(i) ? 1 : 2;  // attention, and a dense MLP
      pairs += n, pairs_fwd += n * v.forwards(i), layers_fwd += v.forwards(i);
      moe += c.is_moe(i) ? 1 : 0;
    }
    const int64_t moe_fwd = moe_forwards(c, v);
    column_row_pairs(pairs_fwd, pairs);
    if (moe > 0) {
      // Routed experts on the rank's chunk: without SP, region_of_chunk and chunk_of_region_backward
      // all-gather [T/tp, D] into [T, D].
      if (!sp) rows.all_gather(P, "tp", tp, (moe_fwd + moe) * m, TD);
      if (c.n_shared_experts > 0) {
        column_row_pairs(moe_fwd, moe);  // the shared experts over all positions
        const int64_t gammas = T * c.n_shared_experts * 4;  // fp32 router weights [T, S]
        rows.all_gather(P, "tp", tp, moe_fwd * m, gammas);
        rows.reduce_scatter(P, "tp", tp, moe * m, gammas);
      }
    }
    // --recompute-modules layernorm under SP: each layer's backward gathers the attention's input and its MLP's
    // (a dense MLP, or the shared experts) again (DecoderLayer::backward).
    if (sp && v.norms_again) {
      int64_t again = 0;
      for (int64_t i = v.first; i < v.end; ++i) again += 1 + (!c.is_moe(i) || c.n_shared_experts > 0 ? 1 : 0);
      rows.all_gather(P, "tp", tp, again * m, TD);
    }
    // The halos of the two residual convolutions, forward and backward: K-1 rows of every rank.
    if (sp && c.conv_kernel_size > 1)
      rows.all_gather(P, "tp", tp, 2 * (layers_fwd + (v.end - v.first)) * m, tp * (c.conv_kernel_size - 1) * D * v.act);
  }
  // Expert parallelism: per MoE layer's forward the count exchange (a recomputed layer's twice).
  if (s.ep > 1) {
    const int64_t El = c.n_routed_experts / s.ep;
    rows.add(P, "ep", s.ep, "all_to_all", moe_forwards(c, v) * m, c.n_routed_experts * 8, (s.ep - 1) * El * 8,
             (s.ep - 1) * El * 8);
  }
}

// The first stage's vocab-parallel embedding and the last stage's head, over the step's micro-batches.
void stage_ends(const InklingConfig& c, const RankView& v, int64_t T, Device device,
                const std::vector<std::string>& freeze, Rows& rows) {
  const int tp = v.spec.tp;
  const int64_t m = v.micro_batches;
  if (tp == 1) return;
  const bool sp = v.spec.sequence_parallel;
  const int64_t TD = T * c.hidden_size * v.act;
  const std::string P = "passes";
  if (v.coords.pp == 0) {  // vocab-parallel embedding: the partial lookups reduced, the backward's gather
    if (sp) rows.reduce_scatter(P, "tp", tp, m, TD);
    else rows.all_reduce(P, "tp", tp, m, TD);
    if (sp && !frozen("model.llm.embed.weight", freeze)) rows.all_gather(P, "tp", tp, m, TD);
  }
  if (v.coords.pp == v.spec.pp - 1) {  // the head: hn gathered, the loss statistics per chunk, dhn reduced
    if (sp) rows.all_gather(P, "tp", tp, m, TD);
    const int64_t chunk = device == Device::CPU ? 1024 : 8192;  // model/stage_model.cc head_chunk_rows
    const int64_t stats = device == Device::CPU ? 8 : 4;        // F64 on the CPU, F32 on a GPU
    for (int64_t r0 = 0; r0 < T; r0 += chunk) rows.all_gather(P, "tp", tp, m, tp * std::min(chunk, T - r0) * 3 * stats);
    if (sp) rows.reduce_scatter(P, "tp", tp, m, TD);
    else rows.all_reduce(P, "tp", tp, m, TD);
  }
}

// The expert exchange's data all-to-alls over the step: per MoE layer and micro-batch a dispatch
// (this rank's P rows out; the peers' rows for its experts in) and a combine (the reverse), each twice
// (forward and the backward's adjoint). Rows to its own experts move nothing.
void expert_exchange(const InklingConfig& c, const RankView& v, int64_t T, int64_t own_rows, Rows& rows) {
  const LayoutSpec& s = v.spec;
  if (s.ep == 1) return;
  const int64_t L = moe_layers_of(c, v.first, v.end), calls = L * v.micro_batches;
  if (calls == 0) return;
  const int64_t P = routed_rows(c, s, T), rowb = c.hidden_size * v.act;
  int64_t from_peers = 0;  // per layer and micro-batch
  for (int q = 0; q < s.ep; ++q)
    if (q != v.coords.ep) from_peers += balanced_rows_to(c, s.ep, v.coords.ep, P);
  // One exchange of the step's MoE layers (each layer's forward, or each backward's adjoint), `share`
  // of them: own_rows is the whole step's, so a recomputed subset moves its proportional part (exact
  // for balanced routing, where every layer routes alike).
  auto exchange = [&](int64_t n) {
    const int64_t own = own_rows * n / calls;
    const int64_t out_rows = n * P - own;      // to other ranks
    const int64_t in_rows = n * from_peers;    // from other ranks
    rows.add_totals("passes", "ep", s.ep, "all_to_all", n, n * P * rowb, out_rows * rowb, in_rows * rowb);
    rows.add_totals("passes", "ep", s.ep, "all_to_all", n, (own + in_rows) * rowb, in_rows * rowb, out_rows * rowb);
  };
  exchange(calls);                                                         // the forward
  exchange(calls);                                                         // the backward's adjoints
  if (const int64_t again = (moe_forwards(c, v) - L) * v.micro_batches; again > 0) exchange(again);  // recompute
}

}  // namespace

int64_t balanced_own_expert_rows(const InklingConfig& c, const LayoutSpec& spec, int rank, const LedgerWorkload& w) {
  const RankView v = view_of(c, spec, rank, w);
  if (spec.ep == 1) return 0;
  return moe_layers_of(c, v.first, v.end) * v.micro_batches *
         balanced_rows_to(c, spec.ep, v.coords.ep, routed_rows(c, spec, w.row_tokens));
}

std::vector<CollectiveRow> modelled_ledger(const InklingConfig& c, const LayoutSpec& spec, int rank,
                                           const LedgerWorkload& w, int64_t step, int64_t own_expert_rows) {
  const RankView v = view_of(c, spec, rank, w);
  const int64_t T = w.row_tokens, m = v.micro_batches;
  Rows rows;
  layer_collectives(c, v, T, rows);
  stage_ends(c, v, T, w.device, w.freeze, rows);
  expert_exchange(c, v, T, own_expert_rows >= 0 ? own_expert_rows : balanced_own_expert_rows(c, spec, rank, w), rows);
  // Pipeline messages by the 1F1B table: [region rows, D] activations and gradients.
  if (spec.pp > 1) {
    const int64_t msg = (spec.sequence_parallel && spec.tp > 1 ? T / spec.tp : T) * c.hidden_size * v.act;
    const PipeSchedule sch = one_f_one_b(spec.pp, static_cast<int>(m));
    for (const PipeAction& a : sch.actions[static_cast<size_t>(v.coords.pp)]) {
      if (a.is_pass) continue;
      const auto& msgs = a.exchange.messages;
      if (msgs.size() == 2) rows.add("passes", "pp", spec.pp, "send_recv", 1, 2 * msg, msg, msg);
      else if (msgs[0].send) rows.add("passes", "pp", spec.pp, "send", 1, msg, msg, 0);
      else rows.add("passes", "pp", spec.pp, "recv", 1, msg, 0, msg);
    }
  }
  // The optimizer phase: the world's sums (expert counts of every MoE layer, the loss), each bucket's
  // gradient reduction, the norm (F64), each bucket's weight all-gather in its compute dtype.
  const std::string O = "optimizer";
  if (spec.world() > 1) {
    const int64_t moe_all = moe_layers_of(c, 0, c.num_layers);
    rows.all_reduce(O, "world", spec.world(), 1, std::max<int64_t>(1, moe_all * c.n_routed_experts) * 8);
    rows.all_reduce(O, "world", spec.world(), 2, 8);
  }
  const Grid grid(spec.world(), spec);
  const plan::RankParams params = plan::rank_params(c, grid, rank, v.stage_layers, w.device, w.freeze);
  for (const plan::BucketBytes& b : params.buckets) {
    if (b.sum_over_tp && spec.tp > 1) rows.all_reduce(O, "tp", spec.tp, 1, b.numel * 4);
    if (b.group_size > 1) {
      rows.reduce_scatter(O, b.group, b.group_size, 1, b.numel * 4);
      rows.all_gather(O, b.group, b.group_size, 1, b.numel * static_cast<int64_t>(dtype_size(b.compute)));
    }
  }
  return rows.take(step);
}

std::map<std::string, std::vector<int>> rank_groups(const LayoutSpec& spec, int rank) {
  const Grid grid(spec.world(), spec);
  std::map<std::string, std::vector<int>> out;
  for (GroupKind kind : all_group_kinds()) {
    const RankGroup g = grid.group(kind, rank);
    if (g.size() > 1) out[group_kind_name(kind)] = g.ranks;
  }
  std::vector<int> everyone(static_cast<size_t>(spec.world()));
  for (int r = 0; r < spec.world(); ++r) everyone[static_cast<size_t>(r)] = r;
  out["world"] = everyone;
  return out;
}

int stage_rank(const LayoutSpec& spec, int stage) {
  const Grid grid(spec.world(), spec);
  for (int r = 0; r < spec.world(); ++r) {
    const GridCoords c = grid.coords(r);
    if (c.pp == stage && c.tp == 0 && c.cp == 0 && c.dp == 0) return r;
  }
  QUILL_FAIL("layout {}: no stage {}", spec.describe(), stage);
}

}  // namespace quill::tune
