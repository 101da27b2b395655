// A StepProbe (train/train_options.h) around the run's own probe (or none) that also tells the
// collective ledger which training step the collectives it records belong to: the step from
// begin_step to end_step (its passes until passes_done, then its optimizer phase), -1 outside. The trainer's code stays as it is; only the probe it is
// given changes. For a simulated rank it also hands the loopback's span time (comm/loopback_comm.h) to the
// ledger at each of those points, so that each step's passes and optimizer phase get their own.
#pragma once

#include <memory>
#include <string>

#include "comm/collective_ledger.h"
#include "comm/loopback_comm.h"
#include "train/train_options.h"

namespace quill::cli {

class CollectiveStepProbe final : public StepProbe {
 public:
  // `inner` may be null (then the context is `ctx` and no memory is measured); `loopback`: a simulated
  // rank's mover, else null.
  CollectiveStepProbe(std::unique_ptr<StepProbe> inner, const DeviceContext& ctx, std::shared_ptr<CollectiveLedger> ledger,
                      std::shared_ptr<LoopbackMover> loopback)
      : inner_(std::move(inner)),
        ctx_(inner_ ? inner_->context() : ctx),
        ledger_(std::move(ledger)),
        loopback_(std::move(loopback)) {}

  DeviceContext context() const override { return ctx_; }
  void begin_step(int64_t step, bool profile_ops) override {
    if (inner_) inner_->begin_step(step, profile_ops);
    take_loopback_time();
    ledger_->set_step(step);
  }
  void passes_done(int64_t step) override {
    if (inner_) inner_->passes_done(step);
    take_loopback_time();
    ledger_->set_optimizer_phase();
  }
  StepMemory end_step(int64_t step, bool profile_ops, const std::string& out_dir) override {
    take_loopback_time();
    ledger_->set_step(-1);
    return inner_ ? inner_->end_step(step, profile_ops, out_dir) : StepMemory{};
  }
  void report(const std::string& out_dir, int rank, bool lead) override {
    if (inner_) inner_->report(out_dir, rank, lead);
  }

 private:
  void take_loopback_time() {
    if (loopback_) ledger_->add_loopback_seconds(loopback_->take_span_seconds());
  }

  std::unique_ptr<StepProbe> inner_;
  DeviceContext ctx_;
  std::shared_ptr<CollectiveLedger> ledger_;
  std::shared_ptr<LoopbackMover> loopback_;
};

}  // namespace quill::cli
