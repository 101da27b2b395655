// Each function below replays one function of the model (named in its comment) allocation by
// allocation: a tensor the model allocates is an alloc here, in the same order relative to the
// ops' internal scratch; a local freed at the end of the model function is freed at the end of the
// replay. Shapes are per rank (Megatron's shares under tensor/sequence/expert parallelism).
#include "plan/activation_trace.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include <fmt/format.h>

#include "base/error.h"
#include "model/fp8_params.h"
#include "model/params.h"
#include "ops/attention_head_split.h"

namespace quill::plan {

namespace {
constexpr int64_t kAttentionTcRows = 64;  // ops/cuda/attention_tc.cuh kRows: dq_acc's row padding
constexpr int64_t kCeStatusBytes = 16;    // ops/cuda/cross_entropy.cu Status {double, unsigned}
// model/stage_model.cc head_chunk_rows: the LM head's rows per chunk.
int64_t head_chunk_rows(Device device) { return device == Device::CPU ? 1024 : 8192; }
std::string layer_prefix(int64_t layer) { return fmt::format("model.llm.layers.{}.", layer); }
}  // namespace

StageTrace::StageTrace(const InklingConfig& config, const TraceShape& shape, int64_t first_layer, int64_t end_layer,
                       MemoryTrace& mem)
    : c_(config), shape_(shape), first_(first_layer), end_(end_layer), mem_(mem) {
  act_ = shape.device == Device::CPU ? 4 : 2;  // DeviceContext::activation: fp32 on the CPU, bf16 on a GPU
  T_ = shape.row_tokens;
  D_ = config.hidden_size;
  tp_ = shape.tp;
  sp_ = shape.sequence_parallel && shape.tp > 1;
  // Sequence parallelism splits the rows, and the routed experts take each tensor-parallel rank's share of the tokens.
  QUILL_CHECK(tp_ == 1 || T_ % tp_ == 0, "the row's {} tokens do not divide over {} tensor-parallel ranks", T_, tp_);
  Tseq_ = sp_ ? T_ / tp_ : T_;
  group_of_layer_.assign(static_cast<size_t>(end_ - first_), {-1, -1});
  for (const auto& [b, e] : recompute_groups(shape.recompute, end_ - first_))
    for (int64_t i = b; i < e; ++i) group_of_layer_[static_cast<size_t>(i)] = {b, e};
  held_.resize(static_cast<size_t>(end_ - first_));
  held_rows_.assign(static_cast<size_t>(end_ - first_), 0);
}

bool StageTrace::frozen(const std::string& name) const {
  for (const std::string& p : shape_.freeze)
    if (name_matches(name, p)) return true;
  return false;
}

void StageTrace::router_gate_workspace(int64_t Tc, router_gate::Op op) {
  if (cuda()) mem_.spike(Use::Temporary, router_gate::workspace_bytes(op, Tc, D_, c_.n_routed_experts + c_.n_shared_experts));
}

StageTrace::Id StageTrace::grad_scratch(const std::string& name, int64_t elements) {
  // layer_util.h grad_target / grad_write: a frozen parameter's gradient is a scratch fp32 tensor.
  return frozen(name) ? f32(Use::Temporary, elements) : MemoryTrace::kNone;
}

// --- TensorParallel (parallel/tensor_parallel.h): what each boundary allocates -------------------
// gather_input: SP all-gathers the chunks into a new [T, D]; else the same tensor (kNone: no new one).
StageTrace::Id StageTrace::gather_input(Use use) { return sp_ ? activation(use, T_, D_) : MemoryTrace::kNone; }
// reduce_output / gather_input_backward of a [T, D] partial: SP reduce-scatters into a new [Tseq, D]
// (the partial is the caller's to free); else an in-place all-reduce (kNone).
StageTrace::Id StageTrace::reduce_rows(Use use) { return sp_ ? activation(use, Tseq_, D_) : MemoryTrace::kNone; }

// --- StageModel::forward ------------------------------------------------------------------------

StageTrace::Id StageTrace::forward(Activations& act, Id h_in) {
  act = Activations{};
  act.layers.resize(static_cast<size_t>(end_ - first_));
  Id h = h_in;
  if (first_stage()) {
    if (cuda()) act.kept.push_back(i32(Use::Saved, T_));  // the ids, uploaded (on the CPU a host tensor)
    // Vocab-parallel with tp > 1: each rank's partial lookup, reduced into the sequence region.
    const Id emb = activation(Use::Saved, T_, D_);
    const Id reduced = tp_ > 1 ? reduce_rows(Use::Saved) : MemoryTrace::kNone;
    if (reduced != MemoryTrace::kNone) {
      mem_.free(emb);
      act.kept.push_back(reduced);
    } else {
      act.kept.push_back(emb);
    }
    h = activation(Use::Saved, Tseq_, D_);        // embed_norm's output: layer 0's input, released with it
    act.layers[0].saved.push_back(h);
    act.kept.push_back(f32(Use::Saved, Tseq_));  // rstd_embed
  } else {
    mem_.retag(h_in, Use::Saved);
    act.kept.push_back(h_in);  // act.h_in (and layer 0's h_in)
  }
  for (int64_t l = first_; l < end_; ++l) {
    Layer& saved = act.layers[static_cast<size_t>(l - first_)];
    h = decoder_forward(l, saved, h);
    const auto [group_begin, group_end] = group_of_layer_[static_cast<size_t>(l - first_)];
    if (group_begin >= 0) {  // recomputed: everything dropped but the group's input (layer 0's own, or act.kept's)
      const bool keeps_input = group_begin == l - first_ && !(l == first_ && !first_stage());
      for (size_t j = keeps_input ? 1 : 0; j < saved.saved.size(); ++j) mem_.free(saved.saved[j]);
      saved.saved.resize(keeps_input ? 1 : 0);
    }
    if (l + 1 < end_) act.layers[static_cast<size_t>(l + 1 - first_)].saved.push_back(h);  // the next layer's h_in
  }
  if (!last_stage()) {
    mem_.retag(h, Use::Pipeline);  // out[m], sent to the next stage
    return h;
  }
  head_forward(act, h);
  return MemoryTrace::kNone;
}

// StageModel::forward's head: final norm, muP division, unembedding (all T rows, this rank's
// vocabulary rows) and the loss in row chunks, each chunk's logits gradient consumed at once.
void StageTrace::head_forward(Activations& act, Id h) {
  Id targets = MemoryTrace::kNone, weights = MemoryTrace::kNone;
  if (cuda()) {  // uploaded; host tensors on the CPU
    targets = i32(Use::Logits, T_);
    weights = f32(Use::Logits, T_);
  }
  act.h_out = h;
  const Id hn = activation(Use::Logits, Tseq_, D_);
  act.kept.push_back(f32(Use::Saved, Tseq_));  // rstd_final
  const Id hn_all = gather_input(Use::Gather);
  const Id dhn_all = activation(Use::Saved, T_, D_);
  const int64_t V = c_.vocab_size / tp_;  // this rank's rows of the unembedding
  const Id dunembed = grad_scratch("model.llm.unembed.weight", V * D_);
  const int64_t chunk = head_chunk_rows(shape_.device);
  for (int64_t r0 = 0; r0 < T_; r0 += chunk) {
    const int64_t n = std::min(T_, r0 + chunk) - r0;
    const Id logits = activation(Use::Logits, n, V), dlogits = activation(Use::Logits, n, V);
    if (tp_ > 1) {  // vocab-parallel loss: each rank's row statistics, gathered
      const Id stats = mem_.alloc(Use::Logits, n * 3 * (cuda() ? 4 : 8));
      if (cuda()) mem_.spike(Use::Logits, 4);  // cross_entropy.cu: the stats' check word
      const Id all = mem_.alloc(Use::Logits, tp_ * n * 3 * (cuda() ? 4 : 8));
      if (cuda()) mem_.spike(Use::Logits, kCeStatusBytes + 8 * n);
      mem_.free(all);
      mem_.free(stats);
    } else if (cuda()) {
      mem_.spike(Use::Logits, kCeStatusBytes + 8 * n);  // cross_entropy.cu: per-row loss sums
    }
    mem_.free(logits);
    mem_.free(dlogits);
  }
  // dL/d(normed h) back to the sequence region: reduce-scattered with SP, all-reduced in place without.
  const Id dhn = reduce_rows(Use::Saved);
  if (dhn != MemoryTrace::kNone) {
    act.dhn = dhn;
    mem_.free(dhn_all);
  } else {
    act.dhn = dhn_all;
  }
  for (Id id : {dunembed, hn_all, hn, targets, weights}) mem_.free(id);
}

// --- StageModel::backward -----------------------------------------------------------------------

StageTrace::Id StageTrace::backward(Activations& act, Id dh_out) {
  Id dh = dh_out;
  bool own = false;  // the received gradient stays the executor's until the backward returns
  if (last_stage()) {
    dh = activation(Use::Temporary, Tseq_, D_);
    own = true;
    mem_.free(grad_scratch("model.llm.norm.weight", D_));
    mem_.free(act.dhn);
    mem_.free(act.h_out);
    act.dhn = act.h_out = MemoryTrace::kNone;
  }
  for (int64_t l = end_; l-- > first_;) {
    const auto [group_begin, group_end] = group_of_layer_[static_cast<size_t>(l - first_)];
    if (group_begin >= 0 && group_end == l + 1 - first_) recompute_group(act, group_begin, group_end);
    Layer& saved = act.layers[static_cast<size_t>(l - first_)];
    const Id next = decoder_backward(l, saved, dh, act.expert_wgrad);
    if (own) mem_.free(dh);
    dh = next;
    own = true;
    for (Id id : saved.saved) mem_.free(id);
    saved.saved.clear();
  }
  if (!first_stage()) return dh;
  const Id demb = activation(Use::Temporary, tp_ > 1 && !sp_ ? T_ : Tseq_, D_);
  mem_.free(grad_scratch("model.llm.embed_norm.weight", D_));
  // The embedding's scatter-add reads every row's gradient (gathered with SP).
  if (!frozen("model.llm.embed.weight") && tp_ > 1) mem_.free(gather_input(Use::Gather));
  mem_.free(demb);
  mem_.free(dh);
  return MemoryTrace::kNone;
}

void StageTrace::recompute_group(Activations& act, int64_t begin, int64_t end) {
  Id h = MemoryTrace::kNone;  // the input: layers[begin].saved[0], or act.kept's received rows (not freed here)
  for (int64_t i = begin; i < end; ++i) {
    Layer& saved = act.layers[static_cast<size_t>(i)];
    if (i > begin) saved.saved.push_back(h);
    h = decoder_forward(first_ + i, saved, h);
  }
  mem_.free(h);  // the recomputed output of the group's last layer
}

void StageTrace::release(Activations& act) {
  for (Id id : act.kept) mem_.free(id);
  act = Activations{};
}

// --- DecoderLayer -------------------------------------------------------------------------------

// DecoderLayer::residual_conv: the input is kept for the backward, with SP beside the K-1 rows before the chunk
// (sp_halo.cc gather_halo: every rank's last rows gathered, the halo a view of them; a chunk shorter than the
// halo sends a copy and keeps a halo of its own); the output is a new tensor.
StageTrace::Id StageTrace::residual_conv(Layer& s, Id x) {
  const int64_t H = c_.conv_kernel_size - 1;
  mem_.retag(x, Use::Saved);
  s.saved.push_back(x);
  if (sp_ && H > 0) {
    if (Tseq_ >= H) {
      s.saved.push_back(activation(Use::Saved, tp_ * H, D_));
    } else {
      const Id mine = activation(Use::Gather, H, D_), all = activation(Use::Gather, tp_ * H, D_);
      s.saved.push_back(activation(Use::Saved, H, D_));
      mem_.free(all);
      mem_.free(mine);
    }
  }
  return activation(Use::Saved, Tseq_, D_);
}

// DecoderLayer::residual_conv_backward: dx and the halo's gradient, then every rank's halo gradients gathered
// (sp_halo.cc scatter_halo_grad) and added into dx.
StageTrace::Id StageTrace::residual_conv_backward(const std::string& conv) {
  const int64_t H = c_.conv_kernel_size - 1, K = c_.conv_kernel_size;
  const Id dx = activation(Use::Temporary, Tseq_, D_);
  const Id dhalo = sp_ && H > 0 ? activation(Use::Temporary, H, D_) : MemoryTrace::kNone;
  mem_.free(grad_scratch(conv, D_ * K));
  if (dhalo != MemoryTrace::kNone) {
    mem_.free(activation(Use::Gather, tp_ * H, D_));
    mem_.free(dhalo);
  }
  return dx;
}

StageTrace::Id StageTrace::decoder_forward(int64_t l, Layer& s, Id) {
  // --recompute-modules layernorm: each norm's output goes after its consumer's forward.
  const Id a_norm = activation(Use::Saved, Tseq_, D_);
  if (!norms_again()) s.saved.push_back(a_norm);
  s.saved.push_back(f32(Use::Saved, Tseq_));             // rstd_a
  const Id attn = attention_forward(l, s);
  if (norms_again()) mem_.free(a_norm);
  s.saved.push_back(residual_conv(s, attn));             // h_mid (its input: attn_out)
  const Id m_norm = activation(Use::Saved, Tseq_, D_);
  if (!norms_again()) s.saved.push_back(m_norm);
  s.saved.push_back(f32(Use::Saved, Tseq_));             // rstd_m
  const Id mlp = c_.is_moe(l) ? moe_forward(l, s) : dense_forward(l, s);
  if (norms_again()) mem_.free(m_norm);
  return residual_conv(s, mlp);                          // h_out (its input: mlp_out)
}

// DecoderLayer::norm_again: the norm's output, its statistics a scratch tensor.
StageTrace::Id StageTrace::norm_again() {
  const Id y = activation(Use::Temporary, Tseq_, D_);
  mem_.free(f32(Use::Temporary, Tseq_));
  return y;
}

StageTrace::Id StageTrace::decoder_backward(int64_t l, Layer& saved, Id, ExpertWgradTurn turn) {
  const std::string p = layer_prefix(l);
  // --tp-comm-overlap: the attention's input made again is gathered by the attention's backward.
  const bool block_gathers = norms_again() && overlap() && sp_;
  Id x_region = MemoryTrace::kNone, x_again = MemoryTrace::kNone;
  const Id dmlp = residual_conv_backward(p + "mlp_sconv.weight");
  std::vector<Id> again;  // --recompute-modules layernorm: the MLP's inputs made again, for its backward
  if (norms_again()) {
    const Id m = norm_again();
    // The shared experts' input or the dense MLP's input gathered again (under --tp-comm-overlap with SP the
    // block's backward gathers that itself, started early).
    again = {m};
    if ((!c_.is_moe(l) || c_.n_shared_experts > 0) && !(overlap() && sp_)) again.push_back(gather_input(Use::Temporary));
  }
  const Id dm = c_.is_moe(l) ? moe_backward(l, saved, turn) : dense_backward(l);
  for (Id id : again) mem_.free(id);
  const Id dh_mid = activation(Use::Temporary, Tseq_, D_);
  mem_.free(grad_scratch(p + "mlp_norm.weight", D_));
  const Id dattn = residual_conv_backward(p + "attn_sconv.weight");
  if (block_gathers) {
    x_region = norm_again();
  } else if (norms_again()) {  // the attention's input made again (all T rows under SP)
    const Id a = norm_again();
    x_again = gather_input(Use::Temporary);
    if (x_again == MemoryTrace::kNone) x_again = a;
    else mem_.free(a);
  }
  const Id da = attention_backward(l, x_region);
  mem_.free(x_again);
  const Id dh_in = activation(Use::Temporary, Tseq_, D_);
  mem_.free(grad_scratch(p + "attn_norm.weight", D_));
  for (Id id : {dmlp, dm, dh_mid, dattn, da}) mem_.free(id);
  return dh_in;
}

// --- AttentionBlock -----------------------------------------------------------------------------

StageTrace::Id StageTrace::attention_forward(int64_t l, Layer& s) {
  const int64_t H = c_.heads(l) / tp_, G = c_.kv_heads(l) / tp_, d = c_.layer_head_dim(l), R = c_.d_rel;
  const int64_t E = c_.extent(l);
  const Id x = gather_input(Use::Saved);  // the projections' input, kept for their weight gradients
  if (x != MemoryTrace::kNone && !norms_again()) s.saved.push_back(x);
  for (int64_t cols : {H * d, G * d, G * d, H * R}) s.saved.push_back(activation(Use::Saved, T_, cols));  // q, k0, v0, r
  // FP8 stacked: one GEMM's [rows, Z] output, copied out by columns (per gathered chunk under --tp-comm-overlap).
  if (shape_.fp8 && projections_stacked(l))
    mem_.free(activation(Use::Temporary, overlap() && sp_ ? Tseq_ : T_, H * d + 2 * G * d + H * R));
  s.saved.push_back(activation(Use::Saved, T_, G * d));  // k1
  s.saved.push_back(activation(Use::Saved, T_, G * d));  // v1
  s.saved.push_back(activation(Use::Saved, T_, H * d));  // qn
  s.saved.push_back(activation(Use::Saved, T_, G * d));  // kn
  s.saved.push_back(f32(Use::Saved, T_ * H));            // rstd_q
  s.saved.push_back(f32(Use::Saved, T_ * G));            // rstd_k
  s.saved.push_back(activation(Use::Saved, T_, H * d));  // o
  s.saved.push_back(f32(Use::Saved, H * T_));            // lse
  const bool log_scaling = c_.log_scaling && !c_.is_local(l);
  if (cuda() && d == 128) {  // ops/cuda/attention_tc_forward.cu: the bias rows of every query, fp32
    const Id rb = R > 0 && E > 0 ? f32(Use::Attention, T_ * H * E) : MemoryTrace::kNone;
    const Id tau = log_scaling ? f32(Use::Attention, T_) : MemoryTrace::kNone;
    mem_.free(rb);
    mem_.free(tau);
  }
  // o_proj (row-parallel): a partial [T, D], reduced into the sequence region; under --tp-comm-overlap
  // (TensorParallel::reduce_output_pipelined) the result first, then the partial in two pieces (half of every
  // rank's chunk each), freed with the reduction.
  if (overlap() && sp_) {
    const Id reduced = reduce_rows(Use::Temporary);
    const int64_t half = Tseq_ / 2;
    const Id first = activation(Use::Temporary, tp_ * half, D_);
    const Id second = activation(Use::Temporary, tp_ * (Tseq_ - half), D_);
    mem_.free(first);
    mem_.free(second);
    if (norms_again()) mem_.free(x);
    return reduced;
  }
  const Id out = activation(Use::Temporary, T_, D_);
  const Id reduced = reduce_rows(Use::Temporary);
  if (norms_again()) mem_.free(x);  // dropped by the layer after the forward (kNone without SP: the norm's output)
  if (reduced == MemoryTrace::kNone) return out;
  mem_.free(out);
  return reduced;
}

bool StageTrace::projections_stacked(int64_t l) const {
  const std::string p = layer_prefix(l) + "attn.";
  for (const char* w : {"wq_du.weight", "wk_dv.weight", "wv_dv.weight", "wr_du.weight"})
    if (frozen(p + w)) return false;
  if (!shape_.fp8) return true;
  const int64_t H = c_.heads(l) / tp_, G = c_.kv_heads(l) / tp_, d = c_.layer_head_dim(l), R = c_.d_rel;
  return StackedFp8Copy::rows_stack({H * d, G * d, G * d, H * R});
}

StageTrace::Id StageTrace::attention_backward(int64_t l, Id x_region) {
  const std::string p = layer_prefix(l) + "attn.";
  const int64_t H = c_.heads(l) / tp_, G = c_.kv_heads(l) / tp_, d = c_.layer_head_dim(l), R = c_.d_rel;
  const int64_t E = c_.extent(l), K = c_.conv_kernel_size;
  const Id dout = gather_input(Use::Gather);  // reduce_output_backward
  const Id do_TX = activation(Use::Temporary, T_, H * d);
  mem_.free(grad_scratch(p + "wo_ud.weight", D_ * H * d));
  // The input made again (x_region): its gather started here, behind dout's; the region kept to the wait.
  const Id x_again = x_region != MemoryTrace::kNone ? gather_input(Use::Temporary) : MemoryTrace::kNone;
  const Id dqn = activation(Use::Temporary, T_, H * d), dkn = activation(Use::Temporary, T_, G * d);
  const Id dv1 = activation(Use::Temporary, T_, G * d), dr = activation(Use::Temporary, T_, H * R);
  {
    const Id dtable = grad_scratch(p + "rel_logits_proj.proj", R * E);
    if (cuda()) {  // ops/cuda/attention_backward.cu and attention_tc_backward.cu
      std::vector<Id> scratch{f32(Use::Attention, H * T_)};  // D = dout . out
      if (d == 128) {
        if (R > 0 && E > 0) {
          scratch.push_back(f32(Use::Attention, T_ * H * E));  // rb
          scratch.push_back(f32(Use::Attention, T_ * H * E));  // drb
        }
        if (c_.log_scaling && !c_.is_local(l)) scratch.push_back(f32(Use::Attention, T_));
        const int64_t t_pad = (T_ + kAttentionTcRows - 1) / kAttentionTcRows * kAttentionTcRows;
        scratch.push_back(f32(Use::Attention, H * t_pad * d));  // dq_acc
        // A global layer's Hopper backward with too few CTAs per kv head: dK and dV partials per query head.
        if (!c_.is_local(l) && attention_head_split::per_query_head(H, G))
          scratch.push_back(f32(Use::Attention, attention_head_split::partial_bytes(T_, H, d) / 4));
      }
      for (Id id : scratch) mem_.free(id);
    }
    mem_.free(dtable);
  }
  const Id dq = activation(Use::Temporary, T_, H * d), dk1 = activation(Use::Temporary, T_, G * d);
  mem_.free(grad_scratch(p + "q_norm.weight", d));
  mem_.free(grad_scratch(p + "k_norm.weight", d));
  const Id dk0 = activation(Use::Temporary, T_, G * d), dv0 = activation(Use::Temporary, T_, G * d);
  mem_.free(grad_scratch(p + "k_sconv.weight", G * d * K));
  mem_.free(grad_scratch(p + "v_sconv.weight", G * d * K));
  // The four projections' gradients side by side for their stacked GEMMs (model/attention_block.h).
  const Id d_TZ =
      projections_stacked(l) ? activation(Use::Temporary, T_, H * d + 2 * G * d + H * R) : MemoryTrace::kNone;
  const Id dx = activation(Use::Temporary, T_, D_);
  // --tp-comm-overlap: the reduce-scatter (its result) started before the weight gradients.
  const Id started = overlap() ? reduce_rows(Use::Temporary) : MemoryTrace::kNone;
  mem_.free(x_region);  // the gather's wait
  mem_.free(grad_scratch(p + "wq_du.weight", H * d * D_));
  mem_.free(grad_scratch(p + "wk_dv.weight", G * d * D_));
  mem_.free(grad_scratch(p + "wv_dv.weight", G * d * D_));
  mem_.free(grad_scratch(p + "wr_du.weight", H * R * D_));
  const Id reduced = overlap() ? started : reduce_rows(Use::Temporary);  // gather_input_backward
  for (Id id : {dout, do_TX, x_again, dqn, dkn, dv1, dr, dq, dk1, dk0, dv0, d_TZ}) mem_.free(id);
  if (reduced == MemoryTrace::kNone) return dx;
  mem_.free(dx);
  return reduced;
}

// --- DenseMlp -----------------------------------------------------------------------------------

StageTrace::Id StageTrace::dense_forward(int64_t, Layer& s) {
  const int64_t F = c_.dense_intermediate_size / tp_;
  const Id x = gather_input(Use::Saved);
  if (x != MemoryTrace::kNone && !norms_again()) s.saved.push_back(x);
  s.saved.push_back(activation(Use::Saved, T_, 2 * F));  // h
  s.saved.push_back(activation(Use::Saved, T_, F));      // a
  const Id partial = activation(Use::Saved, T_, D_);     // w2's output, reduced: o
  const Id o = reduce_rows(Use::Saved);
  if (o == MemoryTrace::kNone) {
    s.saved.push_back(partial);
  } else {
    s.saved.push_back(o);
    mem_.free(partial);
  }
  const Id y = activation(Use::Temporary, Tseq_, D_);  // y = o * global_scale: the layer's mlp_out
  if (norms_again()) mem_.free(x);  // dropped by the layer after the forward
  return y;
}

StageTrace::Id StageTrace::dense_backward(int64_t l) {
  const std::string p = layer_prefix(l) + "mlp.";
  const int64_t F = c_.dense_intermediate_size / tp_;
  const Id do_region = activation(Use::Temporary, Tseq_, D_);
  mem_.free(grad_scratch(p + "global_scale", 1));
  const Id do_all = gather_input(Use::Gather);  // reduce_output_backward
  // Selective layernorm recompute under the overlap: the input gathered again, started here.
  const Id x_again = norms_again() && overlap() && sp_ ? gather_input(Use::Temporary) : MemoryTrace::kNone;
  const Id da = activation(Use::Temporary, T_, F);
  mem_.free(grad_scratch(p + "w2_md.weight", D_ * F));
  const Id dh = activation(Use::Temporary, T_, 2 * F);
  Id dx = MemoryTrace::kNone, reduced = MemoryTrace::kNone;
  if (overlap()) {  // the input gradient, its reduce-scatter started, then W13's weight gradient
    dx = activation(Use::Temporary, T_, D_);
    reduced = reduce_rows(Use::Temporary);
    mem_.free(grad_scratch(p + "w13_dn.weight", 2 * F * D_));
  } else {
    mem_.free(grad_scratch(p + "w13_dn.weight", 2 * F * D_));
    dx = activation(Use::Temporary, T_, D_);
    reduced = reduce_rows(Use::Temporary);  // gather_input_backward
  }
  for (Id id : {do_region, do_all, da, dh, x_again}) mem_.free(id);
  if (reduced == MemoryTrace::kNone) return dx;
  mem_.free(dx);
  return reduced;
}

// --- MoeBlock -----------------------------------------------------------------------------------
// The routed experts work on the rank's chunk of Tc = T/tp positions (with and without SP); each sends
// P = Tc * top_k rows. With expert parallelism (modelled, not built) it receives, balanced, as many
// (times expert_rows_factor), and at worst every token of every expert-parallel rank for
// min(top_k, local experts) of its experts. The shared experts run on all T positions.

StageTrace::Id StageTrace::moe_forward(int64_t, Layer& s) {
  const int64_t E = c_.n_routed_experts, S = c_.n_shared_experts, k = c_.num_experts_per_tok;
  const int64_t Fe = c_.moe_intermediate_size / shape_.etp, Fs = c_.moe_intermediate_size / tp_;
  const int64_t Tc = T_ / tp_, P = Tc * k;
  const int ep = shape_.ep;
  const int64_t R = ep == 1 ? P : static_cast<int64_t>(std::ceil(static_cast<double>(P) * shape_.expert_rows_factor));
  const int64_t R_worst = ep * Tc * std::min(k, E / ep);
  // --tp-comm-overlap: the shared experts' input gathered first, beside the router.
  const Id xs_early = S > 0 && overlap() ? gather_input(Use::Saved) : MemoryTrace::kNone;
  if (xs_early != MemoryTrace::kNone && !norms_again()) s.saved.push_back(xs_early);
  const Id logits = f32(Use::Saved, Tc * (E + S));
  router_gate_workspace(Tc, router_gate::Op::kForward);
  s.saved.push_back(logits);
  s.saved.push_back(i32(Use::Saved, Tc * k));         // topk
  s.saved.push_back(f32(Use::Saved, Tc * (k + S)));   // weights
  s.saved.push_back(f32(Use::Saved, Tc * k));         // wr
  s.saved.push_back(i32(Use::Saved, P));              // slot_rows (the counts are a host tensor)
  const Id xp = activation(ep == 1 ? Use::Saved : Use::Dispatch, P, D_);
  if (ep == 1) {
    s.saved.push_back(xp);
    s.expert_x = xp;
  } else {  // dispatch_tokens: the all-to-all's receive buffer, then the rows regrouped by local expert
    const Id recv = activation(Use::Dispatch, R_worst, D_);
    s.expert_x = activation(Use::Saved, R, D_);
    s.saved.push_back(s.expert_x);
    mem_.free(recv);
    mem_.free(xp);
  }
  s.saved.push_back(activation(Use::Saved, R, 2 * Fe));  // hp
  const Id ap = activation(Use::Saved, R, Fe);
  s.expert_a = moe_act_again() ? MemoryTrace::kNone : ap;
  if (!moe_act_again()) s.saved.push_back(ap);
  if (ep == 1) {
    s.saved.push_back(activation(Use::Saved, P, D_));    // yp
    if (moe_act_again()) mem_.free(ap);
  } else {  // combine_tokens: the experts' output rows (a worst-case buffer) back to their senders
    const Id ye = activation(Use::Dispatch, R_worst, D_);
    if (moe_act_again()) mem_.free(ap);
    s.saved.push_back(activation(Use::Saved, P, D_));
    mem_.free(ye);
  }
  const Id y = activation(Use::Temporary, Tc, D_);
  // region_of_chunk: without SP the chunks are gathered into all T rows.
  const Id y_region = tp_ > 1 && !sp_ ? activation(Use::Temporary, T_, D_) : MemoryTrace::kNone;
  const Id out = y_region != MemoryTrace::kNone ? y_region : y;
  if (S == 0) {
    if (y_region != MemoryTrace::kNone) mem_.free(y);
    return out;
  }
  const Id xs = overlap() ? xs_early : gather_input(Use::Saved);  // the shared experts' input, all T rows
  if (xs != MemoryTrace::kNone && !overlap() && !norms_again()) s.saved.push_back(xs);
  const Id gamma = f32(Use::Temporary, Tc * S);
  const Id gamma_all = tp_ > 1 ? f32(Use::Gather, T_ * S) : MemoryTrace::kNone;
  const Id ys = activation(Use::Temporary, T_, D_);
  const Id ye = S > 1 ? activation(Use::Temporary, T_, D_) : MemoryTrace::kNone;
  std::vector<Id> scaled;  // --recompute-modules moe_act: each a * gamma until the down projections
  for (int64_t e = 0; e < S; ++e) {
    s.saved.push_back(activation(Use::Saved, T_, 2 * Fs));  // h
    const Id a = activation(Use::Saved, T_, Fs);
    s.saved.push_back(f32(Use::Saved, T_));                 // gamma
    const Id asc = activation(Use::Saved, T_, Fs);          // a * gamma
    if (moe_act_again()) {
      mem_.free(a);
      scaled.push_back(asc);
    } else {
      s.saved.push_back(a);
      s.saved.push_back(asc);
    }
  }
  for (Id id : scaled) mem_.free(id);
  mem_.free(reduce_rows(Use::Gather));  // reduce_output of the shared experts' partial sums
  for (Id id : {gamma, gamma_all, ys, ye}) mem_.free(id);
  if (y_region != MemoryTrace::kNone) mem_.free(y);
  if (norms_again()) mem_.free(xs);  // dropped with the block's input after the forward
  return out;
}

StageTrace::Id StageTrace::moe_backward(int64_t l, Layer& s, ExpertWgradTurn turn) {
  const std::string p = layer_prefix(l) + "mlp.";
  const int64_t E = c_.n_routed_experts, S = c_.n_shared_experts, k = c_.num_experts_per_tok;
  const int64_t Fe = c_.moe_intermediate_size / shape_.etp, Fs = c_.moe_intermediate_size / tp_;
  const int64_t Tc = T_ / tp_, P = Tc * k;
  const int ep = shape_.ep;
  const int64_t El = E / ep;
  const int64_t R = ep == 1 ? P : static_cast<int64_t>(std::ceil(static_cast<double>(P) * shape_.expert_rows_factor));
  const int64_t R_worst = ep * Tc * std::min(k, El);
  std::vector<Id> locals;
  // --tp-comm-overlap: the shared experts' output gradient gathered first, beside the routed path.
  const Id dys_early = S > 0 && overlap() ? gather_input(Use::Gather) : MemoryTrace::kNone;
  // Selective layernorm recompute under the overlap: the shared experts' input gathered again beside the routed path.
  const Id xs_again = S > 0 && overlap() && sp_ && norms_again() ? gather_input(Use::Temporary) : MemoryTrace::kNone;
  const Id dx = activation(Use::Temporary, Tc, D_);
  locals.push_back(f32(Use::Temporary, Tc * (k + S)));  // dweights
  Id dyr = activation(Use::Temporary, P, D_);           // dyp (the experts' output gradient at one rank)
  locals.push_back(dyr);
  locals.push_back(f32(Use::Temporary, Tc * k));        // dwr
  if (ep > 1) {  // the output gradient rows to the experts (dispatch_tokens, worst-case receive buffer)
    const Id recv = activation(Use::Dispatch, R_worst, D_);
    dyr = activation(Use::Temporary, R, D_);
    locals.push_back(dyr);
    mem_.free(recv);
  }
  Id ap = s.expert_a;
  if (moe_act_again()) {  // ap again
    ap = activation(Use::Temporary, R, Fe);
    locals.push_back(ap);
  }
  locals.push_back(activation(Use::Temporary, R, Fe));  // dap
  mem_.free(grad_scratch(p + "experts.w2_weight", El * D_ * Fe));
  const Id dhp = activation(Use::Temporary, R, 2 * Fe);
  locals.push_back(dhp);
  mem_.free(grad_scratch(p + "experts.w13_weight", El * 2 * Fe * D_));
  locals.push_back(activation(Use::Temporary, R, D_));  // dxp
  // The late weight gradients (model/expert_wgrad_pairs.h): a held micro-batch's rows outlive the block (out of
  // locals and the layer's saved list, into held_); a merge allocates beside the return exchange's buffer when
  // they run beside it.
  auto late_weight_grads = [&] {
    if (turn == ExpertWgradTurn::Hold) {
      for (Id id : {dyr, ap, dhp}) std::erase(locals, id);
      for (Id id : {s.expert_x, s.expert_a})
        if (id != MemoryTrace::kNone) std::erase(s.saved, id);
    }
    expert_weight_grads(l, turn, {dyr, ap, dhp, s.expert_x}, R);
  };
  const bool beside = ep > 1 && shape_.wgrad_beside_return_exchange;
  if (!beside) late_weight_grads();
  if (ep > 1) {  // back to the senders (combine_tokens)
    const Id recv = activation(Use::Dispatch, R_worst, D_);
    if (beside) late_weight_grads();
    locals.push_back(activation(Use::Temporary, P, D_));
    mem_.free(recv);
  }
  if (S > 0) {  // shared experts, over all T positions
    const Id dys = overlap() ? dys_early : gather_input(Use::Gather);  // reduce_output_backward
    const Id dxs = activation(Use::Temporary, T_, D_), dgamma = f32(Use::Temporary, T_ * S);
    // Each slice of sw13 / sw2 takes its parameter's gradient tensor for the whole loop.
    const Id g13 = grad_scratch(p + "shared_experts.shared_w13_weight", S * 2 * Fs * D_);
    const Id g2 = grad_scratch(p + "shared_experts.shared_w2_weight", S * D_ * Fs);
    std::vector<Id> dh_kept;  // --tp-comm-overlap: each dh until the weight gradients after the loop
    for (int64_t e = 0; e < S; ++e) {
      const Id dasc = activation(Use::Temporary, T_, Fs), da = activation(Use::Temporary, T_, Fs);
      const Id dg = f32(Use::Temporary, T_), dh = activation(Use::Temporary, T_, 2 * Fs);
      Id a = MemoryTrace::kNone, asc = MemoryTrace::kNone;  // --recompute-modules moe_act: made again
      if (moe_act_again()) {
        a = activation(Use::Temporary, T_, Fs);
        asc = activation(Use::Temporary, T_, Fs);
      }
      for (Id id : {dasc, da, dg, a}) mem_.free(id);
      if (overlap()) {
        dh_kept.push_back(dh);
        dh_kept.push_back(asc);
      } else {
        mem_.free(dh);
        mem_.free(asc);
      }
    }
    if (tp_ > 1) mem_.spike(Use::Gather, Tc * S * 4);  // reduce_scatter_chunks of the gammas' gradients
    const Id dxs_region = reduce_rows(Use::Temporary);  // gather_input_backward (in place without SP)
    locals.push_back(dxs_region != MemoryTrace::kNone ? dxs_region : dxs);
    for (Id id : dh_kept) mem_.free(id);
    // Under the overlap the started reduce-scatter reads dxs until the block's end.
    if (dxs_region != MemoryTrace::kNone) {
      if (overlap()) locals.push_back(dxs);
      else mem_.free(dxs);
    }
    for (Id id : {dys, dgamma, g13, g2, xs_again}) mem_.free(id);
  }
  // Router.
  locals.push_back(f32(Use::Temporary, Tc * (E + S)));  // dlogits
  mem_.free(grad_scratch(p + "gate.global_scale", 1));
  const Id gate_grad = grad_scratch(p + "gate.weight", (E + S) * D_);
  router_gate_workspace(Tc, router_gate::Op::kBackwardWeight);
  mem_.free(gate_grad);
  locals.push_back(activation(Use::Temporary, Tc, D_));  // dxr
  router_gate_workspace(Tc, router_gate::Op::kBackwardInput);
  // chunk_of_region_backward: without SP the chunks' gradients are gathered into all T rows.
  const Id dx_region = tp_ > 1 && !sp_ ? activation(Use::Temporary, T_, D_) : MemoryTrace::kNone;
  for (Id id : locals) mem_.free(id);
  if (dx_region == MemoryTrace::kNone) return dx;
  mem_.free(dx);
  return dx_region;
}

void StageTrace::expert_weight_grads(int64_t l, ExpertWgradTurn turn, const std::vector<Id>& own, int64_t R) {
  const size_t i = static_cast<size_t>(l - first_);
  if (turn == ExpertWgradTurn::Hold) {
    held_[i] = own;
    held_rows_[i] = R;
    return;
  }
  if (turn != ExpertWgradTurn::WriteWithHeld) return;  // this micro-batch's own rows: no allocation
  const int64_t N = held_rows_[i] + R, Fe = c_.moe_intermediate_size / shape_.etp;
  // HeldExpertRows::write_with, W2's GEMM then W13's, each over both micro-batches' rows: merged first
  // (ops_detail::merged_backward_weight_pair, or write_pair_weight_grad for FP8): the merged order's index (on the
  // device; a host tensor on the CPU) and the matrix's two merged tensors, freed after its GEMM; then the held rows
  // released. Where the GPU's kernel reads both in place (--grouped-wgrad-kernel wgmma, or auto at its row counts)
  // nothing is merged: the plan counts the merge all the same (up to ~0.4 GB high on a seed rank's stage).
  for (const auto& [dy_width, x_width] : {std::pair{D_, Fe}, std::pair{2 * Fe, D_}}) {
    const Id index = cuda() ? i32(Use::Temporary, N) : MemoryTrace::kNone;
    const Id dy = activation(Use::Temporary, N, dy_width), x = activation(Use::Temporary, N, x_width);
    for (Id id : {index, dy, x}) mem_.free(id);
  }
  for (Id id : held_[i]) mem_.free(id);
  held_[i].clear();
  held_rows_[i] = 0;
}

}  // namespace quill::plan
