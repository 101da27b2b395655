#include "train/pipeline_executor.h"

#include "base/error.h"
#include "model/layer_util.h"
#include "ops/collective.h"
#include "ops/convert.h"

namespace quill {

PipelineStepResult run_pipeline_step(const StageModel& stage, const PipeSchedule& schedule, int s, Comm* pp,
                                     const std::vector<MicroBatch>& mbs, const DeviceContext& ctx, int64_t D,
                                     PassHooks* hooks) {
  const size_t M = mbs.size();
  QUILL_CHECK(static_cast<int>(M) == schedule.micro_batches, "pipeline: {} micro-batches, the schedule has {}", M,
              schedule.micro_batches);
  QUILL_CHECK(pp != nullptr || schedule.stages == 1, "pipeline: {} stages need a pipeline communicator", schedule.stages);
  std::vector<StageModel::Activations> acts(M);
  // Per micro-batch: this stage's output (to send), the received input, the received output
  // gradient, the input gradient (to send). Each is released as soon as it has been used.
  std::vector<Tensor> out(M), in(M), dout(M), din(M);
  auto message_tensor = [&](const PipeMessage& msg) -> Tensor& {
    const size_t m = static_cast<size_t>(msg.micro);
    if (msg.send) return msg.kind == PipePass::Forward ? out[m] : din[m];
    Tensor& t = msg.kind == PipePass::Forward ? in[m] : dout[m];
    t = new_activation(ctx, {stage.region_rows(mbs[m].T), D});  // the sequence region's rows
    return t;
  };
  PipelineStepResult result;
  const std::vector<PipeAction>& row = schedule.actions[static_cast<size_t>(s)];
  const size_t last_backward = last_backward_action(schedule, s);  // the hooks' backward
  // The backwards in the order this stage runs them: the k-th's turn for the routed weight gradients.
  int64_t backwards = 0, backwards_run = 0;
  for (const PipeAction& a : row) backwards += a.is_pass && a.step.pass == PipePass::Backward ? 1 : 0;
  for (size_t ai = 0; ai < row.size(); ++ai) {
    const PipeAction& a = row[ai];
    if (!a.is_pass) {
      const std::vector<PipeMessage>& msgs = a.exchange.messages;
      if (msgs.size() == 2) {  // a send and a receive with the same neighbour, at once
        const PipeMessage& snd = msgs[0].send ? msgs[0] : msgs[1];
        const PipeMessage& rcv = msgs[0].send ? msgs[1] : msgs[0];
        Tensor& st = message_tensor(snd);
        Tensor& rt = message_tensor(rcv);
        ops::collective(ctx, "pp.send_recv", st, [&] { pp->send_recv(st, snd.peer, rt, rcv.peer); });
        st = Tensor();
      } else if (msgs[0].send) {
        Tensor& st = message_tensor(msgs[0]);
        ops::collective(ctx, "pp.send", st, [&] { pp->send(st, msgs[0].peer); });
        st = Tensor();
      } else {
        Tensor& rt = message_tensor(msgs[0]);
        ops::collective(ctx, "pp.recv", rt, [&] { pp->recv(rt, msgs[0].peer); });
      }
      continue;
    }
    const size_t m = static_cast<size_t>(a.step.micro);
    auto backward = [&](size_t b, size_t at) {
      acts[b].expert_wgrad = stage.expert_wgrad_turn(backwards_run++, backwards);
      din[b] = stage.backward(acts[b], dout[b], at == last_backward ? hooks : nullptr);
      acts[b] = StageModel::Activations{};
      dout[b] = Tensor();
    };
    if (a.step.pass == PipePass::Forward) {
      auto forward = [&] {
        out[m] = stage.forward(mbs[m], in[m], acts[m], /*backward=*/!schedule.forward_only, nullptr, hooks);
      };
      if (a.step.combined_with_next) {
        // The combined step: this forward and the next action's backward take turns at their token
        // exchanges (base/pass_baton.h); the table checks put the backward right after it.
        QUILL_CHECK(ai + 1 < row.size() && row[ai + 1].is_pass && row[ai + 1].step.pass == PipePass::Backward,
                    "pipeline: the combined forward of micro-batch {} has no backward after it", m);
        PassBaton* baton = stage.pass_baton();
        QUILL_CHECK(baton != nullptr, "pipeline: a combined step, but the stage model was made without "
                    "--overlap-moe-expert-parallel-comm");
        const size_t b = static_cast<size_t>(row[ai + 1].step.micro), at = ++ai;
        baton->run(forward, [&] { backward(b, at); }, [&] { ops::bind_host_thread(ctx); });
        ++result.combined_steps;
        result.combined_switches += baton->switches();
      } else {
        forward();
      }
      in[m] = Tensor();
      result.loss_sum += acts[m].result.loss_sum;
      if (result.expert_tokens.empty()) {
        result.expert_tokens = acts[m].result.expert_tokens;
      } else {
        for (size_t l = 0; l < result.expert_tokens.size(); ++l)
          for (size_t e = 0; e < result.expert_tokens[l].size(); ++e)
            result.expert_tokens[l][e] += acts[m].result.expert_tokens[l][e];
      }
      if (schedule.forward_only) acts[m] = StageModel::Activations{};  // no backward will read them
    } else {
      backward(m, ai);
    }
  }
  return result;
}

}  // namespace quill
