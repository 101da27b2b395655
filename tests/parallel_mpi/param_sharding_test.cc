// Sharded parameter tables under mpirun, against one rank: for layouts of tensor, expert, pipeline and
// data parallelism, every rank allocates only its stage's tensors and its slices of the split ones;
// a random init draws exactly the one-rank values into each slice; an HF checkpoint (release and
// transformers forms) loads each rank's slice straight from the file; and gathering the ranks'
// tables back gives the one-rank table bit for bit (names, order, shapes, values).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <unistd.h>

#include "base/error.h"
#include "comm/mpi_test_env.h"
#include "io/hf_checkpoint.h"
#include "model/param_gather.h"
#include "model/param_placement.h"
#include "optim/adamw.h"
#include "optim/grad_norm.h"
#include "train/train_checkpoint.h"

namespace quill::test {
namespace {

InklingConfig tiny() { return load_inkling_config(std::string(QUILL_SOURCE_DIR) + "/configs/tiny.json"); }

std::vector<LayoutSpec> layouts_for(int world) {
  std::vector<LayoutSpec> out;
  auto add = [&](int tp, int dp, int pp, int ep, std::vector<int64_t> split = {}) {
    LayoutSpec s;
    s.tp = tp, s.dp = dp, s.pp = pp, s.ep = ep, s.pp_layers = split;
    if (s.world() == world) out.push_back(s);
  };
  add(2, 1, 1, 1);
  add(1, 2, 1, 2);
  add(1, 1, 2, 1, {1, 3});  // a dense-only first stage
  add(1, 2, 1, 1);
  add(2, 1, 2, 1);
  add(2, 2, 1, 4);
  add(1, 4, 1, 4);
  return out;
}

int64_t elements(const ParamTable& t) {
  int64_t n = 0;
  for (const Param& p : t.params()) n += p.value.numel();
  return n;
}

// Each local value equals the one-rank value at its global index.
void expect_slices_of(const ParamTable& local, const ParamTable& ref, const std::string& what) {
  for (const Param& p : local.params()) {
    const Param& r = ref.at(p.name);
    ASSERT_EQ(p.shard.global_shape, r.shape) << what << ": " << p.name;
    for (const SliceRun& run : slice_runs(p.shard))
      ASSERT_EQ(std::memcmp(p.value.data_as<float>() + run.local_offset, r.value.data_as<float>() + run.global_offset,
                            static_cast<size_t>(run.length) * sizeof(float)),
                0)
          << what << ": " << p.name << " run at " << run.global_offset;
  }
}

void expect_equal_tables(const ParamTable& got, const ParamTable& ref, const std::string& what) {
  ASSERT_EQ(got.params().size(), ref.params().size()) << what;
  for (size_t i = 0; i < ref.params().size(); ++i) {
    const Param &a = got.params()[i], &b = ref.params()[i];
    ASSERT_EQ(a.name, b.name) << what;
    ASSERT_EQ(a.shape, b.shape) << what << ": " << a.name;
    EXPECT_EQ(std::memcmp(a.value.data(), b.value.data(), b.value.nbytes()), 0) << what << ": " << a.name;
  }
}

TEST(ParamSharding, SlicesInitLoadAndGatherEqualOneRank) {
  MpiComm& world = mpi_world();
  const InklingConfig config = tiny();
  ParamTable ref = ParamTable::for_config(config);
  ref.init_random(7, 0.1);
  const int64_t whole = elements(ref);
  // The same weights as a Hugging Face checkpoint in each form, written by rank 0.
  const std::string dir = (std::filesystem::temp_directory_path() / "quill-sharding-test").string();
  Tensor pid = Tensor::empty({1}, DType::I64);
  pid.data_as<int64_t>()[0] = ::getpid();
  world.broadcast(pid, 0);
  const std::string base = dir + "-" + std::to_string(pid.data_as<int64_t>()[0]);
  if (world.rank() == 0) {
    for (HfFormat f : {HfFormat::Release, HfFormat::Transformers}) {
      SaveOptions save;
      save.overwrite = true;
      save.format = f;
      save.force_dtype = DType::F32;
      save_hf_checkpoint(base + "-" + hf_format_name(f), ref, "", config_to_hf_json(config), save);
    }
  }
  world.barrier();

  const std::vector<LayoutSpec> specs = layouts_for(world.size());
  ASSERT_FALSE(specs.empty());
  for (const LayoutSpec& spec : specs) {
    const std::string what = spec.describe();
    SCOPED_TRACE(what);
    const Layout layout = Layout::create(spec, config.num_layers, &world);
    ParamTable t = ParamTable::for_config(config, layout);
    if (spec.tp > 1 || spec.pp > 1 || spec.ep > 1) EXPECT_LT(elements(t), whole) << "a rank holds the whole model";
    else EXPECT_EQ(elements(t), whole);
    t.init_random(7, 0.1);
    expect_slices_of(t, ref, what + " (random init)");
    for (HfFormat f : {HfFormat::Release, HfFormat::Transformers}) {
      ParamTable loaded = ParamTable::for_config(config, layout);
      load_hf_checkpoint(base + "-" + hf_format_name(f), loaded);
      expect_slices_of(loaded, ref, what + " (loaded, " + hf_format_name(f) + " form)");
    }
    place_params(t, DeviceContext::cpu(), layout);
    const ParamTable gathered = gather_whole(t, DeviceContext::cpu(), layout, config);
    if (world.rank() == 0) expect_equal_tables(gathered, ref, what + " (gathered)");
    else EXPECT_TRUE(gathered.params().empty());
  }
  world.barrier();
  if (world.rank() == 0)
    for (HfFormat f : {HfFormat::Release, HfFormat::Transformers})
      std::filesystem::remove_all(base + "-" + hf_format_name(f));
}

// The global gradient norm counts every trainable element of the model once, whatever the layout:
// with every gradient element 1, it is the square root of the model's trainable element count.
TEST(ParamSharding, GradientNormCountsEveryElementOnce) {
  MpiComm& world = mpi_world();
  const InklingConfig config = tiny();
  int64_t trainable = 0;
  for (const ParamDecl& d : param_decls(config))
    if (!d.is_buffer) trainable += shape_numel(d.shape);
  for (const LayoutSpec& spec : layouts_for(world.size())) {
    SCOPED_TRACE(spec.describe());
    const Layout layout = Layout::create(spec, config.num_layers, &world);
    ParamTable t = ParamTable::for_config(config, layout);
    place_params(t, DeviceContext::cpu(), layout);
    for (Param& p : t.params())
      if (p.grad.defined()) std::fill(p.grad.data_as<float>(), p.grad.data_as<float>() + p.grad.numel(), 1.0f);
    EXPECT_DOUBLE_EQ(global_grad_norm(t, DeviceContext::cpu(), layout.world()), std::sqrt(static_cast<double>(trainable)));
  }
}

// A training checkpoint saved under any layout (pieces keyed by global element ranges) resumes on
// one rank with every master weight and moment equal, bit for bit, to the one-rank state.
TEST(ParamSharding, CheckpointsOfEveryLayoutResumeOnOneRank) {
  MpiComm& world = mpi_world();
  const InklingConfig config = tiny();
  // Reference state on every rank: masters from the seeded init, moments from a formula of the
  // global element index, so that any misplaced element shows.
  ParamTable ref = ParamTable::for_config(config);
  ref.init_random(3, 0.1);
  auto moment = [](const std::string& name, int64_t i, int k) {
    return static_cast<float>((std::hash<std::string>{}(name) % 1000) * 1e-3 + 1e-4 * static_cast<double>(i % 977) + k);
  };
  Tensor pid = Tensor::empty({1}, DType::I64);
  pid.data_as<int64_t>()[0] = ::getpid();
  world.broadcast(pid, 0);
  for (const LayoutSpec& spec : layouts_for(world.size())) {
    const std::string what = spec.describe();
    SCOPED_TRACE(what);
    const std::string dir = (std::filesystem::temp_directory_path() /
                             ("quill-sharding-ckpt-" + std::to_string(pid.data_as<int64_t>()[0]))).string();
    {
      const Layout layout = Layout::create(spec, config.num_layers, &world);
      ParamTable t = ParamTable::for_config(config, layout);
      t.init_random(3, 0.1);
      place_params(t, DeviceContext::cpu(), layout);
      AdamW opt(t, AdamWConfig{}, DeviceContext::cpu(), layout.world());
      opt.set_steps_taken(5);
      // Write each bucket's moments from the global index of each element.
      for (size_t bi = 0; bi < t.buckets().size(); ++bi) {
        const ParamBucket& b = t.buckets()[bi];
        for (size_t i : b.members) {
          const Param& p = t.params()[i];
          for (const SliceRun& r : slice_runs(p.shard))
            for (int64_t j = 0; j < r.length; ++j) {
              const int64_t at = p.bucket_offset + r.local_offset + j;
              if (at < b.shard_begin || at >= b.shard_end) continue;
              const_cast<float*>(opt.exp_avg(bi).data_as<float>())[at - b.shard_begin] = moment(p.name, r.global_offset + j, 1);
              const_cast<float*>(opt.exp_avg_sq(bi).data_as<float>())[at - b.shard_begin] = moment(p.name, r.global_offset + j, 2);
            }
        }
      }
      save_train_checkpoint(dir, 7, CheckpointIdentity{config_to_hf_json(config), "rows"}, t, opt, DeviceContext::cpu(), layout);
    }
    world.barrier();
    if (world.rank() == 0) {
      ParamTable one = ParamTable::for_config(config);
      place_params(one, DeviceContext::cpu());
      AdamW opt(one, AdamWConfig{});
      EXPECT_EQ(load_train_checkpoint(dir, CheckpointIdentity{config_to_hf_json(config), "rows"}, CheckpointChecks{}, one, opt,
                                      DeviceContext::cpu(), Layout::single(config.num_layers)),
                7);
      EXPECT_EQ(opt.steps_taken(), 5);
      for (const Param& p : one.params())
        EXPECT_EQ(std::memcmp(p.value.data(), ref.at(p.name).value.data(), p.value.nbytes()), 0) << p.name;
      for (size_t bi = 0; bi < one.buckets().size(); ++bi)
        for (size_t i : one.buckets()[bi].members) {
          const Param& p = one.params()[i];
          for (int64_t j = 0; j < p.value.numel(); ++j) {
            ASSERT_EQ(opt.exp_avg(bi).data_as<float>()[p.bucket_offset + j], moment(p.name, j, 1)) << p.name << " " << j;
            ASSERT_EQ(opt.exp_avg_sq(bi).data_as<float>()[p.bucket_offset + j], moment(p.name, j, 2)) << p.name << " " << j;
          }
        }
      std::filesystem::remove_all(dir);
    }
    world.barrier();
  }
}

TEST(ParamSharding, LayoutsThatDoNotDivideAreRefusedNamingTensorAndFlag) {
  MpiComm& world = mpi_world();
  LayoutSpec spec;
  spec.tp = world.size();  // tiny has 2 key/value heads: 4 ranks do not divide them
  if (spec.tp <= 2) GTEST_SKIP() << "needs 4 ranks";
  const InklingConfig config = tiny();
  const Layout layout = Layout::create(spec, config.num_layers, &world);
  try {
    ParamTable::for_config(config, layout);
    FAIL() << "tp " << spec.tp << " accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--tensor-model-parallel-size 4 does not divide model.llm.layers.0.attn.wk_dv.weight"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace quill::test
