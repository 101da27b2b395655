// A StepProbe (train/train_options.h) around the run's own probe (or none) that also tells the
// collective ledger which training step the collectives it records belong to: the step from
// begin_step to end_step (its passes until passes_done, then its optimizer phase), -1 outside. The trainer's code stays as it is; only the probe it is
// given changes.
#pragma once

#include <memory>
#include <string>

#include "comm/collective_ledger.h"
#include "train/train_options.h"

namespace quill::cli {

class CollectiveStepProbe final : public StepProbe {
 public:
  // `inner` may be null (then the context is `ctx` and no memory is measured).
  CollectiveStepProbe(std::unique_ptr<StepProbe> inner, const DeviceContext& ctx, std::shared_ptr<CollectiveLedger> ledger)
      : inner_(std::move(inner)), ctx_(inner_ ? inner_->context() : ctx), ledger_(std::move(ledger)) {}

  DeviceContext context() const override { return ctx_; }
  void begin_step(int64_t step, bool profile_ops) override {
    if (inner_) inner_->begin_step(step, profile_ops);
    ledger_->set_step(step);
  }
  void passes_done(int64_t step) override {
    if (inner_) inner_->passes_done(step);
    ledger_->set_optimizer_phase();
  }
  StepMemory end_step(int64_t step, bool profile_ops, const std::string& out_dir) override {
    ledger_->set_step(-1);
    return inner_ ? inner_->end_step(step, profile_ops, out_dir) : StepMemory{};
  }
  void report(const std::string& out_dir, int rank, bool lead) override {
    if (inner_) inner_->report(out_dir, rank, lead);
  }

 private:
  std::unique_ptr<StepProbe> inner_;
  DeviceContext ctx_;
  std::shared_ptr<CollectiveLedger> ledger_;
};

}  // namespace quill::cli
