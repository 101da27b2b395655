#include "train/step_observers.h"

#include <fmt/format.h>

#include <utility>

#include "io/hf_checkpoint.h"
#include "io/safetensors.h"
#include "model/param_gather.h"
#include "ops/convert.h"
#include "train/trainer.h"

namespace quill {
namespace {

class ProbeObserver : public StepObserver {
 public:
  ProbeObserver(StepProbe& probe, int64_t profile_step, std::string out_dir, int rank, bool lead)
      : probe_(probe), profile_step_(profile_step), out_dir_(std::move(out_dir)), rank_(rank), lead_(lead) {}
  void step_begins(int64_t step) override { probe_.begin_step(step, step == profile_step_); }
  void passes_done(int64_t step) override { probe_.passes_done(step); }
  void step_ends(int64_t step, StepMetrics& m) override {
    m.memory = probe_.end_step(step, step == profile_step_, lead_ ? out_dir_ : std::string());
  }
  void step_timed(int64_t step) override {
    if (step == profile_step_) probe_.report(out_dir_, rank_, lead_);
  }

 private:
  StepProbe& probe_;
  int64_t profile_step_;
  std::string out_dir_;
  int rank_;
  bool lead_;
};

class StepMarkObserver : public StepObserver {
 public:
  explicit StepMarkObserver(StepMark& mark) : mark_(mark) {}
  void step_begins(int64_t step) override { mark_.begin(step); }
  void step_ends(int64_t step, StepMetrics&) override { mark_.end(step); }

 private:
  StepMark& mark_;
};

// Gradients before clipping, fp32, under checkpoint names and in checkpoint layout (gate/up rows
// interleaved), for tensor-by-tensor comparison with a reference implementation.
void dump_gradients(const std::string& path, const ParamTable& params, const DeviceContext& ctx) {
  std::vector<std::pair<std::string, Tensor>> grads;
  for (const Param& p : params.params()) {
    if (!p.trainable) continue;
    Tensor host = Tensor::empty(p.shape, DType::F32);
    ops::transfer(ctx, p.grad, host);
    grads.emplace_back(p.name, p.gate_up_interleaved ? interleave_gate_up(host) : host);
  }
  write_safetensors(path, grads);
}

class GradientDumpObserver : public StepObserver {
 public:
  GradientDumpObserver(int64_t step, std::string out_dir, const ParamTable& params, const DeviceContext& ctx,
                       const Layout& layout, const InklingConfig& config, bool lead)
      : step_(step), out_dir_(std::move(out_dir)), params_(params), ctx_(ctx), layout_(layout), config_(config),
        lead_(lead) {}
  void gradients_final(int64_t step) override {
    if (step != step_) return;
    const std::string path = out_dir_ + fmt::format("/grads_step{}.safetensors", step);
    if (layout_.world() == nullptr) {
      dump_gradients(path, params_, ctx_);
    } else {  // collective: every rank's summed slices onto rank 0, which writes them
      const ParamTable whole = gather_whole_grads(params_, ctx_, layout_, config_);
      if (lead_) dump_gradients(path, whole, DeviceContext::cpu());
    }
  }

 private:
  int64_t step_;
  std::string out_dir_;
  const ParamTable& params_;
  DeviceContext ctx_;
  const Layout& layout_;
  const InklingConfig& config_;
  bool lead_;
};

}  // namespace

std::unique_ptr<StepObserver> probe_observer(StepProbe& probe, int64_t profile_step, const std::string& out_dir,
                                             int rank, bool lead) {
  return std::make_unique<ProbeObserver>(probe, profile_step, out_dir, rank, lead);
}

std::unique_ptr<StepObserver> step_mark_observer(StepMark& mark) { return std::make_unique<StepMarkObserver>(mark); }

std::unique_ptr<StepObserver> gradient_dump_observer(int64_t step, const std::string& out_dir, const ParamTable& params,
                                                     const DeviceContext& ctx, const Layout& layout,
                                                     const InklingConfig& config, bool lead) {
  return std::make_unique<GradientDumpObserver>(step, out_dir, params, ctx, layout, config, lead);
}

}  // namespace quill
