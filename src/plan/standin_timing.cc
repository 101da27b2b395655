#include "plan/standin_timing.h"

#include "base/error.h"
#include "ops/busy_timeline.h"

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

std::map<std::string, StandInGroupTime> standin_overlap_by_group(const StandInRecord& record) {
  std::vector<TimeSpan> waits;
  for (const auto& [begin, end] : record.waits) waits.push_back({begin, end});
  const BusyTimeline waiting(std::move(waits));
  std::map<std::string, StandInGroupTime> out;
  for (const StandInSpan& s : record.spans) {
    StandInGroupTime& g = out[s.group];
    g.comm_s += s.end - s.begin;
    g.hidden_s += (s.end - s.begin) - waiting.covered({s.begin, s.end});
  }
  return out;
}

}  // namespace quill::plan
