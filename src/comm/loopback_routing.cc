#include "comm/loopback_routing.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "base/error.h"

namespace quill {

namespace {

class Balanced final : public LoopbackRouting {
 public:
  std::vector<int64_t> received(const std::vector<int64_t>& sent, int rank, int size) override {
    const int64_t E = static_cast<int64_t>(sent.size()), El = E / size;
    const int64_t P = std::accumulate(sent.begin(), sent.end(), int64_t{0});
    std::vector<int64_t> out(sent.size());
    for (int q = 0; q < size; ++q)
      for (int64_t e = 0; e < El; ++e) {
        const int64_t g = rank * El + e;
        out[static_cast<size_t>(q * El + e)] = q == rank ? sent[static_cast<size_t>(g)] : P / E + (g < P % E ? 1 : 0);
      }
    return out;
  }
};

class Recorded final : public LoopbackRouting {
 public:
  explicit Recorded(RecordedRouting r) : r_(std::move(r)) {
    QUILL_CHECK(!r_.counts.empty() && !r_.counts[0].empty(), "recorded routing: no steps or no MoE layers");
    QUILL_CHECK(r_.micro_batches >= 1 && r_.scale_num >= 0 && r_.scale_den >= 1, "recorded routing: bad workload");
    layers_ = r_.counts[0].size();
  }

  std::vector<int64_t> received(const std::vector<int64_t>& sent, int rank, int size) override {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t E = static_cast<int64_t>(sent.size()), El = E / size;
    const size_t layer = static_cast<size_t>(call_ % static_cast<int64_t>(layers_));
    const int64_t mb_all = call_ / static_cast<int64_t>(layers_);
    const int64_t step = mb_all / r_.micro_batches, mb = mb_all % r_.micro_batches;
    ++call_;
    const auto& file = r_.counts[static_cast<size_t>(step % static_cast<int64_t>(r_.counts.size()))];
    QUILL_CHECK(file.size() == layers_ && static_cast<int64_t>(file[layer].size()) == E,
                "recorded routing: step {} has {} MoE layers of {} experts; the simulated stage has {} of {}",
                step, file.size(), file[layer].size(), layers_, E);
    if (mb == 0) state_[layer] = State{std::vector<int64_t>(static_cast<size_t>(El), 0),
                                       std::vector<int64_t>(static_cast<size_t>(El), 0)};
    State& st = state_[layer];
    std::vector<int64_t> out(sent.size());
    const int others = size - 1;
    for (int64_t e = 0; e < El; ++e) {
      const int64_t g = rank * El + e;
      const int64_t own = sent[static_cast<size_t>(g)];
      st.own[static_cast<size_t>(e)] += own;
      const int64_t X = file[layer][static_cast<size_t>(g)] * r_.scale_num / r_.scale_den;
      std::vector<int64_t> from(static_cast<size_t>(others), 0);
      if (mb + 1 < r_.micro_batches) {
        std::fill(from.begin(), from.end(), X / (size * r_.micro_batches));
      } else {
        const int64_t left = std::max<int64_t>(0, X - st.own[static_cast<size_t>(e)] - st.given[static_cast<size_t>(e)]);
        for (int k = 0; k < others; ++k) from[static_cast<size_t>(k)] = left / others + (k < left % others ? 1 : 0);
      }
      int k = 0;
      for (int q = 0; q < size; ++q) {
        const int64_t n = q == rank ? own : from[static_cast<size_t>(k++)];
        if (q != rank) st.given[static_cast<size_t>(e)] += n;
        out[static_cast<size_t>(q * El + e)] = n;
      }
    }
    return out;
  }

 private:
  struct State {
    std::vector<int64_t> own, given;  // per local expert, this step so far
  };
  RecordedRouting r_;
  size_t layers_ = 0;
  std::mutex mu_;
  int64_t call_ = 0;
  std::map<size_t, State> state_;
};

}  // namespace

std::shared_ptr<LoopbackRouting> balanced_routing() { return std::make_shared<Balanced>(); }

std::shared_ptr<LoopbackRouting> recorded_routing(RecordedRouting recorded) {
  return std::make_shared<Recorded>(std::move(recorded));
}

}  // namespace quill
