// The cross-rank check's message (issue 15, defect 1): from every rank's digests, name the fields
// that differ from rank 0 and the ranks that differ. (The all-gather itself runs under mpirun in
// tests/cli/data_parallel_test.cc.)
#include "train/rank_agreement.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>

#include "data/synthetic.h"

namespace quill {
namespace {

const std::vector<AgreementField> kFields = {{"config", "{...}"}, {"rows", "rows_sha256 ab"}, {"--seed", "3"}, {"--lr", "0.01"}};

TEST(RankAgreement, EqualDigestsAgree) {
  EXPECT_FALSE(describe_disagreement(kFields, {1, 2, 3, 4, 1, 2, 3, 4}, 2, 1).has_value());
}

TEST(RankAgreement, NamesEachDifferingFieldAndRank) {
  // Four ranks: rank 2 has another seed, ranks 1 and 3 other rows.
  const std::vector<int64_t> d = {1, 2, 3, 4, 1, 9, 3, 4, 1, 2, 8, 4, 1, 9, 3, 4};
  const std::optional<std::string> m = describe_disagreement(kFields, d, 4, 0);
  ASSERT_TRUE(m.has_value());
  EXPECT_NE(m->find("rows (ranks 1, 3 differ from rank 0)"), std::string::npos) << *m;
  EXPECT_NE(m->find("--seed (rank 2 differs from rank 0)"), std::string::npos) << *m;
  EXPECT_EQ(m->find("--lr"), std::string::npos) << *m;
  EXPECT_NE(m->find("here --seed is 3"), std::string::npos) << *m;
}

TEST(RankAgreement, FieldsCoverConfigRowsSeedAndTheNumerics) {
  const std::string rows_dir =
      (std::filesystem::temp_directory_path() / ("quill-agree-" + std::to_string(::getpid()))).string();
  build_synthetic_rows(rows_dir, 20, 3, 32, 4);
  const RowsReader rows = RowsReader::open(rows_dir);
  InklingConfig config = load_inkling_config(std::string(QUILL_SOURCE_DIR) + "/configs/tiny.json");
  TrainOptions o;
  const std::vector<AgreementField> base = agreement_fields(o, config, rows);
  auto value = [](const std::vector<AgreementField>& f, const std::string& name) {
    for (const AgreementField& x : f)
      if (x.name == name) return x.value;
    ADD_FAILURE() << name << " is not a field";
    return std::string();
  };
  for (const char* name : {"config", "rows", "--seed", "--lr", "--min-lr", "--beta1", "--beta2", "--adam-eps",
                           "--weight-decay", "--clip-grad", "--warmup-fraction", "--lr-decay-style", "--global-batch",
                           "--steps", "--freeze", "--loss-vocab", "--no-verify-checkpoint", "--no-verify-checkpoint-rows"})
    value(base, name);
  EXPECT_NE(value(base, "rows").find(rows.manifest()["rows_sha256"].get<std::string>()), std::string::npos);
  // A value that differs (not a shape) changes the field's text, so its digest.
  TrainOptions other = o;
  other.lr.max_lr *= 1.0000001;
  EXPECT_NE(value(agreement_fields(other, config, rows), "--lr"), value(base, "--lr"));
  // Ranks pairing the experts' weight gradients differently would sum their gradients in other orders.
  other = o;
  other.moe_expert_wgrad_micro_batches = 2;
  EXPECT_NE(value(agreement_fields(other, config, rows), "--moe-expert-wgrad-micro-batches"),
            value(base, "--moe-expert-wgrad-micro-batches"));
  // A rank running another form of a GPU kernel would compute other bits than the summary says.
  other = o;
  other.attention_forward_form = AttentionForwardForm::kWide;
  EXPECT_NE(value(agreement_fields(other, config, rows), "--attention-forward-form"),
            value(base, "--attention-forward-form"));
  other = o;
  other.attention_backward_form = AttentionBackwardForm::kProducer;
  EXPECT_NE(value(agreement_fields(other, config, rows), "--attention-backward-form"),
            value(base, "--attention-backward-form"));
  for (const char* name : {"--attention-dq-order", "--grouped-gemm-kernel", "--grouped-wgrad-kernel",
                           "--grouped-wgrad-form", "--attention-bias-rows"})
    value(base, name);
  InklingConfig theta = config;
  theta.rms_norm_eps *= 2;
  EXPECT_NE(value(agreement_fields(o, theta, rows), "config"), value(base, "config"));
}

// A rank alone decides by its own signal; under mpirun tests/cli/stop_signal_test.cc signals one rank of two.
TEST(RankAgreement, ARankAloneStopsOnItsOwnSignal) {
  EXPECT_EQ(agreed_stop_signal(nullptr, DeviceContext::cpu(), 0), 0);
  EXPECT_EQ(agreed_stop_signal(nullptr, DeviceContext::cpu(), SIGTERM), SIGTERM);
}

}  // namespace
}  // namespace quill
