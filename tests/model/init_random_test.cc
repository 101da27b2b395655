// ParamTable::init_random cuts its work into pieces over a tensor's slice runs (a run per row for a
// tensor split along its last dimension): any piece size, pieces that start and end inside runs, and
// a tensor-parallel rank's slices all give the values of one rank's whole table, bit for bit.
#include <gtest/gtest.h>

#include <cstring>

#include "comm/loopback_comm.h"
#include "model/config.h"
#include "model/params.h"
#include "parallel/layout.h"
#include "util/test_util.h"

namespace quill {
namespace {

InklingConfig tiny() { return load_inkling_config(std::string(QUILL_SOURCE_DIR) + "/configs/tiny.json"); }

void expect_same_values(const ParamTable& a, const ParamTable& b, const std::string& what) {
  ASSERT_EQ(a.params().size(), b.params().size());
  for (size_t i = 0; i < a.params().size(); ++i)
    EXPECT_EQ(std::memcmp(a.params()[i].value.data(), b.params()[i].value.data(), b.params()[i].value.nbytes()), 0)
        << what << ": " << a.params()[i].name;
}

TEST(InitRandom, AnyPieceSizeGivesTheSameBits) {
  const InklingConfig config = tiny();
  ParamTable whole = ParamTable::for_config(config);
  whole.init_random(5, 0.02);
  for (int64_t piece : {1, 7, 37, 1000}) {
    ParamTable t = ParamTable::for_config(config);
    t.init_random(5, 0.02, piece);
    expect_same_values(t, whole, "piece " + std::to_string(piece));
  }
}

// TP2's rank 1: the row-parallel weights (o_proj, down_proj) are a run per row; pieces of 37 elements
// start and end inside those runs. Every run must hold the whole table's elements at its global offset.
TEST(InitRandom, ATensorParallelRanksSlicesEqualTheWholeTables) {
  const InklingConfig config = tiny();
  ParamTable whole = ParamTable::for_config(config);
  whole.init_random(5, 0.02);
  LayoutSpec spec;
  spec.tp = 2;
  LoopbackComm world(2, 1, "world", make_host_loopback_mover());
  const Layout layout = Layout::create(spec, config.num_layers, &world);
  int64_t many_runs = 0;
  for (int64_t piece : {int64_t{37}, int64_t{1} << 20}) {
    ParamTable t = ParamTable::for_config(config, layout);
    t.init_random(5, 0.02, piece);
    for (const Param& p : t.params()) {
      const std::vector<SliceRun> runs = slice_runs(p.shard);
      if (runs.size() > 1) ++many_runs;
      for (const SliceRun& r : runs)
        ASSERT_EQ(std::memcmp(p.value.data_as<float>() + r.local_offset,
                              whole.at(p.name).value.data_as<float>() + r.global_offset,
                              static_cast<size_t>(r.length) * sizeof(float)),
                  0)
            << p.name << " (piece " << piece << "), run at global element " << r.global_offset;
    }
  }
  EXPECT_GT(many_runs, 0) << "no tensor of this layout is split into several runs: the test checks nothing it means to";
}

}  // namespace
}  // namespace quill
