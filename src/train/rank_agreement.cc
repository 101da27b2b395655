#include "train/rank_agreement.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "base/error.h"
#include "base/file_util.h"
#include "ops/convert.h"
#include "ops/grouped_gemm_kernel.h"
#include "ops/kernel_trials.h"
#include "parallel/host_reduce.h"

namespace quill {

namespace {

int64_t digest(const std::string& value) {
  const std::string hex = sha256_hex(value);
  return static_cast<int64_t>(std::stoull(hex.substr(0, 16), nullptr, 16));
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : " ") + x;
  return s;
}

}  // namespace

namespace {
std::string rows_identity(const RowsReader& rows) {
  return fmt::format("rows_sha256 {}, {} rows of {} tokens", rows.manifest().value("rows_sha256", ""), rows.rows(),
                     rows.row_tokens());
}
}  // namespace

std::vector<AgreementField> agreement_fields(const TrainOptions& o, const InklingConfig& config, const RowsReader& rows,
                                             const RowsReader* valid_rows) {
  const LrSchedule& s = o.lr;
  const AdamWConfig& a = o.adam;
  return {
      {"config", config_to_hf_json(config)},
      {"rows", rows_identity(rows)},
      {"--valid-rows", valid_rows ? rows_identity(*valid_rows) : "none"},
      {"--eval-interval", std::to_string(o.eval_interval)},
      {"--eval-iters", std::to_string(o.eval_iters)},
      {"--seed", std::to_string(o.seed)},
      {"--init", o.init_dir.empty() ? "none (random initialisation)" : "a checkpoint"},
      {"--steps", std::to_string(o.steps)},
      {"--global-batch", std::to_string(o.global_batch)},
      {"--lr", fmt::format("{}", s.max_lr)},
      {"--min-lr", fmt::format("{}", s.min_lr)},
      {"--warmup-fraction", fmt::format("{} (warm-up steps {})", s.warmup_fraction, s.warmup_steps)},
      {"--lr-decay-style", s.style},
      {"--lr-decay-steps", std::to_string(s.decay_steps)},
      {"--weight-decay", fmt::format("{}", a.weight_decay)},
      {"--beta1", fmt::format("{}", a.beta1)},
      {"--beta2", fmt::format("{}", a.beta2)},
      {"--adam-eps", fmt::format("{}", a.eps)},
      {"--clip-grad", fmt::format("{}", a.clip_grad)},
      {"--freeze", joined(o.freeze_patterns)},
      {"--loss-vocab", o.loss_over_padded_vocab ? "padded" : "unpadded"},
      {"--moe-shared-expert-overlap", o.moe_shared_expert_overlap ? "on" : "off"},
      {"--tp-comm-overlap", o.tp_comm_overlap ? "on" : "off"},
      {"--delay-wgrad-compute", o.delay_wgrad_compute ? "on" : "off"},
      {"--moe-expert-wgrad-micro-batches", std::to_string(o.moe_expert_wgrad_micro_batches)},
      {"--overlap-moe-expert-parallel-comm", o.overlap_moe_ep_comm ? "on" : "off"},
      {"--recompute-granularity/--recompute-modules", o.recompute.describe()},
      {"--fp8-recipe", o.fp8.describe()},
      // The GPU kernels each rank runs: the forms give other float bits, and the summary records one rank's.
      {"--attention-dq-order", o.attention_dq_arrival_order ? "arrival" : "fixed"},
      {"--grouped-gemm-kernel", grouped_gemm_kernel_name(o.grouped_gemm_kernel)},
      {"--grouped-wgrad-kernel", grouped_gemm_kernel_name(o.grouped_wgrad_kernel)},
      {"--grouped-wgrad-form", kernel_trial_name(o.grouped_wgrad_form)},
      {"--attention-bias-rows", kernel_trial_name(o.attention_bias_rows)},
      {"--attention-forward-form", kernel_trial_name(o.attention_forward_form)},
      {"--attention-backward-form", kernel_trial_name(o.attention_backward_form)},
      {"--load", o.resume_dir.empty() ? "none" : "a checkpoint"},
      {"--ckpt-step", std::to_string(o.ckpt_step)},
      {"--start-fresh-if-no-checkpoint", o.start_fresh_if_no_checkpoint ? "yes" : "no"},
      // A background save adds a collective at every step boundary while it is in flight: all ranks or none.
      {"--async-save", o.async_save ? "yes" : "no"},
      // Verifying a checkpoint's shards is collective: every rank must do it or none.
      {"--no-verify-checkpoint", o.verify_checkpoint ? "no" : "yes"},
      {"--no-verify-checkpoint-rows", o.verify_checkpoint_rows ? "no" : "yes"},
      {"--stop-after", std::to_string(o.stop_after)},
      {"--save", o.save_dir.empty() ? "none" : "a directory"},
      {"--save-interval", std::to_string(o.save_interval)},
      {"--save-hf", o.save_hf ? "yes" : "no"},
      {"--dump-grads-step", std::to_string(o.dump_grads_step)},
      {"--distributed-timeout-minutes", fmt::format("{}", o.distributed_timeout_minutes)},
  };
}

std::optional<std::string> describe_disagreement(const std::vector<AgreementField>& mine, const std::vector<int64_t>& digests,
                                                 int ranks, int my_rank) {
  const size_t n = mine.size();
  QUILL_CHECK(digests.size() == n * static_cast<size_t>(ranks), "rank agreement: {} digests for {} ranks of {} fields",
              digests.size(), ranks, n);
  std::string what;
  for (size_t f = 0; f < n; ++f) {
    std::vector<int> differ;
    for (int r = 1; r < ranks; ++r)
      if (digests[static_cast<size_t>(r) * n + f] != digests[f]) differ.push_back(r);
    if (differ.empty()) continue;
    std::string list;
    for (int r : differ) list += (list.empty() ? "" : ", ") + std::to_string(r);
    what += fmt::format("{}{} (rank{} {} differ{} from rank 0)", what.empty() ? "" : "; ", mine[f].name,
                        differ.size() > 1 ? "s" : "", list, differ.size() > 1 ? "" : "s");
  }
  if (what.empty()) return std::nullopt;
  std::string values;
  for (size_t f = 0; f < n; ++f) {
    bool differs = false;
    for (int r = 1; r < ranks; ++r) differs = differs || digests[static_cast<size_t>(r) * n + f] != digests[f];
    if (differs && mine[f].name != "config") values += fmt::format("; here {} is {:.120}", mine[f].name, mine[f].value);
  }
  return fmt::format("the {} ranks were not given the same job: {}. Start every rank with the same "
                     "command line, config and rows (this is rank {}{})",
                     ranks, what, my_rank, values);
}

void check_ranks_agree(Comm& dp, const DeviceContext& ctx, const std::vector<AgreementField>& fields) {
  const int64_t n = static_cast<int64_t>(fields.size());
  Tensor mine = Tensor::empty({n}, DType::I64);
  for (int64_t f = 0; f < n; ++f) mine.data_as<int64_t>()[f] = digest(fields[static_cast<size_t>(f)].value);
  Tensor all = Tensor::empty({n * dp.size()}, DType::I64);
  if (dp.device() == Device::CPU) {
    dp.all_gather(mine, all);
  } else {
    Tensor in = Tensor::empty({n}, DType::I64, *ctx.allocator), out = Tensor::empty({n * dp.size()}, DType::I64, *ctx.allocator);
    ops::transfer(ctx, mine, in);
    dp.all_gather(in, out);
    ops::transfer(ctx, out, all);
  }
  std::vector<int64_t> digests(all.data_as<int64_t>(), all.data_as<int64_t>() + all.numel());
  if (std::optional<std::string> problem = describe_disagreement(fields, digests, dp.size(), dp.rank()))
    QUILL_FAIL("{}", *problem);
}

void check_ranks_share_outputs(Comm& world, const DeviceContext& ctx, const TrainOptions& o) {
  namespace fs = std::filesystem;
  const std::pair<const char*, std::string> flags[] = {{"--out", o.out_dir}, {"--save", o.save_dir}};
  // Every path ended by a NUL (which no path holds) in one text, so that one gathering serves them all.
  std::string mine;
  for (const auto& flag : flags)
    mine += (flag.second.empty() ? "not given" : fs::weakly_canonical(fs::absolute(flag.second)).string()) + '\0';
  // A digest first, of one size whatever the paths, so that a run's collective bytes do not depend on its
  // paths (a simulated rank's ledger equals the real rank's: docs/simulate-rank.md); the texts are gathered
  // only to name a difference, which every rank sees alike.
  Tensor digest_here = Tensor::empty({1}, DType::I64), digests = Tensor::empty({world.size()}, DType::I64);
  digest_here.data_as<int64_t>()[0] = digest(mine);
  all_gather_host(world, ctx, digest_here, digests);
  const int64_t* d = digests.data_as<int64_t>();
  if (std::all_of(d, d + world.size(), [&](int64_t x) { return x == d[0]; })) return;
  std::vector<std::vector<std::string>> paths;  // [rank][flag]
  for (const std::string& text : all_gather_strings(&world, ctx, mine)) {
    std::vector<std::string>& p = paths.emplace_back();
    for (size_t begin = 0, end; (end = text.find('\0', begin)) != std::string::npos; begin = end + 1)
      p.push_back(text.substr(begin, end - begin));
  }
  for (size_t f = 0; f < std::size(flags); ++f)
    for (size_t r = 1; r < paths.size(); ++r)
      QUILL_CHECK(paths[r][f] == paths[0][f],
                  "the {} ranks were not given the same outputs: {} is {} on rank 0 but {} on rank {}; give every rank "
                  "the same {} (one run writes into one directory)",
                  paths.size(), flags[f].first, paths[0][f], paths[r][f], r, flags[f].first);
}

int agreed_stop_signal(Comm* world, const DeviceContext& ctx, int mine) {
  return static_cast<int>(max_over(world, ctx, static_cast<double>(mine)));
}

}  // namespace quill
