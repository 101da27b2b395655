// The gradient buckets of whole layers (model/bucket_split.h) and the points where the stage's passes
// call their hooks (model/pass_hooks.h), on the CPU reference: the buckets come in backward order with
// their members in table order and tile each kind's buffer; and a bucket is final when the backward
// says so: its gradients snapshotted at the first grads_written_from(l) with l <= its first layer equal
// the gradients after the whole backward, bit for bit (a later write would show), while the forward
// asks for each layer's weights in ascending order before reading them.
#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "model/bucket_split.h"
#include "model/param_placement.h"
#include "model/stage_model.h"
#include "util/random_row.h"

namespace quill {
namespace {

Param param_of(int64_t layer, int64_t numel) {
  Param p;
  p.layer = layer;
  p.shape = {numel};
  return p;
}

TEST(BucketSplit, WholeLayersFromTheLastUntilTheSizeIsReached) {
  // Layers 0 (two tensors), 1, 2 (two), 3; sizes chosen so that the cut falls after whole layers.
  const std::vector<Param> params = {param_of(0, 10), param_of(0, 5), param_of(1, 30), param_of(2, 8),
                                     param_of(2, 8),  param_of(3, 40)};
  const std::vector<size_t> all = {0, 1, 2, 3, 4, 5};
  // 20 elements: layer 3 alone (40), then layers 2 and 1 (16 < 20, + 30), then layer 0 (15, the rest).
  EXPECT_EQ(split_bucket_by_layers(params, all, 20),
            (std::vector<std::vector<size_t>>{{5}, {2, 3, 4}, {0, 1}}));
  // No size, or one larger than everything: one bucket in table order.
  EXPECT_EQ(split_bucket_by_layers(params, all, 0), (std::vector<std::vector<size_t>>{all}));
  EXPECT_EQ(split_bucket_by_layers(params, all, 1000), (std::vector<std::vector<size_t>>{all}));
  // Size 1: one bucket per layer, the last layer first.
  EXPECT_EQ(split_bucket_by_layers(params, all, 1),
            (std::vector<std::vector<size_t>>{{5}, {3, 4}, {2}, {0, 1}}));
  // A kind's members need not be contiguous in the table.
  EXPECT_EQ(split_bucket_by_layers(params, {1, 3, 5}, 1), (std::vector<std::vector<size_t>>{{5}, {3}, {1}}));
  EXPECT_EQ(default_bucket_elements(2), 40'000'000);
  EXPECT_EQ(default_bucket_elements(64), 64'000'000);
}

// Records the hook calls, and snapshots each bucket's gradients when the backward says they are final.
class RecordingHooks final : public PassHooks {
 public:
  explicit RecordingHooks(ParamTable& table) : table_(table) {}
  void weights_needed(int64_t layer) override { needed.push_back(layer); }
  void grads_written_from(int64_t layer) override {
    written.push_back(layer);
    for (size_t b = 0; b < table_.buckets().size(); ++b)
      if (!snapshots.count(b) && table_.buckets()[b].first_layer >= layer) snapshots[b] = table_.buckets()[b].grads.clone();
  }
  std::vector<int64_t> needed, written;
  std::map<size_t, Tensor> snapshots;

 private:
  ParamTable& table_;
};

TEST(BucketSplit, ABucketIsFinalWhenTheBackwardHasPassedItsFirstLayer) {
  const InklingConfig config = load_inkling_config(std::string(QUILL_SOURCE_DIR) + "/configs/tiny.json");
  ParamTable params = ParamTable::for_config(config);
  params.init_random(7, 0.1);
  const DeviceContext ctx = DeviceContext::cpu();
  const Layout single = Layout::single(config.num_layers);
  place_params(params, ctx, single, 0.0, 1);  // one bucket per layer and kind
  // Buckets tile their kind: members back to back, in table order, each bucket's layers in one range.
  ASSERT_GT(params.buckets().size(), static_cast<size_t>(config.num_layers));
  for (size_t b = 0; b < params.buckets().size(); ++b) {
    const ParamBucket& bucket = params.buckets()[b];
    int64_t at = 0;
    for (size_t i : bucket.members) {
      const Param& p = params.params()[i];
      EXPECT_EQ(p.bucket, static_cast<int>(b)) << p.name;
      EXPECT_EQ(p.bucket_offset, at) << p.name;
      EXPECT_EQ(p.layer, bucket.first_layer) << p.name << ": size 1 puts one layer in a bucket";
      at += shape_numel(p.shape);
    }
    EXPECT_EQ(bucket.numel, at);
    EXPECT_EQ(bucket.first_layer, bucket.last_layer);
  }
  const StageModel stage(config, params, ctx, 0, config.num_layers);
  const int64_t T = 16;
  const test::Row a = test::random_row(T, config.unpadded_vocab_size, 1, [](int64_t t) { return t > 2; });
  const test::Row b = test::random_row(T, config.unpadded_vocab_size, 2, [](int64_t t) { return t > 4; });
  zero_grads(params, ctx, GradReset::kZero);
  // Two micro-batches: the hooks hear the last one's backward only, as the pipeline executor calls them.
  StageModel::Activations act;
  stage.forward(MicroBatch{a.tokens.data(), a.mask.data(), T, 0.01, nullptr}, Tensor(), act, true);
  stage.backward(act, Tensor());
  RecordingHooks hooks(params);
  stage.forward(MicroBatch{b.tokens.data(), b.mask.data(), T, 0.01, nullptr}, Tensor(), act, true, nullptr, &hooks);
  EXPECT_EQ(hooks.needed, (std::vector<int64_t>{0, 0, 1, 2, 3}));
  stage.backward(act, Tensor(), &hooks);
  EXPECT_EQ(hooks.written, (std::vector<int64_t>{3, 2, 1, 0}));
  ASSERT_EQ(hooks.snapshots.size(), params.buckets().size()) << "every bucket is final by the backward's end";
  for (const auto& [bucket, snapshot] : hooks.snapshots) {
    const Tensor& now = params.buckets()[bucket].grads;
    EXPECT_EQ(std::memcmp(snapshot.data(), now.data(), now.nbytes()), 0)
        << "bucket " << bucket << " (layers " << params.buckets()[bucket].first_layer
        << ") was written after the backward called it final";
  }
}

}  // namespace
}  // namespace quill
