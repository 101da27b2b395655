#include "model/params.h"

#include <fmt/format.h>

#include <algorithm>

#include "base/error.h"
#include "base/host_memory.h"
#include "base/rng.h"
#include "base/thread_pool.h"

namespace quill {

namespace {

// The model's tensors in table order, each with its split rule (Megatron's scheme adapted to
// Inkling): attention q/k/v, the relative-bias projection and the K/V short convolutions
// column-parallel by heads; the output projection and the MLPs' down projections row-parallel; the
// gate/up projections column-parallel in matching halves; the embedding and unembedding
// vocab-parallel; routed experts by expert; norms, the router, the relative-bias tables and the
// residual short convolutions whole on every tensor-parallel rank. `layer` is the decoder layer a
// tensor belongs to (the embedding: 0, the head: the last), which decides its pipeline stage.
struct DeclBuilder {
  std::vector<ParamDecl>& out;
  int64_t layer = 0;
  ParamDecl& add(const std::string& name, const Shape& shape, DType dtype = DType::BF16) {
    ParamDecl d;
    d.name = name;
    d.shape = shape;
    d.checkpoint_dtype = dtype;
    d.layer = layer;
    out.push_back(d);
    return out.back();
  }
  // Split on `dim` by tensor parallelism, in whole units of `unit` rows.
  ParamDecl& split(const std::string& name, const Shape& shape, int dim, int64_t unit = 1) {
    ParamDecl& d = add(name, shape);
    d.rule.tp_dim = dim;
    d.rule.unit = unit;
    return d;
  }
  // Replicated, acting on the sequence region (parallel/shard_spec.h: ShardRule::sequence_region).
  ParamDecl& sequence(const std::string& name, const Shape& shape, DType dtype = DType::BF16) {
    ParamDecl& d = add(name, shape, dtype);
    d.rule.sequence_region = true;
    return d;
  }
  ParamDecl& gate_up(const std::string& name, const Shape& shape, int dim) {
    ParamDecl& d = split(name, shape, dim);
    d.rule.gate_up = true;
    d.gate_up_interleaved = true;
    return d;
  }
};

}  // namespace

std::vector<ParamDecl> param_decls(const InklingConfig& c) {
  validate_config(c);
  std::vector<ParamDecl> decls;
  DeclBuilder b{decls};
  const int64_t D = c.hidden_size, K = c.conv_kernel_size;
  b.split("model.llm.embed.weight", {c.vocab_size, D}, 0);
  b.sequence("model.llm.embed_norm.weight", {D});
  for (int64_t i = 0; i < c.num_layers; ++i) {
    b.layer = i;
    const std::string p = fmt::format("model.llm.layers.{}.", i);
    const int64_t H = c.heads(i), G = c.kv_heads(i), hd = c.layer_head_dim(i);
    b.sequence(p + "attn_norm.weight", {D});
    b.split(p + "attn.wq_du.weight", {H * hd, D}, 0, hd);
    b.split(p + "attn.wk_dv.weight", {G * hd, D}, 0, hd);
    b.split(p + "attn.wv_dv.weight", {G * hd, D}, 0, hd);
    b.split(p + "attn.wr_du.weight", {H * c.d_rel, D}, 0, c.d_rel);
    b.split(p + "attn.wo_ud.weight", {D, H * hd}, 1, hd);
    b.add(p + "attn.q_norm.weight", {hd});
    b.add(p + "attn.k_norm.weight", {hd});
    b.add(p + "attn.rel_logits_proj.proj", {c.d_rel, c.extent(i)});
    b.split(p + "attn.k_sconv.weight", {G * hd, 1, K}, 0, hd);
    b.split(p + "attn.v_sconv.weight", {G * hd, 1, K}, 0, hd);
    b.sequence(p + "attn_sconv.weight", {D, 1, K});
    b.sequence(p + "mlp_norm.weight", {D});
    if (c.is_moe(i)) {
      const int64_t E = c.n_routed_experts, S = c.n_shared_experts, F = c.moe_intermediate_size;
      b.add(p + "mlp.gate.weight", {E + S, D});
      // The release stores the router bias and global scale in fp32 (docs/model.md §2 byte count).
      b.add(p + "mlp.gate.bias", {E}, DType::F32).is_buffer = true;
      b.add(p + "mlp.gate.global_scale", {1}, DType::F32);
      ParamDecl& w13 = b.gate_up(p + "mlp.experts.w13_weight", {E, 2 * F, D}, 1);
      w13.rule.experts = w13.routed_expert = true;
      ParamDecl& w2 = b.split(p + "mlp.experts.w2_weight", {E, D, F}, 2);
      w2.rule.experts = w2.routed_expert = true;
      b.gate_up(p + "mlp.shared_experts.shared_w13_weight", {S, 2 * F, D}, 1);
      b.split(p + "mlp.shared_experts.shared_w2_weight", {S, D, F}, 2);
    } else {
      const int64_t F = c.dense_intermediate_size;
      b.gate_up(p + "mlp.w13_dn.weight", {2 * F, D}, 0);
      b.split(p + "mlp.w2_md.weight", {D, F}, 1);
      b.sequence(p + "mlp.global_scale", {1});
    }
    b.sequence(p + "mlp_sconv.weight", {D, 1, K});
  }
  b.sequence("model.llm.norm.weight", {D});
  b.split("model.llm.unembed.weight", {c.vocab_size, D}, 0);
  return decls;
}

void check_model_split(const InklingConfig& config, const LayoutSpec& spec) {
  // The divisibility of a split does not depend on the rank: rank 0's coordinates check them all.
  for (const ParamDecl& d : param_decls(config)) make_shard_spec(d.name, d.shape, d.rule, spec, GridCoords{});
}

ParamTable ParamTable::for_config(const InklingConfig& c) {
  const Layout single = Layout::single(c.num_layers);
  return for_config(c, single);
}

ParamTable ParamTable::for_config(const InklingConfig& c, const Layout& layout) {
  // A config of absurd dimensions stops here, naming its file and field, not in the allocator. (A
  // rank's share of a large layout is checked by its memory plan instead.)
  if (const uint64_t memory = host_memory_bytes(); memory > 0 && layout.single()) check_params_fit_memory(c, memory);
  ParamTable table;
  for (ParamDecl& d : param_decls(c)) {
    int stage = 0;
    for (int64_t end = 0; stage < layout.spec().pp; ++stage) {
      end += layout.stage_layers()[static_cast<size_t>(stage)];
      if (d.layer < end) break;
    }
    if (stage != layout.coords().pp) continue;  // another stage's tensor
    d.rule.stage = stage;
    Param p;
    p.shard = make_shard_spec(d.name, d.shape, d.rule, layout.spec(), layout.coords());
    p.name = d.name;
    p.shape = p.shard.local_shape;
    p.checkpoint_dtype = d.checkpoint_dtype;
    p.is_buffer = d.is_buffer;
    p.trainable = !d.is_buffer;
    p.weight_decay = d.shape.size() >= 2;  // Megatron: no decay on 1-D parameters (norms, scales, biases)
    p.gate_up_interleaved = d.gate_up_interleaved;
    p.routed_expert = d.routed_expert;
    p.layer = d.layer;
    p.value = Tensor::zeros(p.shape, DType::F32);
    p.compute = p.value;
    if (p.trainable) p.grad = Tensor::zeros(p.shape, DType::F32);
    table.params_.push_back(std::move(p));
  }
  return table;
}

Param* ParamTable::find(const std::string& name) {
  for (Param& p : params_)
    if (p.name == name) return &p;
  return nullptr;
}

Tensor ParamBucket::master_range(int64_t local, int64_t n) const {
  QUILL_CHECK(local >= 0 && n >= 0 && local + n <= shard_end - shard_begin,
              "bucket master: elements [{}, {}) are outside the shard of {}", local, local + n, shard_end - shard_begin);
  if (offload_end > 0 && local + n <= offload_end) return host_master.view_flat(local, {n});
  QUILL_CHECK(local >= offload_end, "bucket master: elements [{}, {}) straddle the offload boundary {}", local,
              local + n, offload_end);
  return master.view_flat(local - offload_end, {n});
}

Param& ParamTable::at(const std::string& name) {
  Param* p = find(name);
  QUILL_CHECK(p != nullptr, "parameter {} is not in the model", name);
  return *p;
}

const Param& ParamTable::at(const std::string& name) const { return const_cast<ParamTable*>(this)->at(name); }

bool name_matches(const std::string& name, const std::string& pattern) {
  // Glob with '*' only: classic two-pointer match with backtracking to the last star.
  size_t n = 0, p = 0, star = std::string::npos, mark = 0;
  while (n < name.size()) {
    if (p < pattern.size() && pattern[p] == name[n]) {
      ++n;
      ++p;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = n;
    } else if (star != std::string::npos) {
      p = star + 1;
      n = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

void ParamTable::freeze(const std::vector<std::string>& patterns) {
  QUILL_CHECK(!placed_, "freeze: parameters are already placed; freeze before placing them");
  for (Param& p : params_) {
    for (const std::string& pat : patterns) {
      if (name_matches(p.name, pat)) {
        p.trainable = false;
        p.grad = Tensor();
        break;
      }
    }
  }
}

std::vector<std::string> miles_frozen_patterns() {
  return {"*.rel_logits_proj.proj", "*global_scale"};
}

namespace {
// out[j] = std * normal_at(key, first + j) for j in [0, n), drawn a Box-Muller pair at a time where
// both of a pair's indexes are in the range (the same bits as one at a time).
void fill_normal(uint64_t key, double std, uint64_t first, int64_t n, float* out) {
  const auto scaled = [std](float z) { return static_cast<float>(std * z); };
  int64_t j = 0;
  if (n > 0 && first % 2 == 1) out[j++] = scaled(normal_at(key, first));
  for (; j + 1 < n; j += 2) {
    float even = 0, odd = 0;
    normal_pair_at(key, (first + j) / 2, even, odd);
    out[j] = scaled(even);
    out[j + 1] = scaled(odd);
  }
  if (j < n) out[j] = scaled(normal_at(key, first + j));
}
}  // namespace

void ParamTable::init_random(uint64_t seed, double std, int64_t piece_elements) {
  // Each value is drawn by its global element index alone, so that every layout draws the same
  // values, and any split of the work gives the same bits. The work is cut into pieces of about
  // kPiece elements over all of a tensor's slice runs: a tensor split along its last dimension
  // (tensor parallelism's row-parallel weights) is a run per row, thousands of runs of D/tp
  // elements, which filled run by run stayed on one thread.
  QUILL_CHECK(piece_elements > 0, "init_random: piece_elements must be positive, got {}", piece_elements);
  const int64_t kPiece = piece_elements;
  struct Piece {
    size_t run_begin, run_end;  // runs [run_begin, run_end) ...
    int64_t skip, take;         // ... from element `skip` of the first, `take` elements in all
  };
  ThreadPool pool(hardware_threads());
  for (Param& p : params_) {
    float* v = p.value.data_as<float>();
    const int64_t n = p.value.numel();
    const bool is_norm = p.name.ends_with("norm.weight");
    const bool is_scale = p.name.ends_with("global_scale");
    if (is_norm || is_scale) {
      std::fill(v, v + n, 1.0f);
      continue;
    }
    if (p.is_buffer) {
      std::fill(v, v + n, 0.0f);
      continue;
    }
    const uint64_t key = stream_key(seed, p.name.c_str());
    const std::vector<SliceRun> runs = slice_runs(p.shard);
    std::vector<Piece> pieces;
    Piece cur{0, 0, 0, 0};
    for (size_t r = 0; r < runs.size(); ++r) {
      for (int64_t at = 0; at < runs[r].length;) {
        if (cur.take == 0) cur = Piece{r, r, at, 0};
        const int64_t take = std::min(runs[r].length - at, kPiece - cur.take);
        cur.take += take;
        cur.run_end = r + 1;
        at += take;
        if (cur.take == kPiece) {
          pieces.push_back(cur);
          cur.take = 0;
        }
      }
    }
    if (cur.take > 0) pieces.push_back(cur);
    const auto fill = [&](size_t i) {
      const Piece& piece = pieces[i];
      int64_t left = piece.take, at = piece.skip;
      for (size_t r = piece.run_begin; r < piece.run_end && left > 0; ++r, at = 0) {
        const SliceRun& run = runs[r];
        const int64_t m = std::min(run.length - at, left);
        fill_normal(key, std, static_cast<uint64_t>(run.global_offset + at), m, v + run.local_offset + at);
        left -= m;
      }
    };
    if (pieces.size() == 1) fill(0);
    else pool.parallel_for(pieces.size(), fill);
  }
}

}  // namespace quill
