#include "model/fp8_params.h"

#include <array>

#include "base/error.h"
#include "ops/columns.h"
#include "ops/elementwise.h"

namespace quill {
namespace {

// The names' endings, after "model.llm.layers.{i}." (docs/model.md lists every tensor).
constexpr std::array<const char*, 11> kFp8Suffixes = {
    ".attn.wq_du.weight",  ".attn.wk_dv.weight", ".attn.wv_dv.weight", ".attn.wr_du.weight",
    ".attn.wo_ud.weight",  ".mlp.w13_dn.weight", ".mlp.w2_md.weight",
    ".mlp.shared_experts.shared_w13_weight",      ".mlp.shared_experts.shared_w2_weight",
    ".mlp.experts.w13_weight",                    ".mlp.experts.w2_weight",
};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

bool runs_in_fp8(const std::string& name) {
  if (name.rfind("model.llm.layers.", 0) != 0) return false;
  for (const char* suffix : kFp8Suffixes)
    if (ends_with(name, suffix)) return true;
  return false;
}

void mark_fp8_params(ParamTable& params, Device device, bool fp8_wgrad) {
  for (Param& p : params.params()) {
    p.fp8 = runs_in_fp8(p.name);
    p.fp8_wgrad = p.fp8 && fp8_wgrad;
    if (!p.fp8 || device != Device::CUDA) continue;
    const int64_t n = static_cast<int64_t>(p.shape.size());
    QUILL_CHECK(n >= 2 && p.shape[n - 1] % 16 == 0 && p.shape[n - 2] % 16 == 0,
                "--fp8-format e4m3 on CUDA: {} has shape {} on this rank; the FP8 GEMMs need both matrix dimensions "
                "multiples of 16 (cuBLASLt's FP8 leading-dimension rule); train this model without FP8 or on the CPU",
                p.name, shape_str(p.shape));
  }
}

const ops::Fp8Tensor& fp8_weight(const DeviceContext& ctx, const Param& p) {
  QUILL_CHECK(p.fp8, "{}: not an FP8 matrix", p.name);
  if (p.fp8_copy.defined() && p.fp8_version == p.compute_version) return p.fp8_copy;
  QUILL_CHECK(p.compute.defined(),
              "{}: its FP8 copy is older than its weights and its bf16 copy is not held (model/transient_compute.h), "
              "or it is not placed", p.name);
  if (!p.fp8_copy.defined()) p.fp8_copy = ops::fp8_empty(ctx, p.compute.shape(), ops::Fp8Tiling::kBlocks128);
  ops::fp8_quantize(ctx, p.compute, p.fp8_copy);
  p.fp8_version = p.compute_version;
  return p.fp8_copy;
}

bool StackedFp8Copy::rows_stack(const std::vector<int64_t>& rows) {
  if (rows.empty()) return false;
  for (int64_t m : rows)
    if (m % 128 != 0) return false;
  return true;
}

bool StackedFp8Copy::stacks(const std::vector<const Param*>& parts) {
  std::vector<int64_t> rows;
  for (const Param* p : parts) {
    if (!p->fp8 || p->shape.size() != 2 || p->shape[1] != parts[0]->shape[1]) return false;
    rows.push_back(p->shape[0]);
  }
  return rows_stack(rows);
}

const ops::Fp8Tensor& StackedFp8Copy::get(const DeviceContext& ctx, const std::vector<const Param*>& parts) {
  QUILL_CHECK(stacks(parts), "{}: the matrices do not stack as one FP8 copy", parts.empty() ? "" : parts[0]->name);
  std::vector<const ops::Fp8Tensor*> copies;
  std::vector<int64_t> versions;
  int64_t rows = 0;
  for (const Param* p : parts) {
    copies.push_back(&fp8_weight(ctx, *p));
    versions.push_back(p->fp8_version);
    rows += p->shape[0];
  }
  if (stack_.defined() && versions == versions_) return stack_;
  const int64_t K = parts[0]->shape[1];
  if (!stack_.defined()) stack_ = ops::fp8_empty(ctx, {rows, K}, ops::Fp8Tiling::kBlocks128);
  int64_t row = 0;
  for (const ops::Fp8Tensor* c : copies) {
    const int64_t m = c->codes.dim(0), mb = m / 128;
    ops::copy(ctx, c->codes, stack_.codes.rows(row, row + m));
    ops::copy(ctx, c->scale_inv, stack_.scale_inv.rows(row / 128, row / 128 + mb));
    if (stack_.codes_t.defined()) {  // CUDA: the transposes [K, M] side by side; the factors' padding left out
      ops::set_columns(ctx, stack_.codes_t, row, c->codes_t);
      const Tensor factors = Tensor::empty({c->scale_inv_t.dim(0), mb}, DType::F32, *ctx.allocator);
      ops::get_columns(ctx, c->scale_inv_t, 0, factors);
      ops::set_columns(ctx, stack_.scale_inv_t, row / 128, factors);
    }
    row += m;
  }
  versions_ = versions;
  return stack_;
}

}  // namespace quill
