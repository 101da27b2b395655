#include "model/params.h"

#include <fmt/format.h>

#include "base/error.h"
#include "base/host_memory.h"
#include "base/rng.h"

namespace quill {

namespace {

struct TableBuilder {
  std::vector<Param>& out;
  void add(const std::string& name, const Shape& shape, DType dtype = DType::BF16, bool interleaved = false,
           bool buffer = false) {
    Param p;
    p.name = name;
    p.shape = shape;
    p.checkpoint_dtype = dtype;
    p.is_buffer = buffer;
    p.trainable = !buffer;
    p.weight_decay = shape.size() >= 2;  // Megatron: no decay on 1-D parameters (norms, scales, biases)
    p.gate_up_interleaved = interleaved;
    p.value = Tensor::zeros(shape, DType::F32);
    p.compute = p.value;
    out.push_back(std::move(p));
  }
};

}  // namespace

ParamTable ParamTable::for_config(const InklingConfig& c) {
  validate_config(c);
  // A config of absurd dimensions stops here, naming its file and field, not in the allocator.
  if (const uint64_t memory = host_memory_bytes(); memory > 0) check_params_fit_memory(c, memory);
  ParamTable table;
  TableBuilder b{table.params_};
  const int64_t D = c.hidden_size, K = c.conv_kernel_size;
  b.add("model.llm.embed.weight", {c.vocab_size, D});
  b.add("model.llm.embed_norm.weight", {D});
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = fmt::format("model.llm.layers.{}.", i);
    const int64_t H = c.heads(i), G = c.kv_heads(i), hd = c.layer_head_dim(i);
    b.add(p + "attn_norm.weight", {D});
    b.add(p + "attn.wq_du.weight", {H * hd, D});
    b.add(p + "attn.wk_dv.weight", {G * hd, D});
    b.add(p + "attn.wv_dv.weight", {G * hd, D});
    b.add(p + "attn.wr_du.weight", {H * c.d_rel, D});
    b.add(p + "attn.wo_ud.weight", {D, H * hd});
    b.add(p + "attn.q_norm.weight", {hd});
    b.add(p + "attn.k_norm.weight", {hd});
    b.add(p + "attn.rel_logits_proj.proj", {c.d_rel, c.extent(i)});
    b.add(p + "attn.k_sconv.weight", {G * hd, 1, K});
    b.add(p + "attn.v_sconv.weight", {G * hd, 1, K});
    b.add(p + "attn_sconv.weight", {D, 1, K});
    b.add(p + "mlp_norm.weight", {D});
    if (c.is_moe(i)) {
      const int64_t E = c.n_routed_experts, S = c.n_shared_experts, F = c.moe_intermediate_size;
      b.add(p + "mlp.gate.weight", {E + S, D});
      // The release stores the router bias and global scale in fp32 (docs/model.md §2 byte count).
      b.add(p + "mlp.gate.bias", {E}, DType::F32, false, /*buffer=*/true);
      b.add(p + "mlp.gate.global_scale", {1}, DType::F32);
      b.add(p + "mlp.experts.w13_weight", {E, 2 * F, D}, DType::BF16, true);
      b.add(p + "mlp.experts.w2_weight", {E, D, F});
      b.add(p + "mlp.shared_experts.shared_w13_weight", {S, 2 * F, D}, DType::BF16, true);
      b.add(p + "mlp.shared_experts.shared_w2_weight", {S, D, F});
    } else {
      const int64_t F = c.dense_intermediate_size;
      b.add(p + "mlp.w13_dn.weight", {2 * F, D}, DType::BF16, true);
      b.add(p + "mlp.w2_md.weight", {D, F});
      b.add(p + "mlp.global_scale", {1});
    }
    b.add(p + "mlp_sconv.weight", {D, 1, K});
  }
  b.add("model.llm.norm.weight", {D});
  b.add("model.llm.unembed.weight", {c.vocab_size, D});
  for (Param& p : table.params_)
    if (p.trainable) p.grad = Tensor::zeros(p.shape, DType::F32);
  return table;
}

Param* ParamTable::find(const std::string& name) {
  for (Param& p : params_)
    if (p.name == name) return &p;
  return nullptr;
}

Param& ParamTable::at(const std::string& name) {
  Param* p = find(name);
  QUILL_CHECK(p != nullptr, "parameter {} is not in the model", name);
  return *p;
}

const Param& ParamTable::at(const std::string& name) const { return const_cast<ParamTable*>(this)->at(name); }

std::vector<int64_t> ParamTable::flat_offsets() const {
  std::vector<int64_t> offsets;
  int64_t at = 0;
  for (const Param& p : params_) {
    offsets.push_back(p.trainable ? at : -1);
    if (p.trainable) at += shape_numel(p.shape);
  }
  return offsets;
}

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
  QUILL_CHECK(!flat_grads_.defined(), "freeze: parameters are already placed; freeze before placing them");
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

void ParamTable::init_random(uint64_t seed, double std) {
  for (Param& p : params_) {
    float* v = p.value.data_as<float>();
    const int64_t n = p.value.numel();
    const bool is_norm = p.name.ends_with("norm.weight");
    const bool is_scale = p.name.ends_with("global_scale");
    if (is_norm || is_scale) {
      for (int64_t i = 0; i < n; ++i) v[i] = 1.0f;
    } else if (p.is_buffer) {
      for (int64_t i = 0; i < n; ++i) v[i] = 0.0f;
    } else {
      const uint64_t key = stream_key(seed, p.name.c_str());
      for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(std * normal_at(key, static_cast<uint64_t>(i)));
    }
  }
}

}  // namespace quill
