#include "plan/standin_timing.h"

#include "base/error.h"

namespace quill::plan {

namespace {

class CommModelTiming final : public StandInTiming {
 public:
  explicit CommModelTiming(CommModelParams params) : params_(std::move(params)) {}

  double seconds(const StandInCall& call) const override {
    QUILL_CHECK(call.world_ranks != nullptr, "stand-in timing of {}.{}: no world ranks", call.group, call.op);
    CollectiveRow row;
    row.group = call.group;
    row.group_size = call.group_size;
    row.op = call.op;
    row.calls = 1;
    row.payload_bytes = call.bytes.payload;
    row.sent_bytes = call.bytes.sent;
    row.recv_bytes = call.bytes.recv;
    const GroupPlacement where = place_group(*call.world_ranks, call.world_rank, params_.gpus_per_node);
    return row_time(row, where, params_).total_s();
  }

 private:
  CommModelParams params_;
};

}  // namespace

std::shared_ptr<const StandInTiming> comm_model_timing(CommModelParams params) {
  return std::make_shared<CommModelTiming>(std::move(params));
}

}  // namespace quill::plan
