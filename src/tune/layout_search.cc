#include "tune/layout_search.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <functional>
#include <optional>
#include <utility>

#include "base/error.h"
#include "base/progress.h"
#include "parallel/layout.h"
#include "parallel/stage_split.h"
#include "plan/memory_plan.h"
#include "plan/plan_report.h"

namespace quill::tune {
namespace {

std::vector<int> divisors(int64_t n) {
  std::vector<int> out;
  for (int64_t d = 1; d <= n; ++d)
    if (n % d == 0) out.push_back(static_cast<int>(d));
  return out;
}

std::string split_name(const std::vector<int64_t>& split) {
  if (split.empty()) return "even";
  return fmt::format("first/last {}/{}", split.front(), split.back());
}

// The offload fractions tried, in steps of 0.1 (Megatron's --optimizer-offload-fraction).
constexpr std::array<double, 11> kFractions = {0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0};

OptimizerMemory optimizer_at(double fraction, bool bf16_moments) {
  OptimizerMemory m;
  m.cpu_offload = fraction > 0;
  m.offload_fraction = fraction > 0 ? fraction : 1.0;
  // With --overlap-cpu-optimizer-d2h-h2d: the pipelined copy down saves 12% of the slice's offloaded step on one
  // H200 (0.7: 1.33 against 1.51 s, A B B A in one call; bench/results/2026-12-05-h200-checks).
  m.overlap_d2h_h2d = fraction > 0;
  m.exp_avg = m.exp_avg_sq = bf16_moments ? DType::BF16 : DType::F32;
  return m;
}

// --recompute-granularity selective --recompute-modules moe_act layernorm: what quill builds of Megatron's modules.
RecomputeOptions selective_recompute() {
  RecomputeOptions o;
  o.granularity = RecomputeOptions::Granularity::Selective;
  o.moe_act = o.layernorm = true;
  return o;
}

RecomputeOptions block_recompute(int64_t layers) {
  RecomputeOptions o;
  o.granularity = RecomputeOptions::Granularity::Full;
  o.method = RecomputeOptions::Method::Block;
  o.num_layers = layers;
  return o;
}

// The smallest --recompute-method block --recompute-num-layers N (1 to `most`, the largest stage's layers)
// whose plan fits the device, with that plan; none when even N = `most` (every layer) does not. Each
// recomputed layer costs a forward per micro-batch, so the fewest that fit. Device bytes do not grow with N
// (one more recomputed layer keeps only its input): N = `most` first, whose one plan says when no N fits
// (most layouts that need offload), then a binary search below it.
std::optional<std::pair<RecomputeOptions, plan::MemoryPlan>> smallest_fitting_block(
    const std::function<plan::MemoryPlan(const RecomputeOptions&)>& plan_with, int64_t most, int64_t device_memory) {
  plan::MemoryPlan best = plan_with(block_recompute(most));
  if (best.largest().device_total() > device_memory) return std::nullopt;
  int64_t a = 1, fit = most;
  while (a < fit) {
    const int64_t mid = (a + fit) / 2;
    plan::MemoryPlan m = plan_with(block_recompute(mid));
    if (m.largest().device_total() <= device_memory) {
      best = std::move(m);
      fit = mid;
    } else {
      a = mid + 1;
    }
  }
  return std::make_pair(block_recompute(fit), std::move(best));
}

// Why a node cannot start the plan's ranks in `host_memory` as quill train checks it; empty when they
// all can (or host_memory is 0: not checked).
std::string host_problem(const plan::MemoryPlan& plan, int64_t host_memory) {
  if (host_memory <= 0) return "";
  const std::vector<plan::FitVerdict> nodes = plan::check_nodes_host_fit(plan, host_memory);
  for (size_t node = 0; node < nodes.size(); ++node)
    if (!nodes[node].fits) return fmt::format("node {}: {}", node, nodes[node].message);
  return "";
}

Candidate candidate_of(const LayoutSpec& l, const std::vector<int64_t>& split, const OptimizerMemory& optimizer,
                       const RecomputeOptions& recompute, const plan::MemoryPlan& plan) {
  Candidate c;
  c.layout = l;
  c.optimizer = optimizer;
  c.recompute = recompute;
  c.split = split_name(split);
  for (const plan::StagePlan& s : plan.stages) {
    c.stage_device_bytes.push_back(s.device_total());
    c.stage_allocator_peak_bytes.push_back(s.allocator_peak());
    c.stage_roles.push_back(s.role);
  }
  return c;
}

}  // namespace

const char* recompute_method_name(const RecomputeOptions& r) {
  return r.method == RecomputeOptions::Method::Block ? "block" : "uniform";
}

std::vector<std::string> recompute_flags(const RecomputeOptions& r) {
  if (r.selective()) {
    std::vector<std::string> f = {"--recompute-granularity", "selective", "--recompute-modules"};
    if (r.moe_act) f.push_back("moe_act");
    if (r.layernorm) f.push_back("layernorm");
    return f;
  }
  if (!r.active()) return {};
  return {"--recompute-granularity", "full", "--recompute-method", recompute_method_name(r), "--recompute-num-layers",
          std::to_string(r.num_layers)};
}

int64_t Candidate::peak_device_bytes() const {
  return stage_device_bytes.empty() ? 0 : *std::max_element(stage_device_bytes.begin(), stage_device_bytes.end());
}

std::vector<std::vector<int64_t>> megatron_splits(int64_t layers, int pp, int64_t max_imbalance) {
  std::vector<std::vector<int64_t>> out;
  if (pp <= 1 || layers < pp) return pp == 1 && layers >= 1 ? std::vector<std::vector<int64_t>>{{}} : out;
  if (layers % pp == 0) out.push_back({});  // the even split (no flags)
  for (int64_t first = 1; first < layers; ++first) {
    for (int64_t last = 1; first + last <= layers - (pp - 2); ++last) {
      if (pp == 2 && first + last != layers) continue;
      const StageSplit s = split_layers(layers, pp, first, last);
      if (!s.error.empty()) continue;
      if (layers % pp == 0 && std::all_of(s.layers.begin(), s.layers.end(), [&](int64_t n) { return n == layers / pp; }))
        continue;  // the even split, already listed
      if (max_imbalance >= 0) {
        const int64_t middle = pp > 2 ? s.layers[1] : last;
        if (std::abs(first - middle) > max_imbalance || std::abs(last - middle) > max_imbalance) continue;
      }
      out.push_back(s.layers);
    }
  }
  return out;
}

SearchResult search_layouts(const SearchRequest& q) {
  QUILL_CHECK(q.gpus >= 1, "--gpus {}: give at least one GPU", q.gpus);
  QUILL_CHECK(q.gpus_per_node >= 1, "--gpus-per-node {}: give at least one", q.gpus_per_node);
  QUILL_CHECK(q.row_tokens >= 1, "--row-tokens {}: give the row length", q.row_tokens);
  QUILL_CHECK(q.global_batch >= 1, "--global-batch {}: give at least one row per step", q.global_batch);
  SearchResult r;
  r.pruning = {
      "tensor parallelism inside a node (tp <= --gpus-per-node): its collectives are on every layer's critical path",
      fmt::format("expert parallelism {} (ep <= --gpus-per-node)", q.cross_node_ep ? "across nodes allowed" : "inside a node"),
      "expert tensor parallelism 1 (quill builds ETP 1 only), context parallelism 1, one row per micro-batch",
      "the distributed optimizer always (quill shards the optimizer state over data-parallel ranks)",
      "per layout and moment dtype, only the smallest offload fraction (steps of 0.1) that fits: more offload only "
      "adds host work and copies",
      "recompute only where it replaces offload: per layout and moment dtype that needs offload to fit, also "
      "--recompute-granularity selective --recompute-modules moe_act layernorm with the smallest offload that fits "
      "beside it, if smaller (elementwise passes and, under sequence parallelism, a gather per attention and MLP again "
      "in the backward), and where selective does not fit without offload the smallest --recompute-granularity full "
      "--recompute-method block --recompute-num-layers N that does (each recomputed layer costs one more forward per "
      "micro-batch: the fewest that fit; uniform recomputes every layer; block recompute with offload is not searched)",
      "main gradients fp32 (quill refuses --main-grads-dtype bf16)",
      fmt::format("pipeline splits: the even one, and Megatron's uneven (first, last) splits whose first and last stages "
                  "are within {} layers of the middle stages",
                  q.max_split_imbalance)};
  auto refuse = [&](const std::string& reason, const std::string& example) {
    Refusal& x = r.refused[reason];
    if (x.count++ == 0) x.example = example;
  };
  const InklingConfig& c = q.config;
  // Progress by (tp, pp) pair: each pair's splits, ep sizes and memory plans are the search's work.
  int64_t pairs = 0, pairs_done = 0;
  for (int tp : divisors(q.gpus))
    for (int pp : divisors(q.gpus / tp)) pairs += tp <= q.gpus_per_node && pp <= c.num_layers;
  Progress progress("quill tune: searching layouts", ProgressOptions::counting(q.show_progress, "(tp, pp) pairs"));
  for (int tp : divisors(q.gpus)) {
    if (tp > q.gpus_per_node) continue;
    for (int pp : divisors(q.gpus / tp)) {
      if (pp > c.num_layers) continue;
      progress.update(pairs_done++, pairs, fmt::format("{} fitting so far", r.fitting.size()));
      const int dp = q.gpus / (tp * pp);
      for (const std::vector<int64_t>& split : megatron_splits(c.num_layers, pp, q.max_split_imbalance)) {
        for (bool sp : tp > 1 ? std::vector<bool>{false, true} : std::vector<bool>{false}) {
          for (int ep : divisors(std::max<int64_t>(c.n_routed_experts, 1))) {
            if (ep > 1 && !q.cross_node_ep && ep > q.gpus_per_node) continue;
            ++r.geometries;
            LayoutSpec l;
            l.tp = tp, l.pp = pp, l.dp = dp, l.ep = ep, l.sequence_parallel = sp, l.pp_layers = split;
            const std::string name = l.describe();
            if (q.global_batch % dp != 0) {
              refuse("global batch not divisible by data parallelism", fmt::format("{}: {} rows over dp {}", name,
                                                                                 q.global_batch, dp));
              continue;
            }
            plan::PlanRequest pr;
            pr.config = c;
            pr.layout = l;
            pr.row_tokens = q.row_tokens;
            pr.global_batch = q.global_batch;
            pr.gpus_per_node = q.gpus_per_node;
            pr.freeze = q.freeze;
            pr.device = q.device;
            auto plan_at = [&](double fraction, bool bf16, const RecomputeOptions& recompute = {}) {
              pr.optimizer = optimizer_at(fraction, bf16);
              pr.recompute = recompute;
              ++r.plans;
              return plan::plan_memory(pr);
            };
            // A candidate when its nodes' hosts can start it, else refused under `host_reason`.
            auto admit = [&](const OptimizerMemory& optimizer, const RecomputeOptions& recompute,
                             const plan::MemoryPlan& plan, const std::string& host_reason) {
              const std::string host = host_problem(plan, q.host_memory);
              if (host.empty())
                r.fitting.push_back(candidate_of(l, split, optimizer, recompute, plan));
              else
                refuse(host_reason, name + ": " + host);
            };
            // The most memory-saving setting first: if it does not fit, nothing does.
            plan::MemoryPlan lightest;
            try {
              lightest = plan_at(1.0, true);
            } catch (const Error& e) {
              std::string why = e.what();
              refuse(fmt::format("quill refuses the layout: {}", why.substr(0, why.find(':'))), name + ": " + why);
              continue;
            }
            if (lightest.largest().device_total() > q.device_memory) {
              refuse("out of device memory even with offload 1.0 and bf16 moments",
                     name + ": " + plan::check_fit(lightest, q.device_memory).message);
              continue;
            }
            const std::vector<int64_t> stage_layers = resolve_stage_layers(l, c.num_layers);
            const int64_t most = *std::max_element(stage_layers.begin(), stage_layers.end());
            for (bool bf16 : {false, true}) {
              // The smallest fraction that fits (device bytes fall as the fraction grows): binary search
              // for the first fitting index in [a, fit); fit == n means none fits (bf16 fits at 1.0, known).
              const size_t n = kFractions.size();
              size_t a = 0, fit = bf16 ? n - 1 : n;
              plan::MemoryPlan best = bf16 ? lightest : plan::MemoryPlan{};
              while (a < fit) {
                const size_t mid = (a + fit) / 2;
                plan::MemoryPlan m = plan_at(kFractions[mid], bf16);
                if (m.largest().device_total() <= q.device_memory) {
                  best = std::move(m);
                  fit = mid;
                } else {
                  a = mid + 1;
                }
              }
              if (fit == n) {
                refuse("out of device memory with fp32 moments even at offload 1.0 (fits with bf16 moments)",
                       name + ": " + plan::check_fit(plan_at(1.0, false), q.device_memory).message);
                continue;
              }
              const char* moments = bf16 ? "bf16" : "fp32";
              // The smallest device-fitting offload pins the least host memory: if its startup does not fit
              // the nodes' host memory, no fraction of these moments does.
              admit(optimizer_at(kFractions[fit], bf16), {}, best,
                    fmt::format("out of host memory at startup with {} moments at the smallest offload that fits "
                                "the device", moments));
              if (fit == 0) continue;  // fits without offload: recompute would only add forwards
              // Selective first: it repeats no GEMM, so where it fits without offload no block recompute is
              // cheaper; where it does not, with the smallest offload that fits beside it (below `fit`'s).
              size_t sa = 0, sfit = fit;
              plan::MemoryPlan selective;
              while (sa < sfit) {
                const size_t mid = (sa + sfit) / 2;
                plan::MemoryPlan m = plan_at(kFractions[mid], bf16, selective_recompute());
                if (m.largest().device_total() <= q.device_memory) {
                  selective = std::move(m);
                  sfit = mid;
                } else {
                  sa = mid + 1;
                }
              }
              if (sfit < fit)
                admit(optimizer_at(kFractions[sfit], bf16), selective_recompute(), selective,
                      fmt::format("out of host memory at startup with {} moments and selective recompute", moments));
              if (sfit == 0) continue;
              const auto block = smallest_fitting_block(
                  [&](const RecomputeOptions& o) { return plan_at(0.0, bf16, o); }, most, q.device_memory);
              if (block)
                admit(optimizer_at(0.0, bf16), block->first, block->second,
                      fmt::format("out of host memory at startup with {} moments and recompute without offload",
                                  moments));
            }
          }
        }
      }
    }
  }
  progress.update(pairs, pairs, fmt::format("{} fitting", r.fitting.size()));
  progress.finish();
  return r;
}

}  // namespace quill::tune
