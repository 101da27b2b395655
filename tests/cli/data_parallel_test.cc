// Data parallelism on the CPU under mpirun: a DP run is the single-rank command line plus the
// layout (`mpirun -np D quill train <same flags> --dp D`). DP2 and DP4 must give the same per-step
// losses and gradient norms and the same final fp32 weights as one rank within float rounding
// (relative 1e-5), each rank must hold only its shard of the fp32 masters and Adam moments, and a
// checkpoint must resume under another data-parallel size.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <csignal>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>

#include "io/safetensors.h"
#include "train/train_checkpoint.h"
#include "util/command.h"
#include "util/run_dir.h"

namespace {

namespace fs = std::filesystem;

int run(const std::string& cmd, std::string* output = nullptr) { return quill::test::run_checked(cmd, output); }

std::string temp(const std::string& name) { return quill::test::fresh_temp_dir("dp", name); }

std::vector<double> metric(const std::string& out, const char* key) { return quill::test::read_metric(out, key); }
std::vector<double> losses(const std::string& out) { return metric(out, "loss"); }

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double rel, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], rel * std::fabs(want[i])) << what << " step " << i;
}

std::map<std::string, quill::Tensor> weights(const std::string& checkpoint) {
  std::map<std::string, quill::Tensor> m;
  for (auto& [name, t] : quill::checkpoint_values(checkpoint)) m[name] = t;
  return m;
}

// Elements of the first moments in a checkpoint's rank files, rank by rank (each at most its shard).
int64_t moment_elements(const std::string& checkpoint, int ranks) {
  int64_t all = 0, most = 0;
  for (int r = 0; r < ranks; ++r) {
    const quill::SafetensorsFile shard = quill::SafetensorsFile::open(
        quill::test::latest_checkpoint(checkpoint) + "/shard-rank" + std::to_string(r) + "-of-" + std::to_string(ranks) + ".safetensors");
    int64_t mine = 0;
    for (const std::string& t : shard.names())
      if (t.starts_with("exp_avg/")) mine += shard.entry(t).shape[0];
    all += mine;
    most = std::max(most, mine);
  }
  EXPECT_LE(most, all / ranks + ranks) << checkpoint << ": a rank holds more than its shard";
  return all;
}

nlohmann::json summary(const std::string& out) {
  std::ifstream in(out + "/summary.json");
  return nlohmann::json::parse(in);
}

double rel_l2(const quill::Tensor& a, const quill::Tensor& b) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = a.data_as<float>()[i], y = b.data_as<float>()[i];
    num += (x - y) * (x - y);
    den += y * y;
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

TEST(DataParallel, Dp2AndDp4MatchOneRankEveryStep) {
  const std::string quill = QUILL_BINARY, src = QUILL_SOURCE_DIR, rows = temp("rows");
  ASSERT_EQ(run(quill + " data synth --conversations 300 --row-tokens 64 --max-rows 64 --out " + rows), 0);
  const std::string flags = " train --config " + src + "/configs/tiny.json --rows " + rows +
                            " --seed 3 --steps 5 --global-batch 4 --lr 1e-2 --min-lr 1e-3 --warmup-fraction 0.2"
                            " --weight-decay 0.1 --quiet --save-hf";
  const std::string single = temp("dp1");
  ASSERT_EQ(run(quill + flags + " --out " + single + " --save " + single + "/checkpoint"), 0);
  const auto ref_losses = losses(single), ref_norms = metric(single, "grad_norm");
  ASSERT_EQ(ref_losses.size(), 5u);
  const auto ref = weights(single + "/checkpoint");
  const nlohmann::json ref_state = summary(single).at("optimizer_state_bytes_rank0");

  for (int dp : {2, 4}) {
    const std::string out = temp("dp" + std::to_string(dp));
    ASSERT_EQ(run(std::string(QUILL_MPIEXEC) + " -np " + std::to_string(dp) + " " + quill + flags + " --dp " +
                  std::to_string(dp) + " --out " + out + " --save " + out + "/checkpoint"),
              0);
    expect_close(losses(out), ref_losses, 1e-5, "dp " + std::to_string(dp) + " loss");
    expect_close(metric(out, "grad_norm"), ref_norms, 1e-5, "dp " + std::to_string(dp) + " grad norm");

    const auto w = weights(out + "/checkpoint");
    ASSERT_EQ(w.size(), ref.size());
    for (const auto& [name, t] : ref) EXPECT_LE(rel_l2(w.at(name), t), 1e-5) << "dp " << dp << ": " << name;

    // Rank 0 owns 1/dp of the fp32 masters and of the moments (buckets padded to a multiple of dp).
    const nlohmann::json state = summary(out).at("optimizer_state_bytes_rank0");
    for (const char* key : {"master_owned", "moments"}) {
      const double one = ref_state.at(key).get<double>(), mine = state.at(key).get<double>();
      EXPECT_GE(mine, one / dp) << key;
      EXPECT_LE(mine, one / dp + 64.0 * dp) << key << ": rank 0 holds more than its shard";
    }

    // The Hugging Face export of the DP run equals the single-rank export: same names and dtypes,
    // and every value equal except where fp32 weights that differ by float rounding round to
    // different bf16 values: then at most one bf16 step of the value apart, or,
    // for values near zero, within 1e-5 of the tensor's RMS; and rarely.
    const quill::SafetensorsFile hf_ref = quill::SafetensorsFile::open(single + "/hf/model.safetensors");
    const quill::SafetensorsFile hf = quill::SafetensorsFile::open(out + "/hf/model.safetensors");
    ASSERT_EQ(hf.names(), hf_ref.names());
    int64_t values = 0, differing = 0;
    for (const std::string& name : hf_ref.names()) {
      ASSERT_EQ(hf.entry(name).dtype_str, hf_ref.entry(name).dtype_str) << name;
      if (hf.entry(name).dtype_str != "BF16") {
        EXPECT_LE(rel_l2(hf.tensor(name), hf_ref.tensor(name)), 1e-5) << "dp " << dp << " export: " << name;
        continue;
      }
      const quill::Tensor a = quill::convert_dtype(hf.tensor(name), quill::DType::F32);
      const quill::Tensor b = quill::convert_dtype(hf_ref.tensor(name), quill::DType::F32);
      double sq = 0;
      for (int64_t i = 0; i < b.numel(); ++i) sq += static_cast<double>(b.data_as<float>()[i]) * b.data_as<float>()[i];
      const double rms = std::sqrt(sq / static_cast<double>(std::max<int64_t>(1, b.numel())));
      for (int64_t i = 0; i < a.numel(); ++i) {
        const double x = a.data_as<float>()[i], y = b.data_as<float>()[i];
        ++values;
        if (x == y) continue;
        ++differing;
        int e = 0;
        std::frexp(std::max(std::fabs(x), std::fabs(y)), &e);  // value in [2^(e-1), 2^e): bf16 step 2^(e-8)
        EXPECT_LE(std::fabs(x - y), std::max(std::ldexp(1.0, e - 8), 1e-5 * rms))
            << "dp " << dp << " export: " << name << " element " << i;
      }
    }
    EXPECT_LT(static_cast<double>(differing) / static_cast<double>(values), 1e-3) << "dp " << dp;

    // The checkpoint is sharded: each rank's file holds its pieces only, and together they tile
    // exactly the moments that the one-rank checkpoint holds.
    EXPECT_EQ(moment_elements(out + "/checkpoint", dp), moment_elements(single + "/checkpoint", 1));
  }
}

TEST(DataParallel, Dp2ResumesBitIdentically) {
  const std::string quill = QUILL_BINARY, src = QUILL_SOURCE_DIR, rows = temp("rows-resume");
  ASSERT_EQ(run(quill + " data synth --conversations 300 --row-tokens 64 --max-rows 64 --out " + rows), 0);
  const std::string mpi = std::string(QUILL_MPIEXEC) + " -np 2 " + quill;
  const std::string flags = " train --config " + src + "/configs/tiny.json --rows " + rows +
                            " --seed 3 --steps 4 --global-batch 4 --lr 1e-2 --quiet --dp 2";
  const std::string whole = temp("whole"), parts = temp("parts");
  ASSERT_EQ(run(mpi + flags + " --out " + whole), 0);
  ASSERT_EQ(run(mpi + flags + " --stop-after 2 --out " + parts + " --save " + parts + "/checkpoint"), 0);
  ASSERT_EQ(run(mpi + flags + " --resume " + parts + "/checkpoint --out " + parts + " --save " + parts + "/checkpoint"), 0);
  EXPECT_EQ(losses(whole), losses(parts));
  EXPECT_EQ(metric(whole, "grad_norm"), metric(parts, "grad_norm"));
}

// A checkpoint keyed by parameter name and element range resumes under another data-parallel size:
// DP2 -> DP1 and DP1 -> DP2 give every step's loss and gradient norm within 1e-6 of the
// uninterrupted one-rank run. The weights agree within 1e-5, the tolerance of any layout against one
// rank: DP2 sums gradients in another order, and at lr 1e-2 two steps of that reach 1-3e-6 in
// some matrices (measured 2026-12-01), whichever way the run was resumed.
TEST(DataParallel, ResumesAcrossDataParallelSizes) {
  const std::string quill = QUILL_BINARY, src = QUILL_SOURCE_DIR, rows = temp("rows-resize");
  ASSERT_EQ(run(quill + " data synth --conversations 300 --row-tokens 64 --max-rows 64 --out " + rows), 0);
  const std::string flags = " train --config " + src + "/configs/tiny.json --rows " + rows +
                            " --seed 5 --steps 4 --global-batch 4 --lr 1e-2 --weight-decay 0.1 --quiet";
  const std::string mpi2 = std::string(QUILL_MPIEXEC) + " -np 2 " + quill, one = quill;
  const std::string whole = temp("resize-whole");
  ASSERT_EQ(run(one + flags + " --out " + whole + " --save " + whole + "/checkpoint"), 0);
  for (const auto& [first, second, name] : {std::tuple{mpi2 + flags + " --dp 2", one + flags, "dp2-to-dp1"},
                                            std::tuple{one + flags, mpi2 + flags + " --dp 2", "dp1-to-dp2"}}) {
    const std::string parts = temp(name);
    const std::string save = " --save " + parts + "/checkpoint";
    ASSERT_EQ(run(first + " --stop-after 2 --out " + parts + save), 0) << name;
    ASSERT_EQ(run(second + " --resume " + parts + "/checkpoint --out " + parts + save), 0) << name;
    expect_close(losses(parts), losses(whole), 1e-6, std::string(name) + " loss");
    expect_close(metric(parts, "grad_norm"), metric(whole, "grad_norm"), 1e-6, std::string(name) + " grad norm");
    const auto a = weights(parts + "/checkpoint"), b = weights(whole + "/checkpoint");
    for (const auto& [n, t] : b) EXPECT_LE(rel_l2(a.at(n), t), 1e-5) << name << ": " << n;
  }
}

// A checkpoint missing one rank's file is refused naming the file, before anything is trained.
TEST(DataParallel, ResumeFromACheckpointMissingARankFileIsRefused) {
  const std::string quill = QUILL_BINARY, src = QUILL_SOURCE_DIR, rows = temp("rows-refuse");
  ASSERT_EQ(run(quill + " data synth --conversations 100 --row-tokens 32 --max-rows 16 --out " + rows), 0);
  const std::string out = temp("refuse");
  const std::string flags = " train --config " + src + "/configs/tiny.json --rows " + rows + " --steps 2 --global-batch 2 --quiet";
  const std::string mpi2 = std::string(QUILL_MPIEXEC) + " -np 2 " + quill;
  ASSERT_EQ(run(mpi2 + flags + " --dp 2 --stop-after 1 --out " + out + " --save " + out + "/checkpoint"), 0);
  fs::remove(quill::test::latest_checkpoint(out + "/checkpoint") + "/shard-rank1-of-2.safetensors");
  const quill::test::CommandResult r = quill::test::run_command(quill + flags + " --resume " + out + "/checkpoint --out " + out);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("shard-rank1-of-2.safetensors"), std::string::npos) << r.output;
  EXPECT_EQ(losses(out).size(), 1u) << "the metrics of the first run are kept";
}

}  // namespace

namespace {

// Two ranks started with different command lines (mpirun's MPMD form "A : B").
std::string two_ranks(const std::string& rank0, const std::string& rank1) {
  return std::string(QUILL_MPIEXEC) + " -np 1 " + QUILL_BINARY + rank0 + " : -np 1 " + QUILL_BINARY + rank1 + " </dev/null";
}

int run_quiet(const std::string& cmd, std::string* output) {
  const quill::test::CommandResult r = quill::test::run_command(cmd);
  *output = r.output;
  return r.status;
}

TEST(DataParallel, RanksGivenDifferentJobsStopNamingWhatDiffers) {
  // Issue 15, defect 1: ranks with other rows, another --seed or --lr, or a config differing in a
  // value trained silently (rc 0), logging different "global" losses.
  const std::string quill = QUILL_BINARY, src = QUILL_SOURCE_DIR, rows = temp("rows-agree"), other = temp("rows-other");
  ASSERT_EQ(run(quill + " data synth --conversations 300 --row-tokens 64 --max-rows 16 --out " + rows), 0);
  ASSERT_EQ(run(quill + " data synth --conversations 300 --seed 9 --row-tokens 64 --max-rows 16 --out " + other), 0);
  const std::string config = temp("config.json");
  {
    auto j = nlohmann::json::parse(std::ifstream(src + "/configs/tiny.json"));
    j["rms_norm_eps"] = j["rms_norm_eps"].get<double>() * 10;
    std::ofstream(config) << j.dump(2);
  }
  auto flags = [&](const std::string& cfg, const std::string& r, const std::string& extra) {
    return " train --config " + cfg + " --rows " + r + " --steps 2 --global-batch 2 --quiet --dp 2 --out " +
           temp("agree-out") + extra;
  };
  const std::string tiny = src + "/configs/tiny.json";
  struct Case {
    std::string rank1, expect;
  };
  const std::string same = " --seed 3 --lr 1e-2";
  for (const Case& c : {Case{flags(tiny, rows, " --seed 4 --lr 1e-2"), "--seed (rank 1 differs from rank 0)"},
                        Case{flags(tiny, other, same), "rows (rank 1 differs from rank 0)"},
                        Case{flags(config, rows, same), "config (rank 1 differs from rank 0)"},
                        Case{flags(tiny, rows, " --seed 3 --lr 2e-2"), "--lr (rank 1 differs from rank 0)"}}) {
    std::string out;
    const int rc = run_quiet(two_ranks(flags(tiny, rows, same), c.rank1), &out);
    EXPECT_NE(rc, 0) << c.expect << "\n" << out;
    EXPECT_NE(out.find("ranks were not given the same job: " + c.expect), std::string::npos) << out;
  }
  std::string out;
  EXPECT_EQ(run_quiet(two_ranks(flags(tiny, rows, same), flags(tiny, rows, same)), &out), 0) << out;
}

TEST(DataParallel, RanksGivenDifferentOutputDirectoriesStopNamingBoth) {
  // Issue 44: under mpirun each rank may get its own arguments (a launcher script that puts
  // $OMPI_COMM_WORLD_RANK into --out); ranks with different --out or --save trained on (rc 0), rank 0
  // writing the metrics in one directory and the checkpoint shards going to several.
  const std::string quill = QUILL_BINARY, src = QUILL_SOURCE_DIR, rows = temp("rows-outputs");
  ASSERT_EQ(run(quill + " data synth --conversations 300 --row-tokens 64 --max-rows 16 --out " + rows), 0);
  const std::string job = " train --config " + src + "/configs/tiny.json --rows " + rows +
                          " --steps 1 --global-batch 2 --lr 1e-2 --seed 3 --quiet --dp 2 --out ";
  const std::string out0 = temp("outputs-0"), out1 = temp("outputs-1");
  std::string out;
  int rc = run_quiet("timeout 120 " + two_ranks(job + out0, job + out1), &out);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(rc, 124) << "the job was still running after 120 s:\n" << out;
  EXPECT_NE(out.find("the 2 ranks were not given the same outputs: --out is " + out0 + " on rank 0 but " + out1 +
                     " on rank 1"),
            std::string::npos)
      << out;
  EXPECT_FALSE(fs::exists(out0) || fs::exists(out1)) << "nothing is written";

  rc = run_quiet("timeout 120 " + two_ranks(job + out0 + " --save " + out0 + "/ckpt", job + out0 + " --save " + out1 + "/ckpt"),
                 &out);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("--save is " + out0 + "/ckpt on rank 0 but " + out1 + "/ckpt on rank 1"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(out0) || fs::exists(out1)) << "nothing is written";
}

TEST(DataParallel, AStoppedRankEndsTheJobAfterTheDistributedTimeout) {
  // Issue 15: a stopped (SIGSTOP) rank held the job for a fixed 600 s; Megatron's
  // --distributed-timeout-minutes now bounds every collective. Rank 1 runs under a shell that stops
  // it a moment after it started; rank 0 must give up after the timeout (0.05 minutes = 3 s).
  const std::string quill = QUILL_BINARY, src = QUILL_SOURCE_DIR, rows = temp("rows-stop");
  ASSERT_EQ(run(quill + " data synth --conversations 300 --row-tokens 64 --max-rows 16 --out " + rows), 0);
  const std::string pid_file = temp("stopped.pid");
  const std::string flags = " train --config " + src + "/configs/tiny.json --rows " + rows +
                            " --steps 100000 --global-batch 2 --lr 1e-2 --quiet --dp 2 --distributed-timeout-minutes 0.05 --out " +
                            temp("stop-out");
  const std::string rank1 = "sh -c '" + quill + flags + " & echo $! > " + pid_file + "; sleep 2; kill -STOP $!; wait'";
  const auto start = std::chrono::steady_clock::now();
  std::string out;
  const int rc = run_quiet("timeout 120 " + std::string(QUILL_MPIEXEC) + " -np 1 " + quill + flags + " : -np 1 " + rank1 +
                               " </dev/null",
                           &out);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (std::ifstream in(pid_file); in) {  // the stopped rank, if the launcher left it
    long pid = 0;
    in >> pid;
    if (pid > 0) ::kill(static_cast<pid_t>(pid), SIGKILL);
  }
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(rc, 124) << "the job was still running after 120 s:\n" << out;
  EXPECT_NE(out.find("did not complete within 3 s"), std::string::npos) << out;
  EXPECT_LT(seconds, 60) << out;
}

}  // namespace
