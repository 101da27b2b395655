// Layout::create's communicators: one per group kind with more than one rank, the expert-parallel
// one split apart (Comm::split_isolated: a queue of its own, so that the token exchange never waits
// behind the gradients' reduce-scatter), every other kind by a plain split. A world that records
// how each group was split stands in for the launcher's (one process, no traffic).
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>

#include "base/error.h"
#include "parallel/layout.h"

namespace quill {
namespace {

// Records the splits made from it (and from its splits) as name -> "split" | "isolated".
class SplitRecorder final : public Comm {
 public:
  SplitRecorder(int size, int rank, std::string name, std::shared_ptr<std::map<std::string, std::string>> log)
      : size_(size), rank_(rank), name_(std::move(name)), log_(std::move(log)) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Device device() const override { return Device::CPU; }
  const std::string& name() const override { return name_; }
  void all_reduce(const Tensor&, ReduceOp) override { none("all_reduce"); }
  void reduce_scatter(const Tensor&, const Tensor&, ReduceOp) override { none("reduce_scatter"); }
  void all_gather(const Tensor&, const Tensor&) override { none("all_gather"); }
  void all_to_all(const Tensor&, const std::vector<int64_t>&, const Tensor&, const std::vector<int64_t>&) override {
    none("all_to_all");
  }
  void broadcast(const Tensor&, int) override { none("broadcast"); }
  void send(const Tensor&, int) override { none("send"); }
  void recv(const Tensor&, int) override { none("recv"); }
  void send_recv(const Tensor&, int, const Tensor&, int) override { none("send_recv"); }
  void barrier() override { none("barrier"); }
  std::unique_ptr<Comm> split(const std::vector<int>& group, const std::string& name) override {
    return make(group, name, "split");
  }
  std::unique_ptr<Comm> split_isolated(const std::vector<int>& group, const std::string& name) override {
    return make(group, name, "isolated");
  }

 private:
  [[noreturn]] void none(const char* op) const { QUILL_FAIL("SplitRecorder: no {} expected", op); }
  std::unique_ptr<Comm> make(const std::vector<int>& group, const std::string& name, const char* how) {
    EXPECT_EQ(log_->count(name), 0u) << name << " split twice";
    (*log_)[name] = how;
    int index = 0;
    while (group[static_cast<size_t>(index)] != rank_) ++index;
    return std::make_unique<SplitRecorder>(static_cast<int>(group.size()), index, name, log_);
  }
  int size_, rank_;
  std::string name_;
  std::shared_ptr<std::map<std::string, std::string>> log_;
};

TEST(LayoutComms, ExpertParallelGroupIsSplitApart) {
  // TP2 x DP4 with EP4 (edp 2) and PP2: every kind but cp has groups of more than one rank.
  LayoutSpec spec;
  spec.tp = 2, spec.dp = 4, spec.pp = 2, spec.ep = 4;
  for (int rank : {0, 5, 15}) {
    SCOPED_TRACE(rank);
    auto log = std::make_shared<std::map<std::string, std::string>>();
    SplitRecorder world(spec.world(), rank, "world", log);
    const Layout layout = Layout::create(spec, /*num_layers=*/4, &world);
    ASSERT_NE(layout.comm(GroupKind::EP), nullptr);
    EXPECT_EQ(log->at(group_kind_name(GroupKind::EP)), "isolated");
    for (GroupKind kind : {GroupKind::TP, GroupKind::DP, GroupKind::DP_CP, GroupKind::PP, GroupKind::EDP}) {
      ASSERT_NE(layout.comm(kind), nullptr) << group_kind_name(kind);
      EXPECT_EQ(log->at(group_kind_name(kind)), "split") << group_kind_name(kind);
    }
    EXPECT_EQ(log->size(), 6u);  // cp and etp have one rank per group: no communicator
  }
}

}  // namespace
}  // namespace quill
